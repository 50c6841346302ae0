"""The monitoring cases of the bad-input table (tests/bad_inputs.yml): one playbooks/monitoring.yml over many
aliases of dsv4-mon-1. Every case stops before any change, naming its variable (secrets: the variable only),
and no file of the monitoring on the host changes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from conftest import GPU_HOSTS, ROOT, ssh

sys.path.insert(0, str(ROOT / "tests"))
import bad_inputs

CASES = bad_inputs.CASES["monitoring"]
WATCHED = (
    "/etc/prometheus/prometheus.yml /etc/prometheus/sglang-dsv4.rules.yml /etc/default/prometheus "
    "/etc/default/prometheus-node-exporter /etc/systemd/system/sglang-dsv4-defaults-metrics.*"
)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    work = tmp_path_factory.mktemp("bad")
    lab = {i["instance"]: i for i in yaml.safe_load(Path(os.environ["MOLECULE_INSTANCE_CONFIG"]).read_text())}
    target = lab["dsv4-mon-1"]
    base = {
        "ansible_host": target["address"],
        "ansible_port": target["port"],
        "ansible_user": target["user"],
        "ansible_ssh_private_key_file": target["identity_file"],
        "sglang_lab_port_base": GPU_HOSTS["dsv4-mon-1"],
    }
    hosts = work / "hosts.yml"
    bad_inputs.write_inventory(hosts, "sglang_dsv4", CASES, base)
    before = ssh("dsv4-mon-1", f"sha256sum {WATCHED}")
    inventory = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")
    inventories = [inventory + "/group_vars/..", str(hosts)]
    result = bad_inputs.run("playbooks/monitoring.yml", inventories, work, ["--limit", "bad-*"])
    return {**result, "before": before, "after": ssh("dsv4-mon-1", f"sha256sum {WATCHED}")}


def test_every_case_is_refused_with_its_message(outcome):
    assert outcome["rc"] != 0
    assert bad_inputs.mismatches(CASES, outcome) == []


def test_nothing_changed(outcome):
    assert outcome["before"] == outcome["after"]
    assert "sglang-dsv4-defaults-metrics.timer" in outcome["before"]
    assert "changed:" not in outcome["output"]
