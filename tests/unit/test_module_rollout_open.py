"""A host's apply opened in one call (modules/sglang_rollout_open.py): the lock, this run's snapshot and the read under
the lock, in that order; what a failure says of the lock; the lab fault points between them, refused off the lab."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lab_fault, sglang_lock
from ansible_collections.dsv4.sglang.plugins.modules import sglang_rollout_open as rollout_open

from tests.unit.fake_module import exits, fails

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lock's folder must be root's alone: run as root")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host's folders (root's alone), its files, a read that records when it ran, and the lab marker."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)  # noqa: S103 - a folder like /run, root-owned and not group-writable
    conf = tmp_path / "prefill.env"
    conf.write_text("A=1\n")
    reads = []

    def read(module, params):
        reads.append(sglang_lock.inspect(str(run / "deploy")))
        return {"plan": {"empty": False, "files": [str(conf)]}, "diff": [{"before": "", "after": "x"}]}

    monkeypatch.setattr(rollout_open, "read", read)
    marker = tmp_path / "lab-host"
    marker.write_text("lab\n")
    monkeypatch.setattr(sglang_lab_fault, "LAB_MARKER", str(marker))
    monkeypatch.setattr(sglang_lab_fault, "REACHED", str(tmp_path / "reached.json"))
    params = {name: None for name in rollout_open.READ_SPEC} | {
        "lock": {"path": str(run / "deploy"), "run_id": "R1", "owner": "root@ctl", "lease": 600, "break_lock": ""},
        "snapshot": {"path": str(tmp_path / "snapshots/R1"), "files": [str(conf), str(tmp_path / "absent")], "keep": 5},
        "lab_fault": None,
    }
    return {"params": params, "reads": reads, "tmp": tmp_path, "marker": marker}


def done(params) -> dict:
    return exits(rollout_open.open_apply, params)


def failed(params) -> dict:
    return fails(rollout_open.open_apply, params)


def test_one_call_takes_the_lock_snapshots_and_reads_the_host_under_the_lock(host):
    result = done(host["params"])
    assert result["locked"] is True and result["changed"] is False
    # The read ran under this run's lock.
    assert [holder["run_id"] for holder in host["reads"]] == ["R1"]
    assert result["snapshot"]["missing"] == [str(host["tmp"] / "absent")]
    assert (host["tmp"] / "snapshots/R1").is_dir()
    assert result["state"]["plan"]["files"] == [str(host["tmp"] / "prefill.env")]
    # A diff of the read is the task's own (--diff shows it), not the state's.
    assert result["diff"] == [{"before": "", "after": "x"}] and "diff" not in result["state"]


def test_a_lock_another_run_holds_fails_the_call_before_anything_and_says_it_is_not_locked(host):
    lock = host["params"]["lock"]
    assert sglang_lock.acquire(lock["path"], "R0", "bob@ctl", 600)[0]
    result = failed(host["params"])
    assert result["locked"] is False and result["holder"]["run_id"] == "R0"
    assert result["msg"].endswith("nothing was changed")
    assert not (host["tmp"] / "snapshots").exists() and host["reads"] == []


@pytest.mark.parametrize(("point", "snapshot"), [("after_lock", False), ("after_snapshot", True)])
def test_a_fault_point_fails_the_call_there_holding_the_lock(host, point, snapshot):
    fault = {"point": point, "action": "fail", "label": f"Open>{point}"}
    result = failed(host["params"] | {"lab_fault": fault})
    assert result == {"locked": True, "msg": f"lab fault injected at Open>{point}"}
    assert (host["tmp"] / "snapshots/R1").exists() is snapshot and host["reads"] == []
    assert sglang_lock.inspect(host["params"]["lock"]["path"])["run_id"] == "R1"
    assert json.loads((host["tmp"] / "reached.json").read_text())["point"] == point


def test_a_pause_at_a_point_tells_the_injector_it_got_there_then_goes_on(host):
    listener = socket.create_server(("127.0.0.1", 0))
    told = []
    threading.Thread(target=lambda: told.append(listener.accept()), daemon=True).start()
    fault = {
        "point": "after_snapshot",
        "action": "pause",
        "seconds": 0.2,
        "notify": f"127.0.0.1:{listener.getsockname()[1]}",
    }
    assert done(host["params"] | {"lab_fault": fault})["locked"] is True
    assert len(told) == 1
    listener.close()


def injector(answer: bytes | None):
    """A loopback listener standing in for the lab injector: it records the host a held call names, then answers
    `answer` (None: it closes the connection, as a controller that died)."""
    listener = socket.create_server(("127.0.0.1", 0))
    named = []

    def serve() -> None:
        connection, _address = listener.accept()
        with connection:
            named.append(connection.makefile("r").readline().strip())
            if answer is not None:
                connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return listener, named


@pytest.mark.parametrize("answer", [sglang_lab_fault.RELEASE, None], ids=["released", "controller-gone"])
def test_a_hold_waits_at_its_point_naming_its_host_until_released_or_the_controller_is_gone(host, answer):
    listener, named = injector(answer)
    fault = {
        "point": "after_lock",
        "action": "hold",
        "seconds": 30,
        "notify": f"127.0.0.1:{listener.getsockname()[1]}",
    }
    result = done(host["params"] | {"lab_fault": fault})
    assert result["locked"] is True and host["reads"] and named == [socket.gethostname()]
    listener.close()


def test_a_hold_never_released_fails_in_bounded_time_holding_the_lock(host):
    # The call's connection is queued by the kernel and never answered: nothing accepts or closes it.
    silent = socket.create_server(("127.0.0.1", 0))
    fault = {
        "point": "after_lock",
        "action": "hold",
        "seconds": 0.5,
        "label": "Open>after_lock",
        "notify": f"127.0.0.1:{silent.getsockname()[1]}",
    }
    result = failed(host["params"] | {"lab_fault": fault})
    assert result == {"locked": True, "msg": "lab fault hold at Open>after_lock: not released within 0.5 s"}
    assert host["reads"] == []
    silent.close()


def test_a_hold_whose_injector_cannot_be_told_fails_at_once(host):
    gone = socket.create_server(("127.0.0.1", 0))
    port = gone.getsockname()[1]
    gone.close()
    fault = {"point": "after_snapshot", "action": "hold", "seconds": 30, "notify": f"127.0.0.1:{port}"}
    result = failed(host["params"] | {"lab_fault": fault})
    assert result["locked"] is True and result["msg"].startswith("lab fault hold at after_snapshot: the injector at")
    assert "could not be told" in result["msg"] and host["reads"] == []


def test_the_fault_hook_is_refused_on_a_host_that_is_not_a_lab_host_before_the_lock(host):
    host["marker"].unlink()
    result = failed(host["params"] | {"lab_fault": {"point": "after_lock", "action": "fail"}})
    assert (
        result["locked"] is False
        and "lab_fault is a lab tool, refused on a host that is not a lab host" in result["msg"]
    )
    assert sglang_lock.inspect(host["params"]["lock"]["path"]) is None


def test_an_unknown_point_or_action_is_refused_before_the_lock(host):
    for fault in ({"point": "after_restart", "action": "fail"}, {"point": "after_lock", "action": "explode"}):
        result = failed(host["params"] | {"lab_fault": fault})
        assert result["locked"] is False and "point one of after_lock, after_snapshot" in result["msg"]
    assert sglang_lock.inspect(host["params"]["lock"]["path"]) is None


def test_a_read_that_breaks_under_the_lock_still_says_the_run_holds_it(host, monkeypatch):
    def broken(module, params):
        raise KeyError("units")

    monkeypatch.setattr(rollout_open, "read", broken)
    result = failed(host["params"])
    assert result["locked"] is True and result["msg"] == "reading the host under the lock failed: KeyError('units')"


def test_a_read_that_fails_under_the_lock_says_the_run_holds_it(host, monkeypatch):
    def refusing(module, params):
        module.fail_json(msg="generation_config.json is not valid JSON")

    monkeypatch.setattr(rollout_open, "read", refusing)
    assert failed(host["params"]) == {"locked": True, "msg": "generation_config.json is not valid JSON"}
