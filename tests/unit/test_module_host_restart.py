"""A host's restart in one call (modules/sglang_host_restart.py): decided from the files on disk, then the drain, the
restart and the undrain in that order; a drain that timed out stops before any restart; the lab fault points between
them, refused off the lab; a kill at a point ends the call there; the rollback's proof from the host."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_host_read, sglang_lab_fault
from ansible_collections.dsv4.sglang.plugins.modules import sglang_host_restart as host_restart

from tests.unit.fake_module import DoneError, FailedError, Module


class KilledError(BaseException):
    """os._exit at a kill point, caught."""


UNITS = [
    {"name": "sglang-dsv4-prefill", "group": "servers", "inputs": [], "health_url": "http://127.0.0.1:1/health"},
    {"name": "sglang-dsv4-decode", "group": "servers", "inputs": [], "health_url": "http://127.0.0.1:2/health"},
    {"name": "sglang-dsv4-router", "group": "router", "inputs": [], "health_url": "http://127.0.0.1:3/readiness"},
]


def unit(status: str = "current", installed: bool = True, active: str = "active") -> dict:
    return {"status": status, "installed": installed, "active": active, "need_reload": False}


@pytest.fixture
def host(tmp_path, monkeypatch):
    """The call with every step recorded in order: the read (its plan set by the test), drain, restart, restore."""
    steps: list[tuple[str, dict]] = []
    world = {
        "plan": {"restart_servers": True, "restart_router": False, "restart": {"servers": ["x"], "router": []}},
        "units": {u["name"]: unit() for u in UNITS},
        "drained": {"changed": True, "timed_out": False, "in_flight": 0, "unreadable": [], "seconds": 1.5},
        "reads": 0,
    }

    def read_disk(module, proof_failures, pool=None):
        world["reads"] += 1
        steps.append(("read", {"proof_failures": proof_failures, "pool": pool}))
        return {"plan": world["plan"], "units": world["units"]}

    def drain(module, params):
        steps.append(("drain", params))
        return dict(world["drained"])

    def restart(module, params, issued=None, nudge=None):
        steps.append(("restart", {**params, "nudge": nudge}))
        if issued:
            issued()
        return {"changed": bool(params["restart"]), "waited": 2.0}

    def restore(module, params):
        steps.append(("restore", params))
        return {"changed": True, "seconds": 0.5, "workers": []}

    monkeypatch.setattr(host_restart, "read_disk", read_disk)
    monkeypatch.setattr(host_restart, "drain", drain)
    monkeypatch.setattr(host_restart, "restart", restart)
    monkeypatch.setattr(host_restart, "restore", restore)
    monkeypatch.setattr(host_restart, "registration_nudge", lambda *args: ("nudge", *args))
    marker = tmp_path / "lab-host"
    marker.write_text("lab\n")
    monkeypatch.setattr(sglang_lab_fault, "LAB_MARKER", str(marker))
    monkeypatch.setattr(sglang_lab_fault, "REACHED", str(tmp_path / "reached.json"))
    params = {
        "units": UNITS,
        "target": "sglang-dsv4.target",
        "generation_config": "/srv/models/m/generation_config.json",
        "record_dir": "/run/sglang-dsv4",
        "lock_path": "/run/sglang-dsv4-deploy",
        "proof_failures": {},
        "pool_restart": [],
        "rotation": {
            "router_url": "http://127.0.0.1:3",
            "held_by_pool": False,
            "pool_refusal": "",
            "admin_credential": "/run/credentials/sglang-dsv4-router.service/admin-key",
            "state_file": "/run/sglang-dsv4/drain.json",
            "metrics_urls": [],
            "drain": True,
            "drain_timeout": 300,
            "on_timeout": "stop",
            "notice_seconds": 10,
            "guard": {"helper": "/h"},
        },
        "timeout": 1800,
        "orphans": [],
        "unit_dir": "/etc/systemd/system",
        "secret_files": [],
        "prove": False,
        "fence": {"path": "/run/sglang-dsv4-deploy", "run_id": "R1", "lease": 600},
        "lab_fault": None,
    }
    return {"params": params, "steps": steps, "world": world, "tmp": tmp_path, "marker": marker}


def done(params) -> dict:
    with pytest.raises(DoneError) as result:
        host_restart.host_restart(Module(**params))
    return result.value.args[0]


def failed(params) -> dict:
    with pytest.raises(FailedError) as result:
        host_restart.host_restart(Module(**params))
    return result.value.args[0]


def names(steps) -> list[str]:
    return [name for name, _unused in steps]


def test_one_call_decides_drains_restarts_prefill_and_decode_together_and_puts_back(host):
    result = done(host["params"])
    assert names(host["steps"]) == ["read", "drain", "restart", "restore"]
    restart = dict(host["steps"])["restart"]
    assert restart["restart"] == [["sglang-dsv4-prefill", "sglang-dsv4-decode"]] and restart["daemon_reload"]
    # A drained router is waited for by the undrain, not the restart.
    assert [u["name"] for u in restart["wait"]] == ["sglang-dsv4-prefill", "sglang-dsv4-decode"]
    assert dict(host["steps"])["drain"]["guard"] == {"helper": "/h"}
    assert dict(host["steps"])["restore"]["router_restarted"] is False
    assert result["changed"] is True and result["waited"] == 4.0


def test_a_router_that_restarts_is_its_own_group_and_is_waited_for(host):
    host["world"]["plan"] = {"restart_servers": False, "restart_router": True, "restart": {}}
    done(host["params"])
    restart = dict(host["steps"])["restart"]
    assert restart["restart"] == [["sglang-dsv4-router"]]
    assert [u["name"] for u in restart["wait"]] == ["sglang-dsv4-router"]
    assert dict(host["steps"])["restore"]["router_restarted"] is True
    # While it starts, the drain's saved workers it does not list are sent again (its own registration can be lost).
    rotation = host["params"]["rotation"]
    assert restart["nudge"] == (
        "nudge",
        "http://127.0.0.1:3",
        rotation["admin_credential"],
        rotation["state_file"],
        "sglang-dsv4-router",
        ["http://127.0.0.1:1", "http://127.0.0.1:2"],
    )
    # Servers alone: no router starts, nothing to nudge.
    host["steps"].clear()
    host["world"]["plan"] = {"restart_servers": True, "restart_router": False, "restart": {}}
    done(host["params"])
    assert dict(host["steps"])["restart"]["nudge"] is None


def test_without_a_drain_the_router_is_waited_for_with_the_servers(host):
    host["params"]["rotation"]["drain"] = False
    done(host["params"])
    assert names(host["steps"]) == ["read", "restart", "restore"]
    assert len(dict(host["steps"])["restart"]["wait"]) == 3


def test_nothing_to_restart_drains_nothing_and_still_ends_an_earlier_drain(host):
    host["world"]["plan"] = {"restart_servers": False, "restart_router": False, "restart": {}}
    result = done(host["params"])
    assert names(host["steps"]) == ["read", "restart", "restore"]
    assert dict(host["steps"])["restart"]["restart"] == [] and result["drain"] is None


def test_the_guard_is_armed_only_under_a_rollouts_lock(host):
    done(host["params"] | {"fence": None})
    assert dict(host["steps"])["drain"]["guard"] is None


def test_a_drain_that_timed_out_stops_before_any_restart_naming_the_setting(host):
    host["world"]["drained"] = {**host["world"]["drained"], "timed_out": True, "in_flight": 2}
    host["params"]["rotation"]["drain_timeout"] = 3
    result = failed(host["params"])
    assert names(host["steps"]) == ["read", "drain"]
    assert "did not drain within sglang_services_drain_timeout=3 s: 2 request(s) still in flight" in result["msg"]
    assert "Nothing restarted" in result["msg"]


def test_a_drain_that_timed_out_restarts_anyway_when_told_to(host):
    host["world"]["drained"] = {**host["world"]["drained"], "timed_out": True, "in_flight": None, "unreadable": ["x"]}
    host["params"]["rotation"]["on_timeout"] = "restart"
    done(host["params"])
    assert names(host["steps"]) == ["read", "drain", "restart", "restore"]


def test_a_light_proof_failure_is_carried_into_the_read(host):
    done(host["params"] | {"proof_failures": {"servers": ["prefill logged nothing"]}})
    assert host["steps"][0] == ("read", {"proof_failures": {"servers": ["prefill logged nothing"]}, "pool": []})


@pytest.mark.parametrize(
    ("point", "before"),
    [
        ("before_drain", ["read"]),
        ("after_drain", ["read", "drain"]),
        ("at_restart", ["read", "drain", "restart"]),
        ("before_undrain", ["read", "drain", "restart"]),
    ],
)
def test_a_fault_point_fails_the_call_exactly_there(host, point, before):
    result = failed(host["params"] | {"lab_fault": {"point": point, "action": "fail", "label": f"R>{point}"}})
    assert result == {"msg": f"lab fault injected at R>{point}"}
    assert names(host["steps"]) == before
    assert json.loads((host["tmp"] / "reached.json").read_text())["point"] == point


def test_a_kill_at_a_point_tells_the_injector_and_ends_the_call_there(host, monkeypatch):
    listener = socket.create_server(("127.0.0.1", 0))
    told = []
    threading.Thread(target=lambda: told.append(listener.accept()), daemon=True).start()

    def exit_now(status):
        raise KilledError(status)

    monkeypatch.setattr(os, "_exit", exit_now)
    fault = {
        "point": "before_undrain",
        "action": "kill",
        "seconds": 0.1,
        "notify": f"127.0.0.1:{listener.getsockname()[1]}",
    }
    with pytest.raises(KilledError) as killed:
        host_restart.host_restart(Module(**(host["params"] | {"lab_fault": fault})))
    assert killed.value.args == (sglang_lab_fault.KILLED,)
    assert names(host["steps"]) == ["read", "drain", "restart"] and len(told) == 1
    listener.close()


def test_the_fault_hook_is_refused_off_the_lab_and_for_an_unknown_point_before_anything(host):
    host["marker"].unlink()
    result = failed(host["params"] | {"lab_fault": {"point": "after_drain", "action": "fail"}})
    assert "lab_fault is a lab tool, refused on a host that is not a lab host" in result["msg"]
    host["marker"].write_text("lab\n")
    result = failed(host["params"] | {"lab_fault": {"point": "after_lock", "action": "fail"}})
    assert "point one of before_drain, after_drain, at_restart, before_undrain" in result["msg"]
    assert host["steps"] == []


def test_the_rollbacks_proof_fails_naming_each_service_that_does_not_run_from_disk(host):
    host["world"]["units"] = {
        "sglang-dsv4-prefill": unit(status="stale"),
        "sglang-dsv4-decode": unit(),
        "sglang-dsv4-router": unit(installed=False, active="active"),
    }
    result = failed(host["params"] | {"prove": True})
    assert host["world"]["reads"] == 2
    assert result["msg"] == (
        "after the restart these services do not run from the files on disk: sglang-dsv4-prefill;"
        " sglang-dsv4-router (no unit file, still running)"
    )


def test_the_rollbacks_proof_passes_when_every_service_runs_from_disk_and_a_removed_one_is_stopped(host):
    host["world"]["units"]["sglang-dsv4-router"] = unit(installed=False, active="inactive")
    assert done(host["params"] | {"prove": True})["changed"] is True


def test_runs_astray_reads_a_read_against_disk():
    units = {"a": unit(), "b": unit(status="unrecorded"), "c": unit(installed=False, active="inactive")}
    assert sglang_host_read.runs_astray(units) == ["b"]


# --- a host of a PD pool across hosts (xPyD): its pool's router host drains and undrains around this call ---------


def test_a_server_host_of_a_pool_restarts_and_waits_but_neither_drains_nor_puts_back(host):
    servers = [u for u in UNITS if u["group"] == "servers"]
    params = host["params"] | {"units": servers}
    params["rotation"] = {**params["rotation"], "router_url": "", "held_by_pool": True}
    result = done(params)
    assert names(host["steps"]) == ["read", "restart"]
    restart = dict(host["steps"])["restart"]
    assert restart["restart"] == [["sglang-dsv4-prefill", "sglang-dsv4-decode"]]
    assert [u["name"] for u in restart["wait"]] == ["sglang-dsv4-prefill", "sglang-dsv4-decode"]
    assert restart["nudge"] is None
    assert result["drain"] is None and result["undrain"]["held_by_pool"] is True


def test_the_router_host_of_a_pool_leaves_the_pools_rotation_to_its_handlers(host):
    router = [u for u in UNITS if u["group"] == "router"]
    params = host["params"] | {"units": router}
    params["rotation"] = {**params["rotation"], "held_by_pool": True}
    host["world"]["plan"] = {"restart_servers": False, "restart_router": True, "restart": {}}
    done(params)
    # Its own router restarts and is waited for; the pool's workers stay where the pool's drain put them.
    assert names(host["steps"]) == ["read", "restart"]
    restart = dict(host["steps"])["restart"]
    assert restart["restart"] == [["sglang-dsv4-router"]] and restart["nudge"] is None
    assert [u["name"] for u in restart["wait"]] == ["sglang-dsv4-router"]


REFUSAL = (
    "pool pd-a: its drain on r1 did not end within sglang_services_drain_timeout=3 s (1 request(s) still in flight)"
)


def test_a_pool_server_whose_pools_drain_did_not_succeed_restarts_nothing_and_says_why(host):
    params = host["params"]
    pooled = {**params, "rotation": {**params["rotation"], "router_url": "", "pool_refusal": REFUSAL}}
    result = failed(pooled)
    assert result["msg"] == f"{REFUSAL}; nothing restarted on this host"
    # Decided from the disk, then stopped: no drain, no restart, no undrain.
    assert names(host["steps"]) == ["read"]


def test_a_pool_server_with_nothing_to_restart_goes_on_whatever_the_pools_drain_said(host):
    nothing = {"servers": [], "router": []}
    host["world"]["plan"] = {"restart_servers": False, "restart_router": False, "restart": nothing}
    params = host["params"]
    done({**params, "rotation": {**params["rotation"], "router_url": "", "pool_refusal": REFUSAL}})
    assert "drain" not in names(host["steps"])
    assert [step["restart"] for name, step in host["steps"] if name == "restart"] == [[]]


def test_the_pools_reasons_reach_the_calls_decision(host):
    reasons = ["d1 restarts its servers (sglang-dsv4-decode: its inputs change in this run)"]
    done({**host["params"], "pool_restart": reasons})
    assert host["steps"][0] == ("read", {"proof_failures": {}, "pool": reasons})
