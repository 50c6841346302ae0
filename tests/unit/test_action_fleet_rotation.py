"""The guard's count at once (action plugin sglang_fleet_rotation): the program each host runs, and one real count
over an inventory of hosts that answer, refuse the connection, or hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible_collections.dsv4.sglang.plugins.action import sglang_fleet_rotation as fleet

ROOT = Path(__file__).resolve().parents[2]


class Readiness(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):
        self.send_response(self.code if self.path in ("/readiness", "/health") else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def router():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Readiness)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ask(router_url: str, status_file: Path, drain_state: Path, health_urls: list[str] | None = None) -> dict:
    """Run the program as a host does: a bare Python reading it from stdin, no collection on its path."""
    out = subprocess.run(
        [sys.executable, "-I", "-"],
        input=fleet.program(router_url, str(status_file), str(drain_state), 2, health_urls),
        capture_output=True,
        timeout=30,
        check=False,
        cwd="/",
    )
    return fleet.answer(out.returncode, out.stdout, out.stderr)


def test_the_program_asks_the_router_it_is_given_and_the_drain_state_on_the_host(router, tmp_path):
    status, drain = tmp_path / "rollout.json", tmp_path / "drain.json"
    assert ask(router, status, drain) == {"available": True, "why": "", "drained_serving": False, "router_url": router}
    drain.write_text(json.dumps({"workers": [], "guard": {"units": []}}))
    found = ask(router, status, drain)
    assert not found["available"] and found["why"] == f"drained: its router's workers are kept in {drain}"


def test_the_program_reads_where_the_router_listens_from_the_hosts_record(router, tmp_path):
    status, drain = tmp_path / "rollout.json", tmp_path / "drain.json"
    found = ask("", status, drain)
    assert not found["available"] and "does not say where its router listens" in found["why"]
    status.write_text(json.dumps({"router_url": router}))
    assert ask("", status, drain)["available"] is True
    Readiness.code = 503
    try:
        assert ask("", status, drain)["why"] == "its router's /readiness answered 503"
    finally:
        Readiness.code = 200
    gone = f"http://127.0.0.1:{closed_port()}"
    assert ask(gone, status, drain)["why"] == "its router's /readiness answered nothing (no connection)"


def test_a_server_host_of_a_pool_is_in_rotation_while_every_server_of_it_is_healthy(router, tmp_path):
    """xPyD: a host without a router (its pool's router host answers for the pool) answers with its servers'
    /health, given or recorded by its last rollout."""
    status, drain = tmp_path / "rollout.json", tmp_path / "drain.json"
    healthy = f"{router}/health"
    assert ask("", status, drain, [healthy]) == {
        "available": True,
        "why": "",
        "drained_serving": False,
        "router_url": "",
    }
    gone = f"http://127.0.0.1:{closed_port()}/health"
    found = ask("", status, drain, [healthy, gone])
    assert not found["available"] and found["why"] == f"its servers' /health: {gone} answered nothing (no connection)"
    # A run without it (--limit) asks what its last rollout recorded.
    status.write_text(json.dumps({"router_url": None, "health_urls": [healthy]}))
    assert ask("", status, drain)["available"] is True
    Readiness.code = 503
    try:
        assert ask("", status, drain)["why"] == f"its servers' /health: {healthy} answered 503"
    finally:
        Readiness.code = 200


def test_an_answer_that_is_not_the_programs_is_out_of_rotation_with_what_came_back():
    assert fleet.answer(127, b"", b"sh: 1: /usr/bin/python3: not found\n") == {
        "available": False,
        "why": "cannot be asked: rc=127: sh: 1: /usr/bin/python3: not found",
        "drained_serving": False,
    }
    forged = fleet.answer(0, f'{fleet.MARK}{{"available": "yes"}}'.encode(), b"")
    assert forged["available"] is False and forged["why"].startswith("cannot be asked: rc=0")


def count(tmp_path: Path, inventory: dict, hosts: list[str], router_urls: dict, host_timeout: int = 20) -> dict:
    """One real count: ansible's ad-hoc run of the action on the first host, its result read from the tree
    callback."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": inventory}}))
    args = {
        "hosts": hosts,
        "router_urls": router_urls,
        "status_file": str(tmp_path / "none.json"),
        "drain_state": str(tmp_path / "drain.json"),
        "host_timeout": host_timeout,
        "timeout": 2,
    }
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections"),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
    }
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            hosts[0],
            "-i",
            str(tmp_path / "inventory.json"),
            "-m",
            "dsv4.sglang.sglang_fleet_rotation",
            "-a",
            json.dumps(args),
            "-t",
            str(tmp_path / "tree"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((tmp_path / "tree" / hosts[0]).read_text())


def test_one_count_asks_every_host_at_once_and_names_those_that_cannot_be_asked(router, tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    # A port that takes the connection and never answers: the count must not wait for it beyond `wait`.
    import socket

    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)
    inventory = {
        "h1": local,
        "h2": local,
        "h3": {"ansible_host": "127.0.0.1", "ansible_port": closed_port(), "ansible_user": "root"},
        "h4": {
            "ansible_host": "127.0.0.1",
            "ansible_port": hang.getsockname()[1],
            "ansible_user": "root",
            "ansible_ssh_timeout": 60,
        },
        **{f"s{number}": local for number in range(6)},
    }
    hosts = [*inventory, "h5"]
    urls = {host: router for host in inventory} | {"h2": f"http://127.0.0.1:{closed_port()}"}
    try:
        result = count(tmp_path, inventory, hosts, urls, host_timeout=10)
    finally:
        hang.close()
    answers = result["hosts"]
    assert set(answers) == set(hosts)
    assert answers["h1"]["available"] is True and answers["h1"]["router_url"] == router
    assert answers["h2"]["why"] == "its router's /readiness answered nothing (no connection)"
    assert answers["h3"]["available"] is False and answers["h3"]["why"].startswith("cannot be reached: ")
    assert answers["h4"] == {
        "available": False,
        "why": "did not answer within 10 s of its question",
        "drained_serving": False,
    }
    assert answers["h5"] == {"available": False, "why": "not in the inventory", "drained_serving": False}
    assert all(answers[f"s{number}"]["available"] for number in range(6))


def simulated(seconds: float, silent: frozenset[str] = frozenset()):
    """A simulated host's question: healthy after `seconds`, or (a silent host) never within the test."""

    def ask(host: str) -> dict:
        time.sleep(600 if host in silent else seconds)
        return {"available": True, "why": "", "drained_serving": False}

    return ask


def test_each_host_has_its_own_time_from_its_question_so_a_long_queue_counts_no_healthy_host_out():
    """200 healthy hosts answering in 0.2 s, 4 at a time, each given 5 s: the queue is 10 s long, twice a host's
    time, and every host is counted in rotation (one deadline for the whole count counted the tail of it out)."""
    hosts = [f"h{number}" for number in range(200)]
    answers = fleet.count_all(hosts, simulated(0.2), workers=4, host_timeout=5)
    assert [host for host, found in answers.items() if not found["available"]] == []


def test_a_silent_host_is_out_by_name_after_its_own_time_and_its_slot_goes_to_the_next_host():
    hosts = [f"h{number}" for number in range(40)]
    silent = frozenset({"h0", "h1", "h17"})
    answers = fleet.count_all(hosts, simulated(0.05, silent), workers=2, host_timeout=5)
    out = {host: found["why"] for host, found in answers.items() if not found["available"]}
    assert out == dict.fromkeys(sorted(silent, key=hosts.index), "did not answer within 5 s of its question")


def test_a_host_whose_turn_never_came_within_the_bound_is_not_asked_never_did_not_answer(monkeypatch):
    # One question at a time; h1 never answers; the bound made 3 s: the count stops there, h1 cut by the bound and
    # the hosts it never reached "not asked".
    monkeypatch.setattr(fleet, "bound", lambda hosts, workers, host_timeout: 3)
    answers = fleet.count_all([f"h{n}" for n in range(6)], simulated(0, frozenset({"h1"})), workers=1, host_timeout=60)
    whys = [found["why"] for found in answers.values()]
    assert whys[0] == "" and whys[1] == "did not answer before the count's bound of 3 s"
    assert whys[2:] == ["not asked: the count's bound of 3 s ended before its turn"] * 4
    # (Both are unknown to the guard: never counted as serving, never as known to be out.)
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_steps

    assert all(sglang_steps.unknown(why) for why in whys[1:])


def test_the_bound_grows_with_the_inventory_over_the_workers():
    assert fleet.bound(1000, 64, 30) == 17 * 30
    assert fleet.bound(10, 64, 30) == 2 * 30
