"""The fleet after a rollout that failed on its second host (molecule verify, after the side effect)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
# The side effect ends with a paused run and its resume back to the inventory's defaults (it checks what the failed
# rollout left before that, and what the pause left in between).
EXPECTED_TEMPERATURE = {"dsv4-fleet-1": 0.6, "dsv4-fleet-2": 0.6, "dsv4-fleet-3": 0.6}


def name(host) -> str:
    return host.check_output("hostname")


def test_each_host_holds_the_temperature_the_resumed_run_left(host):
    assert json.loads(host.file(GENCONFIG).content_string)["temperature"] == EXPECTED_TEMPERATURE[name(host)]


@pytest.mark.parametrize("unit", ["prefill", "decode", "router"])
def test_every_host_serves_again(host, unit):
    assert host.service(f"sglang-dsv4-{unit}").is_running


def test_the_failed_host_got_its_settings_back(host):
    env = host.file("/etc/sglang-dsv4/prefill.env").content_string
    assert "SGLANG_LAB_FAIL_START=0" in env


def test_each_host_keeps_each_runs_own_snapshot_covering_every_file_it_may_change(host):
    manifests = host.check_output("ls -t /var/lib/sglang-dsv4-rollout/*/manifest.json").split()
    assert manifests
    assert host.file("/var/lib/sglang-dsv4-rollout").mode == 0o700
    latest = json.loads(host.file(manifests[0]).content_string)
    everything = latest["saved"] + latest["missing"]
    for path in (
        GENCONFIG,
        "/etc/systemd/system/sglang-dsv4-prefill.service",
        "/etc/sglang-dsv4/credentials/router",
        "/etc/sglang-dsv4/credentials/router-admin",
        "/etc/sglang-dsv4/sampling-defaults.json",
    ):
        assert path in everything


def test_each_lab_host_runs_its_services_in_cgroups_of_its_own(host):
    """LAB: each lab host boots in a cgroup of its own (roles/lab_hosts), so that a unit stopped on one host never
    reaches another host's unit of the same name. Read on the controller, where every host's groups are seen."""
    unified = next(p for p in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup") if os.path.exists(f"{p}/cgroup.procs"))
    for unit in ("prefill", "decode", "router"):
        own = Path(unified, "sglang-dsv4-lab", name(host), f"payload/system.slice/sglang-dsv4-{unit}.service")
        assert len(own.joinpath("cgroup.procs").read_text().split()) >= 1, own
        shared = Path(unified, f"payload/system.slice/sglang-dsv4-{unit}.service/cgroup.procs")
        assert not shared.exists() or shared.read_text() == "", f"{shared} holds processes of lab hosts"
