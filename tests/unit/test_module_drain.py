"""The drain's reading of the servers' load (modules/sglang_drain.py): SGLang's gauges summed, a silent server idle."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "roles/sglang_runtime/files"))
    import sglang_lab_standin as standin

    assert set(drain.IN_FLIGHT) <= set(standin.METRICS)
