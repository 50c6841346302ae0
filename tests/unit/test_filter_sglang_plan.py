"""The fleet plan's filters (plugins/filter/sglang_plan.py): apply order, digests without secrets, lock verdicts."""

from __future__ import annotations

import hashlib

import pytest
from ansible_collections.dsv4.sglang.plugins.filter import sglang_plan as f
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_plan as plan


def test_apply_hosts_keep_the_given_inventory_order_whatever_order_plans_have():
    hosts = ["fleet-1", "fleet-2", "fleet-3", "fleet-4"]
    plans = [{"empty": False}, {"empty": True}, {"empty": False}, {"empty": False}]
    assert f.sglang_apply_hosts(hosts, plans) == ["fleet-1", "fleet-3", "fleet-4"]


def test_file_digests_never_carry_secret_or_env_file_content():
    files = [
        {"path": "/etc/a.env", "content": "HF_TOKEN=x\n", "mode": "0600", "private": True, "role": "services"},
        {"path": "/etc/cred", "content": "key", "mode": "0600", "secret": True, "role": "services"},
        {"path": "/etc/gone", "content": None, "mode": "0600", "secret": True, "role": "services"},
        {"path": "/usr/x.py", "content": "print()\n", "mode": "0755", "role": "runtime"},
    ]
    out = f.sglang_file_digests(files)
    assert [o["content"] for o in out] == [None, None, None, "print()\n"]
    assert out[0]["sha256"] == hashlib.sha256(b"HF_TOKEN=x\n").hexdigest() and out[2]["sha256"] is None
    assert [o["role"] for o in out] == ["services", "services", "services", "runtime"]


def test_lock_verdicts():
    live = {"run_id": "20260101T000000Z-1", "owner": "a@b", "age": 5, "expired": False, "unreadable": False}
    assert f.sglang_lock_verdict(None) == {"allowed": True, "breaks": False, "why": ""}
    assert not f.sglang_lock_verdict(live, "true")["allowed"]
    assert f.sglang_lock_verdict(live, "20260101T000000Z-1")["breaks"]
    assert f.sglang_lock_verdict({**live, "expired": True}, "true")["allowed"]
    assert not f.sglang_lock_verdict(live)["allowed"]


def test_the_table_shows_files_held_outside_the_tags():
    plan = {
        "empty": False,
        "files": ["/m/generation_config.json"],
        "held": ["/etc/sglang-dsv4/prefill.env"],
        "restart": {},
    }
    assert any(
        "held (outside --tags): /etc/sglang-dsv4/prefill.env" in line for line in f.sglang_plan_table([plan], ["h"])
    )


def test_the_table_says_which_release_each_group_moves_from_and_to():
    plan = {
        "empty": False,
        "releases": [
            {
                "group": "router",
                "id": "b2",
                "describe": "sglang-router 0.3.2",
                "ready": True,
                "running": ["a1"],
                "running_describe": ["sglang-router 0.3.1"],
            },
            {"group": "servers", "id": "s1", "describe": "sglang 0.5.23", "ready": True, "running": ["s1"]},
            {"group": "servers", "id": "s2", "describe": "sglang 0.5.23", "ready": False, "running": []},
        ],
    }
    lines = " ".join(" ".join(f.sglang_plan_table([plan], ["h"])).split())
    assert "runtime router: release a1 (sglang-router 0.3.1) -> b2 (sglang-router 0.3.2), built" in lines
    assert "runtime servers: release none running -> s2 (sglang 0.5.23), to build" in lines
    # A group that keeps running its release gets no line.
    assert "-> s1" not in lines


def test_a_key_files_digest_is_keyed_so_the_arguments_are_no_oracle_for_the_key():
    """A plain sha256 of a key, printed with the host read's arguments at -vvv, lets anyone test guesses offline;
    the HMAC under the run's own key (a no_log argument) does not, and the host compares it all the same."""
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import KEYED, keyed_digest

    files = [{"path": "/etc/cred", "content": "weak-key-0000000", "mode": "0600", "secret": True, "role": "services"}]
    out = f.sglang_file_digests(files, "run-key-1")
    assert out[0]["sha256"].startswith(KEYED)
    assert hashlib.sha256(b"weak-key-0000000").hexdigest() not in out[0]["sha256"]
    assert out[0]["sha256"] == keyed_digest(b"weak-key-0000000", "run-key-1")
    assert f.sglang_file_digests(files, "run-key-2")[0]["sha256"] != out[0]["sha256"]


def test_the_table_says_which_weights_each_host_holds_and_which_its_servers_started_from():
    running = {"sglang-dsv4-prefill": "sha256:aaaa", "sglang-dsv4-decode": "sha256:aaaa"}
    plan = {"empty": True, "weights": {"version": "sha256:aaaa", "files": 61, "running": running}}
    lines = " ".join(" ".join(f.sglang_plan_table([plan], ["h"])).split())
    assert "weights sha256:aaaa (61 weight files), running" in lines
    moved = {**plan["weights"], "version": "sha256:bbbb", "running": {**running, "sglang-dsv4-decode": None}}
    lines = " ".join(" ".join(f.sglang_plan_table([{"empty": False, "weights": moved}], ["h"])).split())
    assert (
        "weights sha256:bbbb (61 weight files); started from: sglang-dsv4-decode unknown, sglang-dsv4-prefill"
        " sha256:aaaa" in lines
    )
    # Weights that cannot be read have no version: the table says why, never a digest.
    unknown = {"version": None, "files": 0, "running": running, "unreadable": "sglang_common_model_path=/m: gone"}
    lines = " ".join(" ".join(f.sglang_plan_table([{"empty": False, "weights": unknown}], ["h"])).split())
    assert "weights: unknown (sglang_common_model_path=/m: gone)" in lines
    assert "sha256" not in lines.split("weights:")[1]


def test_a_pool_hosts_plan_restarts_its_servers_with_the_pools_and_says_why():
    empty = {"files": [], "restart": {"servers": [], "router": []}, "restart_servers": False, "empty": True}
    changing = {**empty, "restart": {"servers": ["sglang-dsv4-decode: its inputs change in this run"], "router": []}}
    changing = {**changing, "restart_servers": True, "empty": False}
    pooled = f.sglang_pool_restart(empty, {"d1": changing, "p2": empty}, True)
    assert pooled["pool_restart"] == ["d1 restarts its servers (sglang-dsv4-decode: its inputs change in this run)"]
    assert pooled["restart"]["servers"] == ["pool: " + pooled["pool_restart"][0]]
    assert pooled["restart_servers"] and not pooled["empty"]
    # Nothing restarts elsewhere in the pool: its plan as it was.
    assert f.sglang_pool_restart(empty, {"p2": empty}, True) == empty
    assert f.sglang_pool_restart(empty, {}, True) == empty
    # The host without servers (the pool's router host) drains the pool around the restart instead.
    router = f.sglang_pool_restart(empty, {"d1": changing}, False)
    assert router["drain_pool"] and not router["empty"] and not router["restart_servers"]
    assert router["other"] == ["drain the pool's workers while its servers restart (" + pooled["pool_restart"][0] + ")"]


def test_the_table_says_a_pool_hosts_servers_are_drained_by_its_router_host():
    plan = {
        "files": [],
        "restart": {"servers": ["sglang-dsv4-prefill: its inputs change in this run"], "router": []},
        "restart_servers": True,
        "empty": False,
        "drain": {"enabled": True, "notice": 10, "timeout": 300, "on_timeout": "stop"},
        "in_pool": "pd-a",
    }
    lines = f.sglang_plan_table([plan], ["p1"])
    assert any("pool pd-a: its router host takes the pool's workers out of rotation" in line for line in lines)
    assert not any("drain before the restart" in line for line in lines)
    alone = f.sglang_plan_table([{**plan, "in_pool": None}], ["gpu-01"])
    assert any("drain before the restart: out of rotation, 10 s" in line for line in alone)


# xPyD: a pool of two prefill hosts (p1, p2), a decode host (d1) and a router host (r1); each kind of change as the
# plan's read sees each host's services (CHANGING: its inputs change in this run) and as the restart handler's read
# sees them once the roles wrote (STALE: started from inputs that have changed since), or a new member (not running).
POOL_GROUPS = {
    "p1": {"sglang-dsv4-prefill": "servers"},
    "p2": {"sglang-dsv4-prefill": "servers"},
    "d1": {"sglang-dsv4-decode": "servers"},
    "r1": {"sglang-dsv4-router": "router"},
}
CHANGES = {
    "sampling": {"p1", "p2", "d1"},
    "one member's flags": {"d1"},
    "weights": {"p1", "p2", "d1"},
    "a router release": {"r1"},
    "a new member": {"p2"},
}


def _statuses(host: str, change: str, written: bool) -> dict[str, str]:
    if host not in CHANGES[change]:
        return dict.fromkeys(POOL_GROUPS[host], plan.CURRENT)
    if change == "a new member":
        return dict.fromkeys(POOL_GROUPS[host], "not running")
    return dict.fromkeys(POOL_GROUPS[host], plan.STALE if written else plan.CHANGING)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_restart_handler_decides_for_each_host_of_a_pool_what_the_plan_said(change):
    """The plan (each host's read, then the pool's filter) and the restart handler (the host's read after the writes,
    with the reasons the open handed over) restart the same groups on every host of the pool."""
    own = {host: plan.decide([], _statuses(host, change, written=False), POOL_GROUPS[host]) for host in POOL_GROUPS}
    planned = {
        host: f.sglang_pool_restart(
            own[host],
            {other: own[other] for other in POOL_GROUPS if other != host},
            "servers" in POOL_GROUPS[host].values(),
        )
        for host in POOL_GROUPS
    }
    for host, groups in POOL_GROUPS.items():
        pool = planned[host].get("pool_restart", [])
        handler = plan.decide([], _statuses(host, change, written=True), groups, pool=pool)
        said = planned[host]
        assert (handler["restart_servers"], handler["restart_router"]) == (
            said["restart_servers"],
            said["restart_router"],
        ), (change, host, said["restart"], handler["restart"])
        assert handler["drain_pool"] == bool(said.get("drain_pool")), (change, host)
