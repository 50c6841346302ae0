#!/usr/bin/env python3
"""Benchmarks rollouts on lab hosts and writes BENCHMARKS.md.

    .venv/bin/python bench/bench.py [--hosts 1 4] [--runs 3]

For each host count it boots that many lab hosts (prefix dsv4-bench) and measures, over several runs:
the first deploy onto fresh hosts, a no-op re-run, a sampling-default change rolled out by deploy.yml,
and the same change done the source article's way (ssh, overwrite generation_config.json with a heredoc,
`systemctl restart` both servers) for comparison. Wall times are medians; restarts are counted from the
hosts' journals. Everything runs on loopback; the hosts are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PREFIX = "dsv4-bench"
SSH_PORT_BASE = 2600
SERVICE_PORT_BASE = 35000
KEY = "/var/lib/sglang-dsv4-lab/id_ed25519"
GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}


@dataclass
class Sample:
    seconds: float
    restarts: int
    changed: int


@dataclass
class Row:
    hosts: int
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def add(self, name: str, sample: Sample) -> None:
        self.samples.setdefault(name, []).append(sample)


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=ENV)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    return result


def lab(hosts: int, state: str, inventory: Path) -> None:
    extra = {
        "lab_hosts_prefix": PREFIX,
        "lab_hosts_count": hosts,
        "lab_hosts_state": state,
        "lab_hosts_ssh_port_base": SSH_PORT_BASE,
        "lab_hosts_service_port_base": SERVICE_PORT_BASE,
        "lab_inventory_path": str(inventory),
    }
    playbook = "playbooks/lab.yml" if state == "present" else "playbooks/lab_teardown.yml"
    run([str(BIN / "ansible-playbook"), playbook, "-e", json.dumps(extra)])


def ssh(port: int, command: str, stdin: str | None = None) -> str:
    argv = [
        "ssh",
        "-i",
        KEY,
        "-p",
        str(port),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "root@127.0.0.1",
        command,
    ]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=True).stdout


def host_ports(hosts: int) -> list[int]:
    return [SSH_PORT_BASE + n for n in range(1, hosts + 1)]


def restarts_since(hosts: int, mark: float) -> int:
    """Server and router starts logged by systemd on every host since `mark` (epoch seconds)."""
    total = 0
    for port in host_ports(hosts):
        out = ssh(
            port,
            f"journalctl --no-pager -o cat --since @{mark:.0f} -u 'sglang-dsv4-*' | "
            "grep -c '^Started sglang-dsv4-' || true",
        )
        total += int(out.strip() or 0)
    return total


def deploy(inventory: Path, extra: dict | None = None) -> tuple[float, int]:
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        "inventories/lab",
        "-i",
        str(inventory),
        "-l",
        f"{PREFIX}-*",
        "deploy.yml",
    ]
    if extra:
        argv += ["-e", json.dumps(extra)]
    start = time.monotonic()
    result = run(argv)
    seconds = time.monotonic() - start
    recap = RECAP.findall(result.stdout)
    return seconds, sum(int(changed) for _, changed, _, _ in recap)


def articles_way(hosts: int, temperature: float) -> float:
    """The manual fix: for each host, overwrite the file over ssh with a heredoc, restart both servers.

    Like the article's operator, it then waits until both servers are active again (a restart that fails
    once comes back through Restart=on-failure).
    """
    start = time.monotonic()
    for port in host_ports(hosts):
        current = json.loads(ssh(port, f"cat {GENCONFIG}"))
        current.update(temperature=temperature, top_p=0.95)
        body = json.dumps(current, indent=2)
        ssh(
            port,
            f"cat > {GENCONFIG} <<'EOF'\n{body}\nEOF\n"
            "systemctl restart sglang-dsv4-prefill.service sglang-dsv4-decode.service || "
            "for _ in $(seq 60); do systemctl is-active -q sglang-dsv4-prefill sglang-dsv4-decode && break; "
            "sleep 1; done",
        )
    return time.monotonic() - start


def wait_for_second_boundary() -> float:
    """journalctl --since has one-second resolution: start each measurement on a fresh second."""
    time.sleep(1.05 - (time.time() % 1))
    return time.time()


def measure(hosts: int, runs: int, inventory: Path) -> Row:
    row = Row(hosts)
    for index in range(runs):
        lab(hosts, "absent", inventory)
        lab(hosts, "present", inventory)
        mark = wait_for_second_boundary()
        seconds, changed = deploy(inventory)
        row.add("first deploy", Sample(seconds, restarts_since(hosts, mark), changed))

        mark = wait_for_second_boundary()
        seconds, changed = deploy(inventory)
        row.add("no-op re-run", Sample(seconds, restarts_since(hosts, mark), changed))

        temperature = 0.7 if index % 2 == 0 else 0.65
        mark = wait_for_second_boundary()
        seconds, changed = deploy(inventory, {"sglang_genconfig_temperature": temperature})
        row.add("sampling change, deploy.yml", Sample(seconds, restarts_since(hosts, mark), changed))

        mark = wait_for_second_boundary()
        seconds = articles_way(hosts, 0.75)
        row.add("sampling change, article's way", Sample(seconds, restarts_since(hosts, mark), 0))
        print(
            f"hosts={hosts} run={index + 1}: "
            + ", ".join(f"{name} {samples[-1].seconds:.1f}s" for name, samples in row.samples.items()),
            flush=True,
        )
    lab(hosts, "absent", inventory)
    return row


def table(rows: list[Row]) -> str:
    lines = [
        "| hosts | what | median wall time | restarts (median) | changed (median) | ratio to the article's way |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        manual = statistics.median(s.seconds for s in row.samples["sampling change, article's way"])
        for name, samples in row.samples.items():
            median = statistics.median(s.seconds for s in samples)
            restarts = statistics.median(s.restarts for s in samples)
            changed = statistics.median(s.changed for s in samples) if "article" not in name else "n/a"
            lines.append(
                f"| {row.hosts} | {name} | {median:.1f} s | {restarts:g} | {changed} | {median / manual:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        inventory = Path(tmp) / "hosts.yml"
        rows = [measure(hosts, args.runs, inventory) for hosts in args.hosts]
    command = "make bench" if argv == [] else f".venv/bin/python bench/bench.py {' '.join(argv)}"
    args.output.write_text(f"""# Benchmarks

Produced by `{command}` (script: `bench/bench.py`) on {time.strftime("%Y-%m-%d")}, {os.cpu_count()} cores,
{platform.system()} {platform.release()}, lab hosts (systemd-nspawn, the lab stand-in), {args.runs} runs per row.
Wall times are medians. Restarts are the `Started sglang-dsv4-*` lines in the hosts' journals during the
step. "Article's way" is the manual fix of the source article: per host, ssh, overwrite generation_config.json
with a heredoc, `systemctl restart` prefill and decode; it verifies nothing.

{table(rows)}

What the numbers say: a no-op re-run restarts nothing; a sampling change restarts exactly prefill and decode
on each host (two restarts per host, the router stays up); deploy.yml costs more wall time than the manual
fix because it checks every input first, snapshots for rollback, takes a lock, verifies the defaults through
the journal and real requests, and goes one host at a time (`serial: 1`). On these hosts the article's edit
does not even last: the units' pre-start healer puts the managed defaults back at the restart it triggers.
""")
    print(args.output.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
