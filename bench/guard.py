"""The capacity guard's count on a simulated inventory (action plugin sglang_fleet_rotation), for BENCHMARKS.md.

    .venv/bin/python bench/guard.py [--hosts 100] [--runs 3]

An inventory of --hosts hosts on this machine's loopback: half answer (a local connection, a router whose /readiness
answers 200), half cannot be reached (ssh to a closed port: counted out of rotation, named). One ad-hoc run of the
action per run; the count's own seconds (what the action reports) and the whole ansible call's wall time, medians.
Every host must come back with the answer it should have, or the script fails.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def count(hosts: int, work: Path, router: str) -> tuple[float, float]:
    """(the count's seconds, the ansible call's wall seconds) of one count over the simulated inventory."""
    answering = [f"up-{number}" for number in range(hosts - hosts // 2)]
    lost = [f"down-{number}" for number in range(hosts // 2)]
    port = closed_port()
    inventory = {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for name in answering
    }
    inventory |= {name: {"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root"} for name in lost}
    (work / "inventory.json").write_text(json.dumps({"all": {"hosts": inventory}}))
    (work / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    args = {
        "hosts": answering + lost,
        "router_urls": dict.fromkeys(answering, router),
        "status_file": str(work / "none.json"),
        "drain_state": str(work / "drain.json"),
    }
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(work / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections"),
    }
    started = time.monotonic()
    subprocess.run(
        [
            str(BIN / "ansible"),
            answering[0],
            "-i",
            str(work / "inventory.json"),
            "-m",
            "dsv4.sglang.sglang_fleet_rotation",
            "-a",
            json.dumps(args),
            "-t",
            str(work / "tree"),
        ],
        check=True,
        capture_output=True,
        env=env,
        cwd=work,
        timeout=300,
    )
    wall = time.monotonic() - started
    result = json.loads((work / "tree" / answering[0]).read_text())
    answers = result["hosts"]
    wrong = [name for name in answering if answers[name]["available"] is not True]
    wrong += [name for name in lost if answers[name]["available"] or "cannot be reached" not in answers[name]["why"]]
    if wrong:
        raise SystemExit(f"wrong answers: {', '.join(wrong[:5])}: {answers[wrong[0]]}")
    print(f"count {result['seconds']} s, of which prepared {result['prepared']} s; wall {wall:.2f} s", file=sys.stderr)
    return result["seconds"], wall


def measure(hosts: int, runs: int) -> dict:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            samples = [count(hosts, Path(tmp), f"http://127.0.0.1:{httpd.server_address[1]}") for _run in range(runs)]
    finally:
        httpd.shutdown()
    return {
        "hosts": hosts,
        "runs": runs,
        "count": statistics.median(s[0] for s in samples),
        "wall": statistics.median(s[1] for s in samples),
    }


def report(found: dict) -> str:
    verdict = "met" if found["count"] <= 3 else "NOT met"
    lines = [
        "## The capacity guard's count",
        "",
        f"`.venv/bin/python bench/guard.py --hosts {found['hosts']} --runs {found['runs']}`: one count of the action",
        f"plugin sglang_fleet_rotation over a simulated inventory of {found['hosts']} hosts on loopback, half",
        "answering (a local connection, a router whose /readiness answers 200), half that cannot be reached (ssh to",
        "a closed port, counted out of rotation and named), every answer checked. Medians.",
        "",
        "| hosts | the count (the action's own seconds) | goal | the ansible call, wall |",
        "|---:|---:|---:|---:|",
        f"| {found['hosts']} | {found['count']:.2f} s | at most 3 s ({verdict}) | {found['wall']:.2f} s |",
        "",
        "Before (2026-12-04, BENCHMARKS.md's breakdown): one delegated module run per host outside the run, one",
        "after another, at about 0.37 s a host: about 37 s per count on 100 hosts, before every step.",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(report(measure(args.hosts, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
