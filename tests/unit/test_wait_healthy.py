"""The ExecStartPost health gate (host/programs/sglang_wait_healthy.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "host/programs"))
import sglang_wait_healthy as gate


class Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


def test_healthy_server_passes(server):
    assert gate.main([f"http://127.0.0.1:{server.server_port}/health", "5"]) == 0


def test_unhealthy_server_times_out(server, monkeypatch):
    monkeypatch.setattr(Health, "status", 503)
    assert gate.main([f"http://127.0.0.1:{server.server_port}/health", "1"]) == 1


def test_dead_main_process_stops_the_wait_at_once(server, monkeypatch):
    monkeypatch.setattr(Health, "status", 503)
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert gate.wait(f"http://127.0.0.1:{server.server_port}/health", 60, dead.pid) is False


def test_a_main_process_of_another_user_counts_as_alive(monkeypatch):
    """ProtectProc=invisible hides a process that still belongs to root right after the fork; kill(pid, 0)
    answers EPERM for it, and it must not be taken for a process that has exited (a flaky router start)."""

    def denied(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(gate.os, "kill", denied)
    assert gate.alive(12345) is True


def test_a_gone_main_process_is_seen():
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert gate.alive(gone.pid) is False
    assert gate.alive(os.getpid()) is True
