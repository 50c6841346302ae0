"""Benchmarks rollouts on lab hosts and writes BENCHMARKS.md.

    .venv/bin/python bench/bench.py [--sizes 1,2,4,8] [--change-sizes 1,4] [--runs 3] [--load]

Boots the largest size of lab hosts (prefix dsv4-bench) once, deploys onto them, then measures in each run, on the
first N hosts (--limit):
  floor            a bare `ansible -m ping` plus bench/floor.yml (stat every managed file, check the units), on
                   each N of --sizes
  no-op            ansible-playbook deploy.yml with nothing to do (plan and light proof only), on each N of --sizes
  sampling change  deploy.yml with a new temperature (all N at once: steps [N], guard N), each N of
                   --change-sizes
  by hand          the least a verified change can cost done by hand, on the same N hosts in parallel: write the
                   managed defaults and generation_config.json, restart prefill and decode in one systemctl call,
                   wait for both servers' /health and the router's /readiness, one chat request with the key
  article's way    the source article's manual fix (ssh, heredoc, systemctl restart), on the largest change size
  guard's count    the capacity guard's one count over a simulated inventory of 100 hosts (bench/guard.py), and its
                   dispatch over simulated fleets of 100 and 1,000 hosts (healthy, and 5% silent)
  under load       (--load, or --load-only to replace only that section) a sampling change rolled over 4 hosts
                   one at a time (batch 1) while bench/loadgen.py sends streaming chat requests through the lab
                   balancer (HAProxy), with the drain on and off: requests answered, refused and cut mid-stream
Wall times are medians over the runs; slopes are least-squares fits of the medians against N; ratios are of
medians measured in this one run of the script. Restarts are counted from the hosts' journals. Everything runs on
loopback; the hosts are removed at the end. Without --load, the under-load section of the output is kept.
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

import guard  # bench/guard.py: the capacity guard's count on a simulated inventory
from cpu import busy_seconds  # bench/cpu.py: the machine's busy CPU seconds, from /proc/stat

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PREFIX = "dsv4-bench"
# Ports of their own: the bench may run beside the molecule scenarios.
SSH_PORT_BASE = 3000
SERVICE_PORT_BASE = 23000
BALANCER_PORT = 23000
LOAD_RATE = 20
LOAD_HEADING = "## Under load:"
STEPS_HEADING = "## Steps and the capacity guard under load"
# The last section, written by bench/cpu.py; --steps-only keeps it.
CPU_HEADING = "## A run's CPU: ssh pipelining and the preload"
# Issue 28's measurement: 8 hosts whose servers take 20 s to load, a sampling change at batch 1 and in steps.
STEPS_HOSTS = 8
STEPS_STARTUP = 20
STEPS_VARIANTS = (
    ("(a) batch 1", {"sglang_rollout_steps": [1], "sglang_rollout_max_unavailable": 1}),
    (
        '(b) steps [1, "25%", "50%"], guard 25%',
        {"sglang_rollout_steps": [1, "25%", "50%"], "sglang_rollout_max_unavailable": "25%"},
    ),
)
# What a real host's restart is projected with: DeepSeek-V4-Flash's reload onto 8 GPUs, in seconds.
REAL_RELOAD = 180
KEY = "/var/lib/sglang-dsv4-lab/id_ed25519"
GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)
ENV = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}


def run(argv: list[str], check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**ENV, **(env or {})}, check=False)
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


def own_inventory(tmp: str) -> Path:
    """The bench's own inventory folder: its lab hosts (hosts.yml, which playbooks/lab.yml writes) and the lab's
    group_vars. Not inventories/lab: its hosts.yml lists the hosts `make deploy` booted, and the capacity guard asks
    every serving host of the inventory (one that is down counts as out of rotation and shrinks every step)."""
    folder = Path(tmp) / "inventory"
    folder.mkdir()
    (folder / "group_vars").symlink_to(ROOT / "inventories/lab/group_vars")
    return folder / "hosts.yml"


def sources(inventory: Path) -> list[str]:
    return ["-i", str(inventory.parent)]


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


def timed(argv: list[str], check: bool = True, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = run(argv, check=check, env=env)
    return time.monotonic() - start, result


def task_times(path: Path) -> dict:
    """The environment that makes a run write each task's wall time (bench/callback_plugins) to `path`."""
    return {
        "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "bench/callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "bench_task_times,dsv4.sglang.sglang_preload",
        "BENCH_TASK_TIMES": str(path),
    }


def deploy(inventory: Path, hosts: int, extra: dict | None = None, times: Path | None = None) -> tuple[float, int]:
    argv = [str(BIN / "ansible-playbook"), *sources(inventory), "-l", limit(hosts), "deploy.yml"]
    if extra:
        argv += ["-e", json.dumps(extra)]
    seconds, result = timed(argv, env=task_times(times) if times else None)
    return seconds, sum(int(changed) for _unused, changed, _unused2, _unused3 in RECAP.findall(result.stdout))


def floor(inventory: Path, hosts: int) -> float:
    inventories = [*sources(inventory), "-l", limit(hosts)]
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


HAND_CHANGE = r"""
import json, sys
temperature, key, base = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
managed, target = "/etc/sglang-dsv4/sampling-defaults.json", "/srv/models/DeepSeek-V4-Flash/generation_config.json"
for path in (managed, target):
    with open(path) as handle:
        data = json.load(handle)
    data["temperature"] = temperature
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
"""
HAND_WAIT = r"""
import json, sys, time, urllib.request, urllib.error
key, base = sys.argv[1], int(sys.argv[2])
def status(url, body=None):
    request = urllib.request.Request(url, data=body)
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except (urllib.error.URLError, OSError) as error:
        return getattr(error, "code", 0)
for url in (f"http://127.0.0.1:{base + 1}/health", f"http://127.0.0.1:{base + 2}/health", f"http://127.0.0.1:{base}/readiness"):
    while status(url) != 200:
        time.sleep(0.1)
body = json.dumps({"model": "deepseek-ai/DeepSeek-V4-Flash", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 16}).encode()
sys.exit(0 if status(f"http://127.0.0.1:{base}/v1/chat/completions", body) == 200 else 1)
"""


def by_hand(hosts: int, temperature: float, key: str) -> float:
    """The least a verified change costs by hand, every host in parallel (one ssh session each)."""
    start = time.monotonic()
    sessions = []
    for n, port in enumerate(ports(hosts), start=1):
        base = SERVICE_PORT_BASE + n * 10
        command = (
            f"python3 - {temperature} {key} {base} <<'EOF'\n{HAND_CHANGE}\nEOF\n"
            "systemctl restart sglang-dsv4-prefill.service sglang-dsv4-decode.service\n"
            f"python3 - {key} {base} <<'EOF'\n{HAND_WAIT}\nEOF\n"
        )
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
        ]
        sessions.append(subprocess.Popen([*argv, "-o", "LogLevel=ERROR", "root@127.0.0.1", command]))
    codes = [session.wait() for session in sessions]
    if any(codes):
        raise RuntimeError(f"the change by hand failed: exit codes {codes}")
    return time.monotonic() - start


def second_boundary() -> float:
    """journalctl --since has one-second resolution: start each measurement on a fresh second."""
    time.sleep(1.05 - (time.time() % 1))
    return time.time()


def measure(sizes: list[int], changes: list[int], runs: int, inventory: Path) -> dict:
    samples: dict[str, list] = {}
    largest = max(sizes)
    key = lab_key()

    def add(name: str, seconds: float, starts: dict | None = None, changed: int | None = None, **more) -> None:
        samples.setdefault(name, []).append({"seconds": seconds, "starts": starts, "changed": changed, **more})

    times = inventory.parent.parent / "task-times.jsonl"

    mark = second_boundary()
    seconds, changed = deploy(inventory, largest)
    add(f"first deploy, {largest} hosts", seconds, starts_since(largest, mark), changed)
    temperatures = iter([0.7, 0.65, 0.75, 0.8] * runs * len(changes))
    for index in range(runs):
        for count in sizes:
            add(f"floor, {count} host(s)", floor(inventory, count))
            mark = second_boundary()
            busy = busy_seconds()
            seconds, changed = deploy(inventory, count)
            add(f"no-op, {count} host(s)", seconds, starts_since(count, mark), changed, cpu=busy_seconds() - busy)
        for count in changes:
            mark = second_boundary()
            extra = {
                "sglang_genconfig_temperature": next(temperatures),
                "sglang_rollout_steps": [count],
                "sglang_rollout_max_unavailable": count,
                # The batch is the whole inventory at the largest count: allowed by name.
                "sglang_rollout_allow_whole_fleet": True,
            }
            busy = busy_seconds()
            seconds, changed = deploy(inventory, count, extra, times)
            cpu = busy_seconds() - busy
            tasks = [json.loads(line) for line in times.read_text().splitlines()]
            add(f"sampling change, {count} host(s)", seconds, starts_since(count, mark), changed, tasks=tasks, cpu=cpu)
            mark = second_boundary()
            busy = busy_seconds()
            seconds = by_hand(count, next(temperatures), key)
            add(f"by hand, {count} host(s)", seconds, starts_since(count, mark), cpu=busy_seconds() - busy)
            # Back to the inventory's defaults, so the next no-op really has nothing to do.
            deploy(inventory, count)
        mark = second_boundary()
        add(
            f"article's way, {max(changes)} host(s)", articles_way(max(changes), 0.75), starts_since(max(changes), mark)
        )
        deploy(inventory, max(changes))
        print(f"run {index + 1}: " + ", ".join(f"{n} {s[-1]['seconds']:.1f}s" for n, s in samples.items()), flush=True)
    return samples


def cpu_slope(samples: dict, kind: str, sizes: list[int]) -> tuple[float, float]:
    """Least-squares fit of the median CPU seconds against N: (CPU seconds at N = 0, CPU seconds per added host)."""
    xs = [float(n) for n in sizes]
    ys = [statistics.median(s["cpu"] for s in samples[f"{kind}, {n} host(s)"]) for n in sizes]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    per_host = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    return mean_y - per_host * mean_x, per_host


def slope(samples: dict, kind: str, sizes: list[int]) -> tuple[float, float]:
    """Least-squares fit of the medians against N: (seconds at N = 0, seconds per added host)."""
    xs = [float(n) for n in sizes]
    ys = [median(samples, f"{kind}, {n} host(s)") for n in sizes]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    per_host = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    return mean_y - per_host * mean_x, per_host


def under_load(hosts: int, inventory: Path, temperatures: list[float]) -> list[dict]:
    """A rollout over every host, one at a time, under steady streaming load through the balancer: drain on, off."""
    inventories = sources(inventory)
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
            extra = {**paced, "sglang_genconfig_temperature": temperature, "sglang_rollout_steps": [1]}
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


def routers_up(sock: str) -> int | None:
    """How many routers the balancer has UP now (HAProxy's runtime socket, `show stat`); None when it cannot say."""
    sys.path.insert(0, str(ROOT / "molecule/shared"))
    from labtools import balancer_stats

    try:
        stats = balancer_stats(sock)
    except OSError:
        return None
    return sum(1 for name, row in stats.items() if name.startswith(PREFIX) and row["status"].startswith("UP"))


def sample_up(sock: str, into: list, stop) -> None:
    """Every 0.5 s until `stop` is set: how many routers the balancer has UP (None: it could not say)."""
    while not stop.is_set():
        into.append(routers_up(sock))
        stop.wait(0.5)


def steps_module():
    """module_utils/sglang_steps.py (standard library only): the same schedule the plan computes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sglang_steps", ROOT / "plugins/module_utils/sglang_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def steps_under_load(inventory: Path, runs: int) -> list[dict]:
    """A sampling change over STEPS_HOSTS hosts under steady load, at batch 1 and in growing steps with the guard:
    wall time, the fewest routers the balancer had UP (sampled every 0.5 s), requests lost."""
    import threading

    inventories = sources(inventory)
    paced = {"sglang_lab_token_seconds": 0.02, "sglang_lab_balancer": True, "sglang_lab_startup_seconds": STEPS_STARTUP}
    all_at_once = {
        "sglang_rollout_steps": [STEPS_HOSTS],
        "sglang_rollout_max_unavailable": STEPS_HOSTS,
        "sglang_rollout_allow_whole_fleet": True,
    }
    deploy(inventory, STEPS_HOSTS, {**paced, **all_at_once})
    balancer = ["-e", f"bench_balancer_port={BALANCER_PORT}"]
    run([str(BIN / "ansible-playbook"), *inventories, "bench/balancer.yml", *balancer])
    sock = "/var/lib/sglang-dsv4-lab/balancer/bench.sock"
    key = lab_key()
    temperatures = iter([0.7, 0.65] * (runs + 1))
    results = []
    try:
        for index in range(runs):
            for name, settings in STEPS_VARIANTS:
                loadgen = [sys.executable, str(ROOT / "bench/loadgen.py"), "--port", str(BALANCER_PORT), "--key", key]
                client = subprocess.Popen(
                    [*loadgen, "--rate", str(LOAD_RATE), "--seconds", "7200"], stdout=subprocess.PIPE, text=True
                )
                time.sleep(3)
                ups: list[int | None] = []
                done = threading.Event()

                sampler = threading.Thread(target=sample_up, args=(sock, ups, done), daemon=True)
                sampler.start()
                extra = {**paced, **settings, "sglang_genconfig_temperature": next(temperatures)}
                argv = [str(BIN / "ansible-playbook"), *inventories, "-l", limit(STEPS_HOSTS), "deploy.yml"]
                seconds, result = timed([*argv, "-e", json.dumps(extra)], check=False)
                time.sleep(3)
                done.set()
                sampler.join()
                client.send_signal(signal.SIGTERM)
                tally = json.loads(client.communicate(timeout=600)[0].strip().splitlines()[-1])
                taken = [int(n) for n in re.findall(r"msg: .?step (\d+): dsv4-bench", result.stdout)]
                entry = {
                    "name": name,
                    "run": index + 1,
                    "seconds": seconds,
                    "ok": result.returncode == 0,
                    "steps": max(taken) if taken else 0,
                    "fewest_up": min((u for u in ups if u is not None), default=None),
                    "unknown_samples": sum(1 for u in ups if u is None),
                    "samples": len(ups),
                    "tally": tally,
                }
                results.append(entry)
                print(f"steps under load: {json.dumps(entry)}", flush=True)
                if result.returncode != 0:
                    print(result.stdout[-3000:], result.stderr[-2000:], flush=True)
                    deploy(inventory, STEPS_HOSTS, {**paced, **all_at_once})
    finally:
        stop = ["-e", "bench_balancer_state=absent", *balancer]
        run([str(BIN / "ansible-playbook"), *inventories, "bench/balancer.yml", *stop], check=False)
    return results


def steps_report(results: list[dict], runs: int, command: str) -> str:
    steps = steps_module()
    lines = [
        STEPS_HEADING,
        "",
        f"{STEPS_HOSTS} lab hosts behind the lab balancer (HAProxy), their servers taking {STEPS_STARTUP} s to load"
        f" (`sglang_lab_startup_seconds`), {LOAD_RATE} streaming chat requests per second through the balancer,"
        f" a sampling change over all {STEPS_HOSTS}. Wall time is the whole `deploy.yml` run (plan included);"
        " the fewest routers UP is sampled from HAProxy's stats every 0.5 s; lost is every request not answered"
        f" 200 in full (non-2xx, cut mid-stream, refused). `{command}`, {runs} run(s)"
        + (" (medians of 3 would take about 40 minutes more on this 2-core machine)" if runs < 3 else " (medians)")
        + ".",
        "",
        "| rollout | steps taken | wall | fewest routers UP | goal | lost | answered |",
        "|---|---|---|---|---|---|---|",
    ]
    walls = {}
    for name, settings in STEPS_VARIANTS:
        mine = [r for r in results if r["name"] == name]
        if not mine:
            continue
        wall = statistics.median(r["seconds"] for r in mine)
        walls[name] = (wall, statistics.median(r["steps"] for r in mine))
        guard = steps.guard(settings["sglang_rollout_max_unavailable"], STEPS_HOSTS)
        fewest = min(r["fewest_up"] for r in mine if r["fewest_up"] is not None)
        lost = sum(r["tally"]["non_2xx"] + r["tally"]["truncated"] + r["tally"]["failed"] for r in mine)
        answered = sum(r["tally"]["ok"] for r in mine)
        unknown = sum(r["unknown_samples"] for r in mine)
        met = "met" if fewest >= STEPS_HOSTS - guard else "NOT met"
        lines.append(
            f"| {name} | {walls[name][1]:.0f} | {wall:.0f} s | {fewest} of {STEPS_HOSTS}"
            f"{f' ({unknown} samples unreadable)' if unknown else ''} | >= {STEPS_HOSTS - guard}: {met}"
            f" | {lost} | {answered} |"
        )
    if len(walls) == 2:
        (a_wall, a_steps), (b_wall, b_steps) = list(walls.values())
        ratio = b_wall / a_wall
        eight = [f"h{n}" for n in range(STEPS_HOSTS)]
        least = [
            len(
                steps.schedule(
                    eight,
                    cfg["sglang_rollout_steps"],
                    steps.guard(cfg["sglang_rollout_max_unavailable"], STEPS_HOSTS),
                    [],
                )
            )
            for _name, cfg in STEPS_VARIANTS
        ]
        a_least, b_least = least
        b_guard = STEPS_VARIANTS[1][1]["sglang_rollout_max_unavailable"]
        lines += [
            "",
            f"(b) took **{ratio:.2f}x** (a)'s wall time (goal: at most 0.4x: {'met' if ratio <= 0.4 else 'NOT met'})."
            f" The guard bounds it: with at most {steps.guard(b_guard, STEPS_HOSTS)} of {STEPS_HOSTS} hosts out at"
            f" once, (b) cannot take fewer than {b_least} steps against (a)'s {a_least}, so at equal step times the"
            f" ratio cannot go below {b_least / a_least:.2f}; only fewer, larger steps (a larger guard) go lower.",
            "",
            f"Projection to a real fleet, from the measured time per step (wall time over steps taken: (a) "
            f"{a_wall / a_steps:.0f} s, (b) {b_wall / b_steps:.0f} s) with the lab's {STEPS_STARTUP} s load replaced"
            f" by a {REAL_RELOAD} s reload of DeepSeek-V4-Flash (the batches as module_utils/sglang_steps.py makes"
            " them, no host down before the run, the analysis off as here; with it on, add its soak and rounds to"
            " every step):",
            "",
            "| hosts | (a) steps | (a) time | (b) steps | (b) time |",
            "|---|---|---|---|---|",
        ]
        for hosts in (100, 1000):
            names = [f"h{n}" for n in range(hosts)]
            counts = []
            for (_name, settings), (wall, taken) in zip(STEPS_VARIANTS, walls.values(), strict=True):
                allowed = steps.guard(settings["sglang_rollout_max_unavailable"], hosts)
                batches = steps.schedule(names, settings["sglang_rollout_steps"], allowed, [])
                per_step = wall / taken - STEPS_STARTUP + REAL_RELOAD
                counts.append((len(batches), len(batches) * per_step / 3600))
            lines.append(f"| {hosts} | {counts[0][0]} | {counts[0][1]:.1f} h | {counts[1][0]} | {counts[1][1]:.1f} h |")
    return "\n".join(lines) + "\n"


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


def breakdown(samples: dict, changes: list[int]) -> str:
    """Where a sampling change's wall time goes: by play (the apply by role) and the slowest tasks, medians."""
    sections, overheads = [], []
    for n in changes:
        runs = [s for s in samples[f"sampling change, {n} host(s)"] if s.get("tasks")]
        if not runs:
            continue
        groups: dict[str, list[float]] = {}
        tasks: dict[tuple[str, str], list[tuple[float, int]]] = {}
        counts = []
        for sample in runs:
            by_group: dict[str, float] = {}
            by_task: dict[tuple[str, str], list[float]] = {}
            for row in sample["tasks"]:
                applying = row["play"].startswith("Apply")
                group = f"apply: {row['role'] or 'the play and its blocks'}" if applying else f"play: {row['play']}"
                by_group[group] = by_group.get(group, 0.0) + row["seconds"]
                if row["task"] != "(play start)":
                    by_task.setdefault((row["role"], row["task"]), []).append(row["seconds"])
            # What no task accounts for: ansible-playbook's start-up and parsing, and its end.
            by_group["ansible-playbook start-up, parsing and the end"] = sample["seconds"] - sum(by_group.values())
            counts.append(sum(len(v) for v in by_task.values()))
            for group, seconds in by_group.items():
                groups.setdefault(group, []).append(seconds)
            for key, values in by_task.items():
                tasks.setdefault(key, []).append((sum(values), len(values)))
        total = statistics.median(s["seconds"] for s in runs)
        overheads.append(overhead(n, runs))
        rows = [f"| where (N = {n}) | median seconds | share |", "|---|---:|---:|"]
        for group, values in sorted(groups.items(), key=lambda item: -statistics.median(item[1])):
            seconds = statistics.median(values)
            rows.append(f"| {group} | {seconds:.1f} | {seconds / total:.0%} |")
        slowest = sorted(tasks.items(), key=lambda item: -statistics.median(v for v, _c in item[1]))[:10]
        top = [f"| slowest tasks (N = {n}) | role | times run | median seconds, all runs of it |"]
        top.append("|---|---|---:|---:|")
        for (role, task), values in slowest:
            top.append(
                f"| {task} | {role or '-'} | {statistics.median(c for _v, c in values):g}"
                f" | {statistics.median(v for v, _c in values):.1f} |"
            )
        sections.append(
            f"{chr(10).join(rows)}\n\n{chr(10).join(top)}\n\n"
            f"{statistics.median(counts):g} tasks ran (median; a task of a loop or on several hosts counts once)."
        )
    if overheads:
        sections.insert(0, overhead_table(overheads))
    return "\n\n".join(sections)


# The goals of the batch's overhead (issue 27), by batch size.
OVERHEAD_GOALS = {1: 3.0, 4: 5.0}


def overhead(n: int, runs: list[dict]) -> dict:
    """One batch's wall time (the apply play, from its first task to its last) and what of it is the services' own
    waits (drain notice and in-flight wait, start to ready, return notice, as the modules report them): the rest is
    the collection's overhead. The plan and ansible-playbook's start-up are per run, reported apart."""
    batch, waits, plan, startup, modules, tasks = [], [], [], [], [], []
    for sample in runs:
        apply = [row for row in sample["tasks"] if row["play"].startswith("Apply")]
        batch.append(sum(row["seconds"] for row in apply))
        modules.append(sum(row.get("module_runs", 0) for row in apply) / n)
        tasks.append(sum(row.get("host_tasks", 0) for row in apply) / n)
        waits.append(sum(row.get("service_wait", 0.0) for row in apply))
        plan.append(sum(row["seconds"] for row in sample["tasks"] if not row["play"].startswith("Apply")))
        startup.append(sample["seconds"] - sum(row["seconds"] for row in sample["tasks"]))
    over = [b - w for b, w in zip(batch, waits, strict=True)]
    return {
        "n": n,
        "batch": statistics.median(batch),
        "waits": statistics.median(waits),
        "overhead": statistics.median(over),
        "plan": statistics.median(plan),
        "startup": statistics.median(startup),
        "modules": statistics.median(modules),
        "tasks": statistics.median(tasks),
        "runs": len(runs),
    }


def overhead_table(rows: list[dict]) -> str:
    lines = [
        "### The batch's overhead",
        "",
        "A batch's wall time is its apply play, from its first task to its last; the services' own waits are what",
        "the drain, the restart and the undrain modules report waiting for the services (the drain notice and the",
        "in-flight wait, start to ready, the return notice); the overhead is the rest. The plan (and the build and",
        "verify plays) and ansible-playbook's start-up are per run, shown apart. Module runs are the apply's results",
        "on the hosts that carry a module's invocation (each loop item counts), tasks every task a host ran or",
        "skipped (each a worker process on the controller), both per host. Medians over the runs.",
        "",
        "| batch of N | batch wall time | services' own waits | overhead | goal | plan and other plays | start-up"
        " | module runs per host (goal: at most 5) | tasks per host |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        goal = OVERHEAD_GOALS.get(row["n"])
        verdict = (
            ""
            if goal is None
            else (f"at most {goal:g} s (met)" if row["overhead"] <= goal else f"at most {goal:g} s (NOT met)")
        )
        lines.append(
            f"| {row['n']} | {row['batch']:.1f} s | {row['waits']:.1f} s | {row['overhead']:.1f} s | {verdict}"
            f" | {row['plan']:.1f} s | {row['startup']:.1f} s | {row['modules']:g} | {row['tasks']:g} |"
        )
    return "\n".join(lines)


def projection(intercept: float, per_host: float, hosts: int) -> str:
    seconds = intercept + per_host * hosts
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def report(samples: dict, sizes: list[int], changes: list[int], runs: int, command: str) -> str:
    rows = [
        "| step | median wall time | starts per kind of unit (median) | changed (median) |",
        "|---|---:|---|---:|",
    ]
    for name in samples:
        changed = [s["changed"] for s in samples[name] if s["changed"] is not None]
        shown = f"{statistics.median(changed):g}" if changed else ""
        rows.append(f"| {name} | {median(samples, name):.1f} s | {starts(samples, name)} | {shown} |")
    noop_a, noop_b = slope(samples, "no-op", sizes)
    floor_a, floor_b = slope(samples, "floor", sizes)
    scale = ["| N hosts | floor | no-op | no-op / floor |", "|---:|---:|---:|---:|"]
    for n in sizes:
        f, o = median(samples, f"floor, {n} host(s)"), median(samples, f"no-op, {n} host(s)")
        scale.append(f"| {n} | {f:.1f} s | {o:.1f} s | {o / f:.2f} |")
    slopes = [
        "| | seconds at N = 0 (fit) | seconds per added host (slope) | 100 hosts (projected)"
        " | 1,000 hosts (projected) |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, (at_zero, per_host) in (("floor", (floor_a, floor_b)), ("no-op", (noop_a, noop_b))):
        hundred, thousand = projection(at_zero, per_host, 100), projection(at_zero, per_host, 1000)
        slopes.append(f"| {kind} | {at_zero:.1f} | {per_host:.2f} | {hundred} | {thousand} |")
    ratio = noop_b / floor_b if floor_b > 0 else float("inf")
    verdict = "meets" if ratio <= 1.2 else "misses"
    if ratio <= 1.2:
        lever = (
            "The no-op grows like the floor, so what grows is the per-host cost of any Ansible run, not the plan. The"
            " next lever is not `forks` (8 already saturate 2 cores) nor `strategy: free` (it removes waits, not work):"
            " more controller cores, then a pull model (each host plans and proves itself, from a timer or"
            " ansible-pull, and the controller only gathers results) for fleets of thousands."
        )
    else:
        lever = (
            "The no-op grows faster than the floor: the next lever is to validate every host's variables and compute"
            " the desired documents in one controller pass (run_once over the fleet) instead of once per host."
        )
    change_rows = [
        "| N hosts (batch N) | sampling change through deploy.yml | by hand (the minimum) | ratio"
        " | restarts, deploy.yml | restarts, by hand |",
        "|---:|---:|---:|---:|---|---|",
    ]
    cores = os.cpu_count() or 1
    cpu_wall_rows = [
        "| N hosts | CPU seconds, deploy.yml | CPU seconds, by hand | deploy.yml's CPU over the cores"
        " | the goal's wall time | the goal against the CPU |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for n in changes:
        c, h = median(samples, f"sampling change, {n} host(s)"), median(samples, f"by hand, {n} host(s)")
        change_rows.append(
            f"| {n} | {c:.1f} s | {h:.1f} s | {c / h:.2f} | {starts(samples, f'sampling change, {n} host(s)')}"
            f" | {starts(samples, f'by hand, {n} host(s)')} |"
        )
        cpu_c = statistics.median(x["cpu"] for x in samples[f"sampling change, {n} host(s)"])
        cpu_h = statistics.median(x["cpu"] for x in samples[f"by hand, {n} host(s)"])
        goal = (2.5 if n == 1 else 2.0) * h
        cpu_wall_rows.append(
            f"| {n} | {cpu_c:.1f} | {cpu_h:.1f} | {cpu_c / cores:.1f} s | {goal:.1f} s"
            f" | {'within reach' if cpu_c / cores <= goal else 'out of reach on this machine'} |"
        )
    cpu_rows = [
        "| run | CPU seconds at N = 0 (fit) | CPU seconds per added host (slope) | 100 hosts (projected)"
        " | 1,000 hosts (projected) |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, counts in (("no-op", sizes), ("sampling change", changes)):
        if len(counts) < 2:
            continue
        at_zero, per_host = cpu_slope(samples, kind, counts)
        cpu_rows.append(
            f"| {kind} (N = {', '.join(map(str, counts))}) | {at_zero:.1f} | {per_host:.2f}"
            f" | {(at_zero + 100 * per_host) / 60:.0f} CPU min | {(at_zero + 1000 * per_host) / 3600:.1f} CPU h |"
        )
    return f"""# Benchmarks

Produced by `{command}` (script: `bench/bench.py`) on {time.strftime("%Y-%m-%d")}, {os.cpu_count()} cores,
{platform.system()} {platform.release()}, up to {max(sizes)} lab hosts (systemd-nspawn; the real sglang-router, the
lab stand-in for the GPU servers), {runs} runs, `forks = 8` (ansible.cfg). Wall times are medians; slopes are
least-squares fits of the medians against N; every ratio is of medians measured in this one run of the script.
Starts are the `Started sglang-dsv4-*` lines in the hosts' journals during the step.

- *floor*: a bare `ansible -m ping` plus `bench/floor.yml` (stat every managed file, check the units are
  active) on the same hosts: the least any check of the fleet costs.
- *no-op*: `ansible-playbook deploy.yml` with nothing to do: the plan (every argument spec and check, one
  read of each host) and the light proof (health, `/server_info`, the startup line of each server's current
  start); no host is locked or changed.
- *sampling change*: a new temperature through `deploy.yml`, all hosts in one batch
  (steps `[N]`, guard `N`): plan, lock, snapshot, write, drain, restart prefill and decode, back into
  rotation, full verification (health, `/server_info`, the startup line, four chat requests and one at
  temperature 0), result, unlock.
- *by hand*: the least a verified change can cost, every host in parallel over one ssh session each: write the
  managed defaults and generation_config.json, restart prefill and decode in one `systemctl restart`, wait for
  both servers' `/health` and the router's `/readiness`, one chat request with the client key.
- *article's way*: the source article's manual fix (per host, one after the other: ssh, overwrite
  generation_config.json with a heredoc, `systemctl restart` prefill and decode); it verifies nothing, and on these
  hosts the units' pre-start healer undoes it at the restart it triggers.

{chr(10).join(rows)}

## The no-op as the fleet grows

{chr(10).join(scale)}

{chr(10).join(slopes)}

The no-op's slope is {ratio:.2f}x the floor's (goal: at most 1.2x; it {verdict} it). The projections extend the
fitted lines with the same `forks = 8` on this 2-core controller: each added host adds the measured seconds,
because the controller's CPU, not the number of forks, is what the hosts wait for here (every task of every host is
a worker process on the controller). {lever}

## A verified change against its minimum

{chr(10).join(change_rows)}

Goal (issue 39): at most 2.5x the minimum at N = 1 and 2x at N = 4, with the same restarts.

What the goal asks of the machine: a run cannot take less wall time than its busy CPU seconds over the {cores}
cores (the whole machine's, from /proc/stat: the controller, and the lab hosts' sshd, modules and services, which
share these cores), so where that exceeds the goal's wall time, no fold of the rollout's own tasks reaches it here:
its CPU per host would have to fall first.

{chr(10).join(cpu_wall_rows)}

### CPU per added host

The whole machine's busy CPU seconds during each run (from /proc/stat, as `bench/cpu.py` reads them: the
controller, and the lab hosts' sshd, modules and services, which share this machine), medians, fitted against N.
On real hosts their part runs on each host's own CPU: what the controller pays is at most this.

{chr(10).join(cpu_rows)}

### Where a sampling change's time goes

From the same runs of the sampling change: each task's wall time (from its start to the next task's, as the
hosts of the batch waited for it), written by `bench/callback_plugins/bench_task_times.py` (bench only), summed by
play and, in the apply, by role; medians over the runs.

{breakdown(samples, changes)}
"""


def sizes_of(text: str) -> list[int]:
    values = sorted({int(word) for word in text.split(",") if word.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of host counts such as 1,2,4,8")
    return values


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=sizes_of, default=[1, 2, 4, 8], help="host counts of the no-op and floor")
    parser.add_argument("--change-sizes", type=sizes_of, default=[1, 4], help="host counts of the sampling change")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--load", action="store_true", help="also the rollout under load (4 hosts, drain on and off)")
    parser.add_argument(
        "--load-only", action="store_true", help="only the rollout under load; replaces that section of --output"
    )
    parser.add_argument(
        "--steps-only", action="store_true", help="only the steps under load (8 hosts); replaces that section"
    )
    args = parser.parse_args(argv)
    if len(args.sizes) < 2 and not args.load_only:
        parser.error(f"--sizes {','.join(map(str, args.sizes))}: the slopes need at least two host counts, such as 1,2")
    if args.steps_only:
        return steps_main(args, argv)
    hosts = max([*args.sizes, *args.change_sizes, 4 if args.load or args.load_only else 1])
    with tempfile.TemporaryDirectory() as tmp:
        inventory = own_inventory(tmp)
        lab(hosts, "absent", inventory)
        lab(hosts, "present", inventory)
        try:
            samples = {} if args.load_only else measure(args.sizes, args.change_sizes, args.runs, inventory)
            counted = None if args.load_only else guard.measure(100, args.runs)
            fleet = [] if args.load_only else guard.fleet([100, 1000], args.runs)
            loaded = under_load(4, inventory, [0.7, 0.65]) if args.load or args.load_only else []
        finally:
            lab(hosts, "absent", inventory)
    command = "make bench" if argv == [] else f".venv/bin/python bench/bench.py {' '.join(argv)}"
    old = args.output.read_text() if args.output.exists() else ""
    kept = (LOAD_HEADING + old.split(LOAD_HEADING, 1)[1]) if LOAD_HEADING in old else ""
    # Without its trailing blank lines: each regeneration would add one.
    kept = kept.split(STEPS_HEADING, 1)[0].rstrip("\n") + "\n" if kept else ""
    stepped = (STEPS_HEADING + old.split(STEPS_HEADING, 1)[1]) if STEPS_HEADING in old else ""
    loads = load_report(loaded, 4, command) if loaded else "\n" + kept if kept else ""
    tail = ("\n" + stepped) if stepped else ""
    if args.load_only:
        args.output.write_text(old.split(LOAD_HEADING, 1)[0].rstrip("\n") + "\n" + loads + tail)
    else:
        counts = "\n\n" + guard.report(counted) + "\n\n" + guard.fleet_report(fleet) + "\n"
        args.output.write_text(
            report(samples, args.sizes, args.change_sizes, args.runs, command) + counts + loads + tail
        )
    print(args.output.read_text())
    return 0


def steps_main(args: argparse.Namespace, argv: list[str]) -> int:
    """--steps-only: boot STEPS_HOSTS lab hosts, measure, and replace the steps section of --output."""
    with tempfile.TemporaryDirectory() as tmp:
        inventory = own_inventory(tmp)
        lab(STEPS_HOSTS, "absent", inventory)
        lab(STEPS_HOSTS, "present", inventory)
        try:
            results = steps_under_load(inventory, args.runs)
        finally:
            lab(STEPS_HOSTS, "absent", inventory)
    command = f".venv/bin/python bench/bench.py {' '.join(argv)}"
    old = args.output.read_text() if args.output.exists() else ""
    before = old.split(STEPS_HEADING, 1)[0].rstrip("\n")
    cpu = ("\n" + CPU_HEADING + old.split(CPU_HEADING, 1)[1]) if CPU_HEADING in old else ""
    args.output.write_text(before + "\n\n" + steps_report(results, args.runs, command).rstrip("\n") + "\n" + cpu)
    print(args.output.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
