"""The roles are functions of their parameters: run by name in a playbook of one's own, with no plan before them,
they converge the host to exactly what deploy.yml would (the next deploy.yml plans nothing), and a role handed a
fence whose lock another run holds writes nothing (the module that writes checks the lock itself)."""

from __future__ import annotations

import json

import pytest
from labtools import flat

from conftest import GENCONFIG, ROOT, deploy, playbook, recap, text

ROLES_ALONE = str(ROOT / "molecule/default/playbooks/roles_alone.yml")
LOCK = "/run/sglang-dsv4-deploy"


def pids(host) -> dict[str, str]:
    return {u: host.service(f"sglang-dsv4-{u}").systemd_properties["MainPID"] for u in ("prefill", "decode", "router")}


@pytest.fixture
def back_to_the_inventory(host):
    yield
    if host.file(LOCK).exists:
        host.run(f"rm -rf {LOCK}")
    out = deploy()
    assert out.returncode == 0, text(out)[-3000:]


@pytest.mark.usefixtures("back_to_the_inventory")
def test_the_roles_on_their_own_converge_the_host_as_deploy_would(host):
    before = pids(host)
    change = json.dumps({"sglang_genconfig_temperature": 0.55})
    alone = playbook(ROLES_ALONE, "-e", change)
    assert alone.returncode == 0, text(alone)[-4000:]
    assert json.loads(host.file(GENCONFIG).content_string)["temperature"] == 0.55
    after = pids(host)
    # Prefill and decode restarted together, from the new file; the router, whose inputs did not change, did not.
    assert after["prefill"] != before["prefill"] and after["decode"] != before["decode"]
    assert after["router"] == before["router"]
    # deploy.yml finds nothing to do: the roles wrote exactly the desired state, and every service runs from it.
    again = deploy("-e", change)
    assert again.returncode == 0, text(again)[-3000:]
    assert "apply to 0 of 1 host(s): none" in again.stdout and "changed=0" in recap(again.stdout)
    assert pids(host) == after


@pytest.mark.usefixtures("back_to_the_inventory")
def test_a_role_handed_a_lost_fence_writes_nothing(host):
    """The lock is held by another run: the generation config's writer refuses, naming that run; nothing changed."""
    before = host.file(GENCONFIG).content_string
    owner = {"run_id": "20261203T000000Z-1", "owner": "another run", "taken": 1, "lease_until": 4102444800}
    host.run(f"mkdir -m 0700 {LOCK} && printf '%s' '{json.dumps(owner)}' > {LOCK}/owner.json")
    assert host.file(f"{LOCK}/owner.json").exists
    fence = {"path": LOCK, "run_id": "20261203T000000Z-2", "lease": 600}
    alone = playbook(
        ROLES_ALONE, "-e", json.dumps({"sglang_genconfig_temperature": 0.55, "sglang_genconfig_fence": fence})
    )
    assert alone.returncode != 0
    assert "no longer holds the rollout lock" in flat(alone) and "held by another run (run 20261203T000000Z-1)" in flat(
        alone
    )
    assert host.file(GENCONFIG).content_string == before
    assert json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"] == owner["run_id"]
