"""The verification's and the canary's one call (modules/sglang_ask.py): questions as a client asks them, all at
once, answers in question order, and what a server that does not answer looks like."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_records as records
from ansible_collections.dsv4.sglang.plugins.modules import sglang_ask as ask


@pytest.fixture
def router():
    seen: list[dict] = []
    second_arrived = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            # /model_info of a server at /srv/<version>, with the weight_version it was started with.
            if not self.path.endswith("/model_info"):
                self.send_response(404)
                self.end_headers()
                return
            version = self.path.split("/")[-2]
            data = json.dumps({"weight_version": version} if version != "none" else {"model_path": "m"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"body": body, "auth": self.headers.get("Authorization")})
            content = body["messages"][0]["content"]
            if content == "second":
                second_arrived.set()
            # The first question is answered only once the second has arrived: sent one after the other, it would
            # time out here (504); sent at once, it answers last, and the answers must still be in question order.
            if content == "first" and not second_arrived.wait(10):
                self.send_response(504)
                self.end_headers()
                return
            if content == "broken":
                self.send_response(503)
                self.end_headers()
                return
            choice = {"message": {"content": f"re: {content}"}, "finish_reason": "stop"}
            data = json.dumps({"choices": [choice]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()


def test_a_question_carries_a_temperature_only_where_it_gives_one():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    assert ask.chat_body("hi", "m", 8) == body
    assert ask.chat_body({"prompt": "hi", "temperature": 0}, "m", 8)["temperature"] == 0
    assert "temperature" not in ask.chat_body({"prompt": "hi"}, "m", 8)


def test_answers_come_back_in_question_order_with_the_key_and_every_status(router):
    url, seen = router
    questions = ["first", "second", "broken"]
    answers = ask.ask_all(f"{url}/v1/chat/completions", "k", 5, [ask.chat_body(q, "m", 8) for q in questions])
    assert [a["status"] for a in answers] == [200, 200, 503]
    assert answers[0] == {"status": 200, "msg": "OK", "content": "re: first", "finish_reason": "stop"}
    assert answers[2]["content"] is None and "503" in answers[2]["msg"]
    assert {s["auth"] for s in seen} == {"Bearer k"}


def test_a_router_that_does_not_listen_answers_status_0():
    answer = ask.answer("http://127.0.0.1:9/v1/chat/completions", "", 2, ask.chat_body("hi", "m", 8))
    assert answer["status"] == 0 and answer["content"] is None and answer["msg"].startswith("no answer")


class FailError(Exception):
    pass


class Module:
    def __init__(self, params):
        self.params = params

    def fail_json(self, **kwargs):
        raise FailError(kwargs["msg"])


def test_each_server_reports_its_weight_version_beside_the_one_the_directory_holds_now(router, tmp_path):
    url, _seen = router
    (tmp_path / "model.safetensors").write_bytes(b"w")
    expected = records.weight_version(records.weights_digest(str(tmp_path)))
    servers = [
        {"name": "sglang-dsv4-prefill", "health_url": f"{url}/{expected}/health"},
        {"name": "sglang-dsv4-decode", "health_url": f"{url}/sha256:old/health"},
    ]
    read = ask.weights(Module({"servers": servers, "model_path": str(tmp_path), "api_key": ""}))
    assert read == {
        "model_path": str(tmp_path),
        "expected": expected,
        "files": 1,
        "servers": {"sglang-dsv4-prefill": expected, "sglang-dsv4-decode": "sha256:old"},
    }
    assert ask.weights(Module({"servers": servers, "model_path": None, "api_key": ""})) is None
    # A server that cannot say which weights it runs fails the call, naming it: never counted as the right ones.
    silent = [{"name": "sglang-dsv4-decode", "health_url": f"{url}/none/health"}]
    with pytest.raises(FailError, match=r"sglang-dsv4-decode: .*/none/model_info did not answer a JSON object with a"):
        ask.weights(Module({"servers": silent, "model_path": str(tmp_path), "api_key": ""}))


def test_a_host_without_a_router_asks_no_question_and_is_judged_on_its_servers_alone():
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_verdict

    asked = {"modes": {"sglang-dsv4-decode": "model"}, "logged": {}, "answers": [], "generated": None}
    judge = {"managed": {"temperature": 0.6}, "requests": 3, "max_repetition": 0.5, "host": "d1"}
    # No router on the host: no answers to judge (its pool's router host asks them).
    assert sglang_verdict.failures(asked, judge, "") == []
    # A host with a router and no answers fails, naming the router.
    assert (
        "The router at http://127.0.0.1:8000 on d1 answered"
        in sglang_verdict.failures(asked, judge, "http://127.0.0.1:8000")[0]
    )
    assert sglang_verdict.failures({**asked, "modes": {"sglang-dsv4-decode": "openai"}}, judge, "")[0].startswith(
        "sglang-dsv4-decode on d1 runs with sampling_defaults=openai"
    )


def test_the_pools_router_host_proves_every_answered_request_crossed_from_a_prefill_to_a_decode():
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_verdict

    asked = {"modes": {}, "logged": {}, "answers": [{"status": 200, "content": ""}], "generated": None}
    crossed = {"counted": {"p1:prefill": 3.0, "p2:prefill": 2.0}, "answered": 5, "unreadable": []}
    assert sglang_verdict.transfers_failures({**asked, "transfers": crossed}, "r1", "http://127.0.0.1:8000") == []
    short = {**crossed, "counted": {"p1:prefill": 3.0, "p2:prefill": 1.0}}
    assert sglang_verdict.transfers_failures({**asked, "transfers": short}, "r1", "http://127.0.0.1:8000") == [
        "The router at http://127.0.0.1:8000 on r1 answered 5 request(s), but the pool's prefills counted 4 KV"
        " transfer(s) meanwhile (p1:prefill 3, p2:prefill 1): a request served without its prefill's KV cache"
        " crossing to a decode."
    ]
    # The unknown is never zero.
    blind = {**crossed, "unreadable": ["p2:prefill (http://198.51.100.12:30000/metrics): nothing listens"]}
    assert "could not be read" in sglang_verdict.transfers_failures({**asked, "transfers": blind}, "r1", "u")[0]
    # No pool across hosts: nothing to prove here.
    assert sglang_verdict.transfers_failures({**asked, "transfers": None}, "r1", "u") == []


def test_a_prefills_transfer_count_sums_its_label_sets_and_names_what_cannot_be_read(monkeypatch):
    pages = {
        "http://p1/metrics": (
            200,
            "OK",
            b'sglang:kv_transfer_latency_ms_count{a="1"} 3\nsglang:kv_transfer_latency_ms_count{a="2"} 4\n',
        ),
        "http://p2/metrics": (0, "nothing listens", b""),
        "http://p3/metrics": (200, "OK", b"sglang:num_requests_total 1\n"),
    }
    monkeypatch.setattr(ask, "call", lambda url, key="", timeout=10: pages[url])
    counts, unreadable = ask.transfer_counts(
        [{"name": n, "metrics_url": f"http://{n}/metrics"} for n in ("p1", "p2", "p3")], ""
    )
    # p3 answers without the series: no transfer since its start (a labelled histogram shows none before its first).
    assert counts == {"p1": 7.0, "p3": 0.0}
    assert unreadable == ["p2 (http://p2/metrics): nothing listens"]
