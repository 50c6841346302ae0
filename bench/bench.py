"""Benchmarks rollouts on lab hosts and writes BENCHMARKS.md.

    .venv/bin/python bench/bench.py [--hosts 4] [--runs 3]

Boots N lab hosts (prefix dsv4-bench) once, deploys onto them, then measures in each run, on one host (the first,
with --limit) and on all N:
  floor            a bare `ansible -m ping` plus bench/floor.yml (stat every managed file, check the units)
  no-op            ansible-playbook deploy.yml with nothing to do (plan and light proof only)
  sampling change  deploy.yml with a new temperature (all N at once: -e sglang_rollout_batch=N)
  article's way    the source article's manual fix (ssh, heredoc, systemctl restart), for comparison
  under load       a sampling change rolled over all N hosts one at a time (batch 1) while bench/loadgen.py sends
                   streaming chat requests through the lab balancer (HAProxy), with the drain on and off:
                   requests answered, refused and cut mid-stream (--load-only: only this, replacing its section)
Wall times are medians over the runs; ratios are of medians measured in this one run of the script. Restarts
are counted from the hosts' journals. Everything runs on loopback; the hosts are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PREFIX = "dsv4-bench"
# Ports of their own: the bench may run beside the molecule scenarios.
SSH_PORT_BASE = 3000
SERVICE_PORT_BASE = 23000
BALANCER_PORT = 23000
LOAD_RATE = 20
LOAD_HEADING = "## Under load:"
KEY = "/var/lib/sglang-dsv4-lab/id_ed25519"
GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=ENV, check=False)
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


def ssh(port: int, command: str) -> str:
    argv = ["ssh", "-i", KEY, "-p", str(port), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    argv += ["-o", "LogLevel=ERROR", "root@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def ports(hosts: int) -> list[int]:
    return [SSH_PORT_BASE + n for n in range(1, hosts + 1)]


def limit(hosts: int) -> str:
    return ",".join(f"{PREFIX}-{n}" for n in range(1, hosts + 1))


def starts_since(hosts: int, mark: float) -> dict[str, int]:
    """Starts of each kind of unit logged on the hosts since `mark` (epoch seconds)."""
    counts = {"prefill": 0, "decode": 0, "router": 0}
    for port in ports(hosts):
        out = ssh(
            port,
            f"journalctl --no-pager -o cat --since @{mark:.0f} -u 'sglang-dsv4-*' | grep '^Started sglang-' || true",
        )
        for unit in counts:
            counts[unit] += out.count(f"Started sglang-dsv4-{unit}.service")
    return counts


def timed(argv: list[str], check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = run(argv, check=check)
    return time.monotonic() - start, result


def deploy(inventory: Path, hosts: int, extra: dict | None = None) -> tuple[float, int]:
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        "inventories/lab",
        "-i",
        str(inventory),
        "-l",
        limit(hosts),
        "deploy.yml",
    ]
    if extra:
        argv += ["-e", json.dumps(extra)]
    seconds, result = timed(argv)
    return seconds, sum(int(changed) for _unused, changed, _unused2, _unused3 in RECAP.findall(result.stdout))


def floor(inventory: Path, hosts: int) -> float:
    inventories = ["-i", "inventories/lab", "-i", str(inventory), "-l", limit(hosts)]
    ping, _unused = timed([str(BIN / "ansible"), *inventories, "all", "-m", "ansible.builtin.ping"])
    stat, _unused = timed([str(BIN / "ansible-playbook"), *inventories, "bench/floor.yml"])
    return ping + stat


def articles_way(hosts: int, temperature: float) -> float:
    """The manual fix: per host, overwrite the file over ssh with a heredoc, restart both servers, wait."""
    start = time.monotonic()
    for port in ports(hosts):
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


def second_boundary() -> float:
    """journalctl --since has one-second resolution: start each measurement on a fresh second."""
    time.sleep(1.05 - (time.time() % 1))
    return time.time()


def measure(hosts: int, runs: int, inventory: Path) -> dict:
    samples: dict[str, list] = {}

    def add(name: str, seconds: float, starts: dict | None = None, changed: int | None = None) -> None:
        samples.setdefault(name, []).append({"seconds": seconds, "starts": starts, "changed": changed})

    mark = second_boundary()
    seconds, changed = deploy(inventory, hosts)
    add(f"first deploy, {hosts} hosts", seconds, starts_since(hosts, mark), changed)
    temperatures = iter([0.7, 0.65] * runs)
    for index in range(runs):
        for count in (1, hosts):
            add(f"floor, {count} host(s)", floor(inventory, count))
            mark = second_boundary()
            seconds, changed = deploy(inventory, count)
            add(f"no-op, {count} host(s)", seconds, starts_since(count, mark), changed)
            mark = second_boundary()
            seconds, changed = deploy(
                inventory, count, {"sglang_genconfig_temperature": next(temperatures), "sglang_rollout_batch": count}
            )
            add(f"sampling change, {count} host(s)", seconds, starts_since(count, mark), changed)
            # Back to the inventory's defaults, so the next no-op really has nothing to do.
            deploy(inventory, count)
        mark = second_boundary()
        add(f"article's way, {hosts} host(s)", articles_way(hosts, 0.75), starts_since(hosts, mark))
        deploy(inventory, hosts)
        print(f"run {index + 1}: " + ", ".join(f"{n} {s[-1]['seconds']:.1f}s" for n, s in samples.items()), flush=True)
    return samples


def under_load(hosts: int, inventory: Path, temperatures: list[float]) -> list[dict]:
    """A rollout over every host, one at a time, under steady streaming load through the balancer: drain on, off."""
    inventories = ["-i", "inventories/lab", "-i", str(inventory)]
    paced = {"sglang_lab_token_seconds": 0.02, "sglang_lab_balancer": True}
    deploy(inventory, hosts, paced)
    run(
        [
            str(BIN / "ansible-playbook"),
            *inventories,
            "bench/balancer.yml",
            "-e",
            f"bench_balancer_port={BALANCER_PORT}",
        ]
    )
    key = lab_key()
    results = []
    try:
        for drain, temperature in zip((True, False), temperatures, strict=True):
            loadgen = [sys.executable, str(ROOT / "bench/loadgen.py"), "--port", str(BALANCER_PORT), "--key", key]
            client = subprocess.Popen(
                [*loadgen, "--rate", str(LOAD_RATE), "--seconds", "3600"], stdout=subprocess.PIPE, text=True
            )
            time.sleep(3)
            mark = second_boundary()
            extra = {**paced, "sglang_genconfig_temperature": temperature, "sglang_rollout_batch": 1}
            argv = [str(BIN / "ansible-playbook"), *inventories, "-l", limit(hosts), "deploy.yml"]
            # A rollout that fails (and is rolled back) under load is a result too: its outcome is reported.
            seconds, result = timed([*argv, "-e", json.dumps({**extra, "sglang_services_drain": drain})], check=False)
            outcome = "every host changed" if result.returncode == 0 else outcome_of(result.stdout)
            time.sleep(3)
            client.send_signal(signal.SIGTERM)
            tally = json.loads(client.communicate(timeout=600)[0].strip().splitlines()[-1])
            starts = starts_since(hosts, mark)
            results.append({"drain": drain, "seconds": seconds, "tally": tally, "starts": starts, "outcome": outcome})
            print(f"under load, drain {'on' if drain else 'off'}: {seconds:.1f}s {outcome} {tally}", flush=True)
            if result.returncode != 0:
                deploy(inventory, hosts, paced)  # back to the inventory before the next measurement
    finally:
        stop = ["-e", "bench_balancer_state=absent", "-e", f"bench_balancer_port={BALANCER_PORT}"]
        run([str(BIN / "ansible-playbook"), *inventories, "bench/balancer.yml", *stop], check=False)
    return results


def outcome_of(output: str) -> str:
    """What a failed rollout said of itself: the host rolled back and why, from its final message."""
    found = re.search(r"(\S+) was rolled back to its state before this run.*?Cause: ([^\n\"]+)", output)
    if not found:
        return "failed"
    return f"{found.group(1)} rolled back, the rollout stopped (cause: {found.group(2).strip()[:200]})"


def lab_key() -> str:
    sys.path.insert(0, str(ROOT / "molecule/shared"))
    from labtools import lab_secret

    return lab_secret("sglang_services_api_key")


def median(samples: dict, name: str) -> float:
    return statistics.median(s["seconds"] for s in samples[name])


def starts(samples: dict, name: str) -> str:
    values = [s["starts"] for s in samples[name] if s["starts"] is not None]
    if not values:
        return ""
    return ", ".join(f"{u} {statistics.median(v[u] for v in values):g}" for u in ("prefill", "decode", "router"))


def load_report(results: list[dict], hosts: int, command: str) -> str:
    rows = [
        "| drain | rollout wall time | outcome | answered | non-2xx | cut mid-stream | refused | lost | starts |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        t = r["tally"]
        starts = ", ".join(f"{u} {r['starts'][u]}" for u in ("prefill", "decode", "router"))
        rows.append(
            f"| {'on' if r['drain'] else 'off'} | {r['seconds']:.1f} s | {r['outcome']} | {t['ok']} | {t['non_2xx']}"
            f" | {t['truncated']}"
            f" | {t['failed']} | {t['lost']} of {t['sent']} | {starts} |"
        )
    return f"""
{LOAD_HEADING} a rollout over {hosts} hosts, one at a time, at {LOAD_RATE} streaming requests per second

Produced by `{command}` on {time.strftime("%Y-%m-%d")}, {os.cpu_count()} cores.

`bench/loadgen.py` sent streaming chat requests (32 tokens, 20 ms each on the decode server) through the lab
balancer (HAProxy checking each router's `/readiness` every 500 ms, `roles/lab_balancer`) for the whole rollout of
a sampling change, host by host (no canary: the bench has no central Prometheus). With the drain, each host leaves
the rotation, finishes what it holds, restarts and comes back before the next; without it, the router and the
balancer keep sending to servers that are stopping (SGLang, and the stand-in, still take new requests while they
drain) and then to servers that are loading. One run each; the outcome is what the run reported of itself.

{chr(10).join(rows)}
"""


def report(samples: dict, hosts: int, runs: int, command: str) -> str:
    rows = [
        "| step | median wall time | starts per kind of unit (median) | changed (median) |",
        "|---|---:|---|---:|",
    ]
    for name in samples:
        changed = [s["changed"] for s in samples[name] if s["changed"] is not None]
        shown = f"{statistics.median(changed):g}" if changed else ""
        rows.append(f"| {name} | {median(samples, name):.1f} s | {starts(samples, name)} | {shown} |")
    one, many = "1 host(s)", f"{hosts} host(s)"
    ratios = [
        ("no-op on 1 host / floor on 1 host", median(samples, f"no-op, {one}") / median(samples, f"floor, {one}"), 2.0),
        (
            f"no-op on {hosts} hosts / no-op on 1 host",
            median(samples, f"no-op, {many}") / median(samples, f"no-op, {one}"),
            1.3,
        ),
        (
            f"sampling change on {hosts} hosts (batch {hosts}) / on 1 host",
            median(samples, f"sampling change, {many}") / median(samples, f"sampling change, {one}"),
            1.5,
        ),
        (
            f"sampling change on {hosts} hosts / article's way on {hosts} hosts",
            median(samples, f"sampling change, {many}") / median(samples, f"article's way, {many}"),
            None,
        ),
    ]
    ratio_rows = ["| ratio | measured | target |", "|---|---:|---:|"]
    for name, value, target in ratios:
        ratio_rows.append(f"| {name} | {value:.2f} | {'at most ' + str(target) if target else ''} |")
    return f"""# Benchmarks

Produced by `{command}` (script: `bench/bench.py`) on {time.strftime("%Y-%m-%d")}, {os.cpu_count()} cores,
{platform.system()} {platform.release()}, {hosts} lab hosts (systemd-nspawn; the real sglang-router, the lab
stand-in for the GPU servers), {runs} runs. Wall times are medians; every ratio is of medians measured in this
one run of the script. Starts are the `Started sglang-dsv4-*` lines in the hosts' journals during the step.

- *floor*: a bare `ansible -m ping` plus `bench/floor.yml` (stat every managed file, check the units are
  active) on the same hosts: the least any check of the fleet costs.
- *no-op*: `ansible-playbook deploy.yml` with nothing to do: the plan (every argument spec and check, one
  read of each host) and the light proof (health, `/server_info`, the startup line of each server's current
  start); no host is locked or changed.
- *sampling change*: a new temperature through `deploy.yml`, all hosts in one batch
  (`-e sglang_rollout_batch=N`): plan, lock, snapshot, write, restart prefill and decode, full verification.
- *article's way*: the source article's manual fix (per host: ssh, overwrite generation_config.json with a
  heredoc, `systemctl restart` prefill and decode); it verifies nothing, and on these hosts the units'
  pre-start healer undoes it at the restart it triggers.

{chr(10).join(rows)}

{chr(10).join(ratio_rows)}
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument(
        "--load-only", action="store_true", help="only the rollout under load; replaces that section of --output"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        inventory = Path(tmp) / "hosts.yml"
        lab(args.hosts, "absent", inventory)
        lab(args.hosts, "present", inventory)
        try:
            samples = {} if args.load_only else measure(args.hosts, args.runs, inventory)
            loaded = under_load(args.hosts, inventory, [0.7, 0.65]) if args.hosts > 1 else []
        finally:
            lab(args.hosts, "absent", inventory)
    command = "make bench" if argv == [] else f".venv/bin/python bench/bench.py {' '.join(argv)}"
    loads = load_report(loaded, args.hosts, command) if loaded else ""
    if args.load_only:
        kept = args.output.read_text().split(LOAD_HEADING, 1)[0].rstrip("\n") + "\n" if args.output.exists() else ""
        args.output.write_text(kept + loads)
    else:
        args.output.write_text(report(samples, args.hosts, args.runs, command) + loads)
    print(args.output.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
