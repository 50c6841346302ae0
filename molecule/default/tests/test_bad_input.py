"""The bad-input table (tests/bad_inputs.yml): one deploy.yml over many aliases of the lab host.

Every case stops in the plan, naming its variable (secrets: the variable and the fault only), and no managed
file on the host changes. One more run shows a bad value on the last of several hosts stops all of them.
"""

from __future__ import annotations

import sys

import pytest

from conftest import MANAGED, PORT_BASE, ROOT, instance, inventory

sys.path.insert(0, str(ROOT / "tests"))
import bad_inputs

CASES = bad_inputs.CASES["deploy"]


@pytest.fixture(scope="module")
def outcome(host, tmp_path_factory):
    work = tmp_path_factory.mktemp("bad")
    lab = instance()
    base = {
        "ansible_host": lab["address"],
        "ansible_port": lab["port"],
        "ansible_user": lab["user"],
        "ansible_ssh_private_key_file": lab["identity_file"],
        "sglang_lab_port_base": PORT_BASE,
    }
    hosts = work / "hosts.yml"
    bad_inputs.write_inventory(hosts, "sglang_dsv4", CASES, base)
    before = host.check_output(f"sha256sum {MANAGED}")
    # The lab group_vars come with molecule's inventory; the aliases are all of the table's cases.
    result = bad_inputs.run("deploy.yml", [inventory() + "/group_vars/..", str(hosts)], work, ["--limit", "bad-*"])
    return {**result, "before": before, "after": host.check_output(f"sha256sum {MANAGED}")}


def test_every_case_is_refused_with_its_message(outcome):
    assert outcome["rc"] != 0
    assert bad_inputs.mismatches(CASES, outcome) == []


def test_nothing_changed_and_nothing_past_the_plan_ran(outcome):
    assert outcome["before"] == outcome["after"]
    assert "generation_config.json.orig" in outcome["before"]
    assert "PLAY [Apply" not in outcome["output"] or "skipping: no hosts matched" in outcome["output"]
    assert "Take the rollout lock" not in outcome["output"]
