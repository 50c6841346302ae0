"""The capacity guard's count on a simulated inventory (action plugin sglang_fleet_rotation), for BENCHMARKS.md.

    .venv/bin/python bench/guard.py [--hosts 100] [--runs 3] [--fleet 100,1000]

An inventory of --hosts hosts on this machine's loopback: half answer (a local connection, a router whose /readiness
answers 200), half cannot be reached (ssh to a closed port: counted out of rotation, named). One ad-hoc run of the
action per run; the count's own seconds (what the action reports) and the whole ansible call's wall time, medians.
Every host must come back with the answer it should have, or the script fails.

At fleet size (--fleet): the count's dispatch itself (count_all, the action's queue of questions with each host's
own timeout) over 100 and 1,000 simulated hosts that each answer healthy after 0.3 s, with the action's default
workers (64) and host timeout (30 s), and a variant where 5% never answer (host timeout 10 s, to keep it short):
its wall time, how many healthy hosts it counted out (goal 0), whether every silent host was counted out by name,
and the controller's CPU seconds. The simulated question only waits: a real host's question adds its connection's
cost on the controller (an ssh client process each), measured by the loopback count above.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


FLEET_ANSWER_SECONDS = 0.3
FLEET_SILENT_SHARE = 0.05
FLEET_SILENT_TIMEOUT = 10


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def simulate(hosts: int, silent_share: float = 0.0) -> dict:
    """One count_all over `hosts` simulated hosts, `silent_share` of them never answering."""
    sys.path.insert(0, str(ROOT / ".collections"))
    from ansible_collections.dsv4.sglang.plugins.action.sglang_fleet_rotation import count_all
    from ansible_collections.dsv4.sglang.plugins.modules.sglang_fleet_rotation import ARGUMENT_SPEC

    names = [f"gpu-{number:04d}" for number in range(hosts)]
    silent = set(names[:: int(1 / silent_share)] if silent_share else [])
    never = threading.Event()

    def ask(host: str) -> dict:
        if host in silent:
            never.wait()
        time.sleep(FLEET_ANSWER_SECONDS)
        return {"available": True, "why": "", "drained_serving": False}

    workers = ARGUMENT_SPEC["workers"]["default"]
    timeout = FLEET_SILENT_TIMEOUT if silent else ARGUMENT_SPEC["host_timeout"]["default"]
    cpu, started = cpu_seconds(), time.monotonic()
    answers = count_all(names, ask, workers, timeout)
    wall, cpu = time.monotonic() - started, cpu_seconds() - cpu
    never.set()
    out = {host for host, found in answers.items() if not found["available"]}
    named = all(answers[host]["why"] == f"did not answer within {timeout} s of its question" for host in silent)
    return {
        "hosts": hosts,
        "silent": len(silent),
        "workers": workers,
        "timeout": timeout,
        "wall": wall,
        "cpu": cpu,
        "healthy_out": len(out - silent),
        "silent_named": named and silent <= out,
    }


def fleet(sizes: list[int], runs: int) -> list[dict]:
    """Each size, all healthy and with 5% silent, `runs` times: medians of wall and CPU, the worst of the rest."""
    found = []
    for hosts in sizes:
        for share in (0.0, FLEET_SILENT_SHARE):
            samples = [simulate(hosts, share) for _run in range(runs)]
            found.append(
                {
                    **samples[0],
                    "runs": runs,
                    "wall": statistics.median(s["wall"] for s in samples),
                    "cpu": statistics.median(s["cpu"] for s in samples),
                    "healthy_out": max(s["healthy_out"] for s in samples),
                    "silent_named": all(s["silent_named"] for s in samples),
                }
            )
            print(f"fleet {hosts} silent {found[-1]['silent']}: {found[-1]}", file=sys.stderr)
    return found


def fleet_report(found: list[dict]) -> str:
    runs = found[0]["runs"] if found else 0
    lines = [
        "## The capacity guard's count at fleet size (simulated)",
        "",
        f"`.venv/bin/python bench/guard.py --fleet {','.join(str(f['hosts']) for f in found[::2])} --runs {runs}`:",
        "the count's dispatch (`count_all` of the action plugin sglang_fleet_rotation: at most `workers` questions at",
        "once, each host given its own time from its question's start) over simulated hosts that each answer healthy",
        f"after {FLEET_ANSWER_SECONDS} s, at the action's defaults; and with {FLEET_SILENT_SHARE:.0%} of them never",
        f"answering (host timeout {FLEET_SILENT_TIMEOUT} s, to keep the run short). Medians of {runs} runs; healthy",
        "hosts counted out: the worst run. The simulated question only waits: a real host's adds its connection's cost",
        "on the controller (the loopback count above measures it).",
        "",
        "| hosts | silent | workers | host timeout | wall | goal | healthy counted out (goal 0) | silent named |"
        " controller CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in found:
        goal = "at most 20 s" if f["hosts"] == 1000 and not f["silent"] else "-"
        met = "" if goal == "-" else (" (met)" if f["wall"] <= 20 else " (NOT met)")
        lines.append(
            f"| {f['hosts']} | {f['silent']} | {f['workers']} | {f['timeout']} s | {f['wall']:.2f} s | {goal}{met} |"
            f" {f['healthy_out']} | {'yes' if f['silent_named'] else 'NO'} | {f['cpu']:.2f} s |"
        )
    lines += [
        "",
        "Before (2026-12-07, issue 61): one 30 s deadline for the whole count, 32 at a time: with 1,000 healthy hosts",
        "answering in 0.3 s each, 871 were counted out of rotation.",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fleet", default="", help="simulated fleet sizes, such as 100,1000 (only those)")
    args = parser.parse_args(argv)
    if args.fleet:
        print(fleet_report(fleet([int(size) for size in args.fleet.split(",")], args.runs)))
        return 0
    print(report(measure(args.hosts, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
