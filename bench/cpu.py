"""The CPU a sampling change costs, by how Ansible reaches the hosts: without pipelining and without the preload
(molecule's own ansible.cfg, before .config/molecule/config.yml set them), pipelining only, the preload without its
heap freeze (DSV4_SGLANG_PRELOAD_FREEZE_HEAP=0), and the repository's ansible.cfg (pipelining and the
dsv4.sglang.sglang_preload callback).

Runs against the lab inventory's first host (boot it with `make deploy`), alternating the settings run by run, each
run a sampling change (a new temperature, then back to the inventory's). CPU is the whole machine's, from
/proc/stat: the controller, the lab host's sshd, modules and services alike. Prints medians and ratios to the
first setting, and with --write puts them in BENCHMARKS.md as its last section (bench.py keeps it).

    .venv/bin/python bench/cpu.py [--runs 3] [--write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## A run's CPU: ssh pipelining and the preload"
BIN = Path(sys.executable).parent
# The runs without the preload read the repository's ansible.cfg without its callbacks_enabled line (NO_PRELOAD).
NO_PRELOAD = "ansible.cfg without callbacks_enabled"
SETTINGS = {
    "no pipelining, no preload (molecule's own ansible.cfg before 2026-12-03)": {
        "ANSIBLE_PIPELINING": "0",
        "ANSIBLE_CONFIG": NO_PRELOAD,
    },
    "pipelining": {"ANSIBLE_PIPELINING": "1", "ANSIBLE_CONFIG": NO_PRELOAD},
    "pipelining and the preload, its heap freeze off": {"DSV4_SGLANG_PRELOAD_FREEZE_HEAP": "0"},
    "pipelining and the preload (the repository's ansible.cfg)": {},
}


def busy_seconds() -> float:
    """CPU seconds the machine spent busy so far (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def deploy(temperature: float, env: dict) -> tuple[float, float]:
    argv = [str(BIN / "ansible-playbook"), "deploy.yml", "-e", f'{{"sglang_genconfig_temperature": {temperature}}}']
    cpu, wall = busy_seconds(), time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, check=False)
    cpu, wall = busy_seconds() - cpu, time.monotonic() - wall
    if done.returncode != 0 or "changed=0 " in done.stdout.split("PLAY RECAP")[-1]:
        sys.exit(f"the sampling change did not apply ({done.returncode}):\n{done.stdout[-3000:]}")
    return cpu, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="replace the last section of BENCHMARKS.md")
    args = parser.parse_args()
    config = (ROOT / "ansible.cfg").read_text()
    lines = [line for line in config.splitlines() if not line.startswith("callbacks_enabled")]
    # Relative paths in an ansible.cfg are read from its own folder: make them absolute.
    no_preload = Path(tempfile.mkdtemp(prefix="dsv4-bench-cpu-")) / "ansible.cfg"
    no_preload.write_text(
        "\n".join(lines)
        .replace("= inventories/", f"= {ROOT}/inventories/")
        .replace("roles_path = roles", f"roles_path = {ROOT}/roles")
        .replace("collections_path = .collections", f"collections_path = {ROOT}/.collections")
        .replace("lab@inventories/", f"lab@{ROOT}/inventories/")
        + "\n"
    )
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
    step = 0
    for _run in range(args.runs):
        for name, env in SETTINGS.items():
            step += 1
            env = {k: str(no_preload) if v == NO_PRELOAD else v for k, v in env.items()}
            results[name].append(deploy(0.5 + step / 100, env))
    # Back to the inventory's temperature.
    subprocess.run([str(BIN / "ansible-playbook"), "deploy.yml"], cwd=ROOT, capture_output=True, check=False)
    first = None
    lines = [
        HEADING,
        "",
        f"`.venv/bin/python bench/cpu.py --runs {args.runs}` ({time.strftime('%Y-%m-%d %H:%M')}, the lab inventory's",
        "first host): a sampling change (prefill and decode restarted) through deploy.yml, alternating the settings",
        "run by run; CPU is the whole machine's from /proc/stat (the controller, the lab host's sshd, modules and",
        f"services). Medians of {args.runs}.",
        "",
        "| settings | CPU seconds | ratio | wall seconds | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        cpu, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        first = first or (cpu, wall)
        lines.append(f"| {name} | {cpu:.1f} | {cpu / first[0]:.2f} | {wall:.1f} | {wall / first[1]:.2f} |")
    print("\n".join(lines))
    if args.write:
        path = ROOT / "BENCHMARKS.md"
        old = path.read_text()
        before = old.split(HEADING, 1)[0].rstrip("\n") if HEADING in old else old.rstrip("\n")
        path.write_text(before + "\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
