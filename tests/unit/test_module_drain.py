"""The drain's reading of the servers' load (modules/sglang_drain.py): SGLang's gauges summed, a silent server idle."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from ansible_collections.dsv4.sglang.plugins.modules import sglang_drain as drain

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
def server():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            data = METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
    httpd.shutdown()


def test_in_flight_sums_running_queued_and_pd_queues_only(server):
    assert drain.in_flight([server]) == 6
    assert drain.in_flight([server, server]) == 12


def test_a_server_that_does_not_answer_has_nothing_in_flight(server):
    assert drain.in_flight(["http://127.0.0.1:9/metrics"]) == 0
    assert drain.in_flight([server, "http://127.0.0.1:9/metrics"]) == 6


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

    def reply(self, status: int, body: dict | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/readiness":
            kinds = {w["worker_type"] for w in self.workers.values()}
            return self.reply(200 if kinds == {"prefill", "decode"} else 503)
        return self.reply(200, {"workers": list(self.workers.values())})

    def do_DELETE(self):
        self.calls.append("DELETE")
        if self.lose["DELETE"]:
            self.lose["DELETE"] -= 1
        else:
            self.workers.pop(self.path.rsplit("/", 1)[1], None)
        self.reply(202)

    def do_POST(self):
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
        self.params = {"notice_seconds": 0, "timeout": 10, "router_restarted": False, "metrics_urls": [], **params}

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
    Router.lose, Router.calls = {"DELETE": 0, "POST": 0}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield url, Module(router_url=url, admin_key="k" * 16, state_file=str(tmp_path / "drain.json"))
    httpd.shutdown()


def run(function, module) -> dict:
    with pytest.raises(ExitError) as done:
        function(module)
    return done.value.args[0]


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


def test_a_router_that_does_not_answer_stops_the_drain_by_name(tmp_path):
    module = Module(router_url="http://127.0.0.1:9", admin_key="k" * 16, state_file=str(tmp_path / "drain.json"))
    result = run(drain.drain, module)
    # Not in rotation: nothing to take out, nothing saved.
    assert result["changed"] is False and not (tmp_path / "drain.json").exists()
