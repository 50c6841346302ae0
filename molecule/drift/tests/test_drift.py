"""After drift was reported, healed at start and the unit put back by deploy.yml (molecule verify)."""

from __future__ import annotations

import json

GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"


def test_file_holds_the_managed_defaults_and_upstream_keys(host):
    config = json.loads(host.file(GENCONFIG).content_string)
    assert (config["temperature"], config["top_p"], config["do_sample"]) == (0.6, 0.95, True)
    assert config["eos_token_id"] == [1, 128803, 128804]


def test_hand_edit_is_gone(host):
    assert "# edited by hand" not in host.file("/etc/systemd/system/sglang-dsv4-decode.service").content_string


def test_healer_is_installed_root_owned(host):
    healer = host.file("/usr/local/libexec/sglang-dsv4/sglang_helper.py")
    assert (healer.user, healer.mode) == ("root", 0o755)
    for module in ("sglang_files", "sglang_sampling_defaults", "sglang_records", "sglang_metrics"):
        installed = host.file(f"/usr/local/libexec/sglang-dsv4/{module}.py")
        assert (installed.user, installed.mode) == ("root", 0o644), module
    managed = json.loads(host.file("/etc/sglang-dsv4/sampling-defaults.json").content_string)
    assert managed["temperature"] == 0.6


def test_services_run(host):
    for unit in ("prefill", "decode", "router"):
        assert host.service(f"sglang-dsv4-{unit}").is_running
