"""The drain's reading of the servers' load (module_utils/sglang_drain.py): the gauges summed, a silent server idle."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_drain as drain

METRICS = """# HELP sglang:num_running_reqs running
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="decode",tp_rank="0"} 2
sglang:num_queue_reqs{model_name="m",engine_type="decode",tp_rank="0"} 1
sglang:num_decode_transfer_queue_reqs{model_name="m",engine_type="decode",tp_rank="0"} 3
sglang:num_prefill_bootstrap_queue_reqs{model_name="m",engine_type="decode",tp_rank="0"} 0
sglang:num_requests_total{model_name="m",is_streaming="false"} 99
sglang:gen_throughput{model_name="m"} 12.5
"""


@pytest.fixture
def answering():
    """A /metrics that answers what the test sets: a status, a body, or a hang longer than the drain's read."""
    reply = {"status": 200, "body": METRICS, "hang": 0.0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(reply["hang"])
            data = reply["body"].encode()
            self.send_response(reply["status"])
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics", reply
    httpd.shutdown()


@pytest.fixture
def server(answering):
    """A /metrics that answers SGLang's gauges."""
    return answering[0]


def test_in_flight_sums_running_queued_and_pd_queues_only(server):
    assert drain.in_flight([server]) == (6, [])
    assert drain.in_flight([server, server]) == (12, [])


def test_only_a_closed_port_means_nothing_in_flight(server):
    assert drain.in_flight(["http://127.0.0.1:9/metrics"]) == (0, [])
    assert drain.in_flight([server, "http://127.0.0.1:9/metrics"]) == (6, [])


@pytest.mark.parametrize(
    "status, body, hang",
    [
        (500, "", 0.0),
        (401, "", 0.0),
        (503, METRICS, 0.0),
        (200, 'sglang:num_running_reqs{tp_rank="0"} NaN\n', 0.0),
        (200, 'sglang:num_running_reqs{tp_rank="0"} +Inf\n', 0.0),
        (200, 'sglang:num_queue_reqs{tp_rank="0"} many\n', 0.0),
        (200, METRICS, 1.5),
    ],
    ids=["500", "401", "503", "nan", "inf", "garbled", "hang"],
)
def test_an_error_a_bad_value_or_a_timeout_is_unknown_never_zero(answering, monkeypatch, status, body, hang):
    url, reply = answering
    monkeypatch.setattr(drain, "METRICS_TIMEOUT", 0.5)
    reply.update(status=status, body=body, hang=hang)
    count, unreadable = drain.in_flight([url, "http://127.0.0.1:9/metrics"])
    assert count is None
    assert len(unreadable) == 1 and unreadable[0].startswith(url)


def test_a_drain_that_cannot_read_a_load_times_out_saying_what_it_could_not_read(router, answering, monkeypatch):
    _url, module = router
    metrics, reply = answering
    monkeypatch.setattr(drain, "METRICS_TIMEOUT", 0.5)
    reply.update(status=500, body="")
    module.params.update(metrics_urls=[metrics], timeout=2)
    result = run(drain.drain, module)
    assert result["drained"] is False and result["timed_out"] is True
    assert result["in_flight"] is None and result["unreadable"] and "500" in result["unreadable"][0]


def test_every_gauge_the_drain_waits_on_is_one_sglang_and_the_stand_in_export():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "roles/lab_hosts/files"))
    import sglang_lab_standin as standin

    assert set(drain.IN_FLIGHT) <= set(standin.METRICS)


def ident(worker: dict) -> str:
    return "w" + worker["url"].rsplit(":", 1)[1]


class Router(BaseHTTPRequestHandler):
    """A router's control plane that queues work as sglang-router does, and loses the first `lose` removals and
    registrations it accepts (what a removal queued during the router's startup registration suffers)."""

    workers: ClassVar[dict[str, dict]] = {}
    lose: ClassVar[dict[str, int]] = {"DELETE": 0, "POST": 0}
    calls: ClassVar[list[str]] = []
    # The admin key the router runs with: its control plane answers 401 to any other.
    key: ClassVar[str] = "k" * 16

    def refused(self) -> bool:
        if self.path != "/readiness" and self.headers.get("Authorization") != f"Bearer {self.key}":
            self.reply(401)
            return True
        return False

    def reply(self, status: int, body: dict | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.refused():
            return None
        if self.path == "/readiness":
            kinds = {w["worker_type"] for w in self.workers.values()}
            return self.reply(200 if kinds == {"prefill", "decode"} else 503)
        return self.reply(200, {"workers": list(self.workers.values())})

    def do_DELETE(self):
        if self.refused():
            return
        self.calls.append("DELETE")
        if self.lose["DELETE"]:
            self.lose["DELETE"] -= 1
        else:
            self.workers.pop(self.path.rsplit("/", 1)[1], None)
        self.reply(202)

    def do_POST(self):
        if self.refused():
            return
        self.calls.append("POST")
        worker = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.lose["POST"]:
            self.lose["POST"] -= 1
        else:
            self.workers[ident(worker)] = {"id": ident(worker), **worker}
        self.reply(202)

    def log_message(self, *args):
        pass


class ExitError(Exception):
    """module.exit_json, caught."""


class Module:
    check_mode = False

    def __init__(self, **params) -> None:
        self.params = {
            "notice_seconds": 0,
            "timeout": 10,
            "router_restarted": False,
            "metrics_urls": [],
            "fence": None,
            "router_unit": None,
            "guard": None,
            **params,
        }

    def exit_json(self, **result):
        raise ExitError(result)

    def fail_json(self, msg: str, **result):
        raise AssertionError(msg)


PD = [
    {"url": "http://127.0.0.1:30000", "worker_type": "prefill", "bootstrap_port": 8998},
    {"url": "http://127.0.0.1:30001", "worker_type": "decode"},
]


@pytest.fixture
def router(tmp_path):
    Router.workers = {ident(w): {"id": ident(w), "is_healthy": True, **w} for w in PD}
    Router.lose, Router.calls, Router.key = {"DELETE": 0, "POST": 0}, [], "k" * 16
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    credential = tmp_path / "admin-key"
    credential.write_text("dsv4-admin:operators:admin:" + "k" * 16 + "\n")
    yield url, Module(router_url=url, admin_credential=str(credential), state_file=str(tmp_path / "drain.json"))
    httpd.shutdown()


def run(function, module) -> dict:
    return function(module, module.params)


def test_a_lost_removal_is_sent_again_until_the_router_lists_no_worker(router):
    url, module = router
    Router.lose["DELETE"] = 1
    result = run(drain.drain, module)
    assert Router.workers == {} and drain.readiness(url) == 503
    assert Router.calls.count("DELETE") == 3 and result["drained"] is True
    assert json.loads(open(module.params["state_file"]).read())["workers"] == PD


def test_a_worker_registered_during_the_drain_is_removed_and_saved_for_the_restore(router):
    _url, module = router
    late = {"url": "http://127.0.0.1:30002", "worker_type": "decode"}
    module.params["metrics_urls"] = ["http://127.0.0.1:9/metrics"]

    def register_late(check, seconds):
        Router.workers["id-late"] = {"id": "id-late", **late}
        return original(check, seconds)

    original = drain.wait_for
    drain.wait_for = register_late
    try:
        result = run(drain.drain, module)
    finally:
        drain.wait_for = original
    assert Router.workers == {} and result["workers"] == [*PD, late]
    assert json.loads(open(module.params["state_file"]).read())["workers"] == [*PD, late]


def test_a_lost_registration_is_sent_again_until_the_router_is_ready(router, monkeypatch):
    url, module = router
    run(drain.drain, module)
    monkeypatch.setattr(drain, "RESEND", 0.2)
    Router.lose["POST"] = 1
    result = run(drain.restore, module)
    assert drain.readiness(url) == 200 and result["workers"] == PD
    assert Router.calls.count("POST") == 3
    assert not os.path.exists(module.params["state_file"])


def test_a_restarted_router_whose_own_registration_was_lost_gets_the_saved_workers_while_it_starts(router, monkeypatch):
    """Its start registers the workers of its command line as a queued job, which can be lost (sglang-router 0.3.1's
    "Workflow deadlocked"): the restart's wait sends it the drain's saved workers, after RESEND s of starting."""
    url, module = router
    run(drain.drain, module)
    assert Router.workers == {}
    monkeypatch.setattr(drain, "RESEND", 0.2)
    urls = [w["url"] for w in PD]
    nudge = drain.registration_nudge(url, module.params["admin_credential"], module.params["state_file"], "r", urls)
    # The clock starts at the wait's first look at the router, not when the nudge is made: the router starts after
    # the servers (After=), so its first look may come long after; its own registration may still be on its way.
    time.sleep(0.25)
    nudge("r.service")
    assert Router.calls.count("POST") == 0
    time.sleep(0.25)
    nudge("sglang-dsv4-prefill")  # only the router is nudged
    assert Router.calls.count("POST") == 0
    nudge("r")
    assert drain.readiness(url) == 200 and Router.calls.count("POST") == 2
    # Once it is ready, or within RESEND s of the last try, nothing is sent again.
    time.sleep(0.25)
    nudge("r")
    assert Router.calls.count("POST") == 2
    # Saved workers the servers no longer are (a restart for new ports) are never sent: nothing to nudge with.
    credential, state = module.params["admin_credential"], module.params["state_file"]
    assert drain.registration_nudge(url, credential, state, "r", ["http://127.0.0.1:31000"]) is None
    # A host that was not drained has no saved workers: no nudge.
    os.unlink(state)
    assert drain.registration_nudge(url, credential, state, "r", urls) is None


def test_a_router_that_does_not_answer_stops_the_drain_by_name(tmp_path):
    module = Module(
        router_url="http://127.0.0.1:9",
        admin_credential=str(tmp_path / "none"),
        state_file=str(tmp_path / "drain.json"),
    )
    result = run(drain.drain, module)
    # Not in rotation: nothing to take out, nothing saved.
    assert result["changed"] is False and not (tmp_path / "drain.json").exists()


def test_the_drain_and_the_restore_use_the_key_the_router_runs_with_not_the_inventorys(router, tmp_path):
    """A rotation: the inventory's new key is nowhere in the call; the running router's credential is read on the
    host, and after the router restarted with the new key (its new credential), the restore uses that one."""
    url, module = router
    assert "admin_key" not in module.params
    result = run(drain.drain, module)
    assert result["drained"] is True and Router.workers == {}
    new = "n" * 40
    Router.key = new
    (tmp_path / "admin-key").write_text(f"dsv4-admin:operators:admin:{new}\n")
    run(drain.restore, module)
    assert drain.readiness(url) == 200


def test_a_drain_without_the_running_routers_credential_names_it(router, tmp_path):
    _url, module = router
    module.params["admin_credential"] = str(tmp_path / "gone")
    with pytest.raises(AssertionError, match=r"no .*gone holds the admin key it runs with"):
        drain.drain(module, module.params)
    assert len(Router.workers) == 2


def test_a_run_that_lost_the_lock_neither_drains_nor_restores(router, tmp_path):
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock

    url, module = router
    (tmp_path / "run").mkdir(mode=0o755)
    lock = str(tmp_path / "run" / "lock")
    assert sglang_lock.acquire(lock, "other-run", "bob@ctl", 600)[0]
    module.params["fence"] = {"path": lock, "run_id": "this-run", "lease": 600}
    with pytest.raises(AssertionError, match="no longer holds the rollout lock"):
        drain.drain(module, module.params)
    assert len(Router.workers) == 2 and not os.path.exists(module.params["state_file"])
    module.params["fence"] = None
    run(drain.drain, module)
    module.params["fence"] = {"path": lock, "run_id": "this-run", "lease": 600}
    with pytest.raises(AssertionError, match="no longer holds the rollout lock"):
        drain.restore(module, module.params)
    assert Router.workers == {} and drain.readiness(url) == 503


class Readiness(BaseHTTPRequestHandler):
    """A /readiness that answers the statuses of `answers` in turn (a hang: None), then the last one."""

    answers: ClassVar[list] = []

    def do_GET(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is None:
            time.sleep(3)
            answer = 200
        self.send_response(answer)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def readiness(monkeypatch):
    monkeypatch.setattr(drain, "READINESS_PAUSE", 0.01)
    monkeypatch.setattr(drain, "READINESS_TIMEOUT", 0.5)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Readiness)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.parametrize(
    ("answers", "found"),
    [
        ([503, 503, 503], "out"),
        ([503, 200], "in"),
        ([500, 200], "in"),
        ([200], "in"),
        ([503, 502, 503], "unknown"),
        ([500], "unknown"),
        ([None], "unknown"),
        ([503, None, 503], "unknown"),
    ],
    ids=["503-thrice", "flap-to-200", "5xx-then-200", "200", "one-502", "500", "timeout", "one-timeout"],
)
def test_a_router_is_out_of_rotation_only_when_every_look_says_so(readiness, answers, found):
    Readiness.answers = list(answers)
    state, seen = drain.rotation(readiness)
    assert state == found, seen
    assert len(seen) == (answers.index(200) + 1 if 200 in answers else drain.READINESS_LOOKS)


def test_a_closed_port_at_every_look_is_out_of_rotation():
    state, seen = drain.rotation("http://127.0.0.1:9")
    assert state == "out" and len(seen) == drain.READINESS_LOOKS


def test_one_bad_readiness_answer_fails_the_drain_naming_what_it_saw(readiness, tmp_path):
    Readiness.answers = [503, 500, 503]
    module = Module(router_url=readiness, admin_credential=str(tmp_path / "k"), state_file=str(tmp_path / "d.json"))
    with pytest.raises(AssertionError, match=r"cannot tell whether the router .* answered 503, 500, 503 at 3 looks"):
        drain.drain(module, module.params)
    assert not (tmp_path / "d.json").exists()


def test_a_router_out_at_every_look_is_not_drained_and_says_what_it_saw(readiness, tmp_path):
    Readiness.answers = [503]
    module = Module(router_url=readiness, admin_credential=str(tmp_path / "k"), state_file=str(tmp_path / "d.json"))
    result = run(drain.drain, module)
    assert result["changed"] is False and result["out_of_rotation"] == ["503"] * drain.READINESS_LOOKS
