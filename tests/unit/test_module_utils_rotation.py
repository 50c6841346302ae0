"""The host's own guard (module_utils/sglang_rotation.py): a drain whose run is gone is undone on the host, once no
live lease holds it and its services serve, and never with settings a rollback rejected."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_rotation as rotation

from tests.unit.test_module_drain import PD, Router, ident


@pytest.fixture
def health():
    class Healthy(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/health"
    httpd.shutdown()


@pytest.fixture
def host(tmp_path, health, monkeypatch):
    """A drained host: its router lists no worker, the state file keeps them, its services run invocation inv-1."""
    Router.workers, Router.lose, Router.calls, Router.key = {}, {"DELETE": 0, "POST": 0}, [], "k" * 16
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    credential = tmp_path / "admin-key"
    credential.write_text("dsv4-admin:operators:admin:" + "k" * 16)
    units = {"sglang-dsv4-prefill": ("active", "inv-1"), "sglang-dsv4-decode": ("active", "inv-1")}
    monkeypatch.setattr(rotation, "invocation", lambda unit: units[unit.removesuffix(".service")])
    monkeypatch.setattr(rotation, "disarm", lambda: None)
    monkeypatch.setattr(rotation, "runs_from_disk", lambda record, invocation: False)
    guard = {
        "router_url": f"http://127.0.0.1:{httpd.server_address[1]}",
        "admin_credential": str(credential),
        "lock": str(tmp_path / "lock"),
        "record_dir": str(tmp_path),
        "drained_serve": True,
        "units": [{"name": name, "health_url": health, "invocation": "inv-1"} for name in units],
    }
    state = tmp_path / "drain.json"
    rotation.save_state(str(state), PD, guard)
    yield state, guard, units
    httpd.shutdown()


def lock(guard: dict, lease_until: float) -> None:
    folder = guard["lock"]
    import os

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "owner.json"), "w") as out:
        json.dump({"run_id": "r", "owner": "o", "taken": 0, "lease_until": lease_until}, out)


def test_a_live_lease_keeps_the_host_out_for_the_run_that_holds_it(host):
    state, guard, _units = host
    lock(guard, time.time() + 600)
    assert "a rollout holds the host" in rotation.undrain_guard(str(state))
    assert state.exists() and Router.workers == {}


def test_once_the_lease_ended_an_apply_drain_of_serving_services_is_undone(host):
    state, guard, _units = host
    lock(guard, time.time() - 1)
    said = rotation.undrain_guard(str(state))
    assert "2 worker(s) back in rotation" in said, said
    assert not state.exists() and set(Router.workers) == {ident(w) for w in PD}


def test_without_any_lock_the_guard_acts_too(host):
    state, _guard, _units = host
    assert "back in rotation" in rotation.undrain_guard(str(state))


def test_a_service_that_does_not_run_keeps_the_host_out(host):
    state, _guard, units = host
    units["sglang-dsv4-decode"] = ("failed", "inv-2")
    assert "sglang-dsv4-decode is failed" in rotation.undrain_guard(str(state))
    assert state.exists() and Router.workers == {}


def test_a_rollbacks_drain_never_returns_rejected_settings(host, monkeypatch):
    """A rollback's drain holds the settings the run rejected: back only once they run from the files on disk."""
    state, guard, _units = host
    guard["drained_serve"] = False
    rotation.save_state(str(state), PD, guard)
    assert "does not run from the files on disk" in rotation.undrain_guard(str(state))
    assert state.exists() and Router.workers == {}
    monkeypatch.setattr(rotation, "runs_from_disk", lambda record, invocation: True)
    assert "back in rotation" in rotation.undrain_guard(str(state))


def test_a_service_restarted_since_the_drain_must_run_from_disk(host):
    state, _guard, units = host
    units["sglang-dsv4-prefill"] = ("active", "inv-2")
    assert "sglang-dsv4-prefill does not run from the files on disk" in rotation.undrain_guard(str(state))


def test_nothing_drained_is_nothing_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(rotation, "disarm", lambda: None)
    assert "nothing to do" in rotation.undrain_guard(str(tmp_path / "none.json"))


def test_a_host_without_systemctl_is_no_traceback(monkeypatch):
    """The drain's restore disarms the guard; where no systemctl exists (a controller's test tree), nothing raises."""

    def missing(*args, **kwargs):
        raise FileNotFoundError("systemctl")

    monkeypatch.setattr(rotation.subprocess, "run", missing)
    assert rotation.systemctl("stop", "x.timer") == (127, "")
    rotation.disarm()
