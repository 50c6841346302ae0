"""The rollout's fault matrix, shared by the scenarios failsafe (steps that fail) and interrupted (runs cut short).

A lab test helper: the lab fault injector (molecule/shared/fault_plugins/lab_fault.py) fails a task, kills the
controller at it, or pauses it; these helpers make a change of every kind of input, run deploy.yml with a fault,
and check that the next plain run converges the host. Each test leaves the host converged for the next (the
inventory's state is restored at the end of the module).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import pytest
from labtools import FAULTS, deploy, host_state, pids, recap, runs_from_disk, text

LOCK = "/run/sglang-dsv4-deploy"
# The workers a drain took out of the router, until they are back (the host is out of rotation while it exists).
DRAIN = "/run/sglang-dsv4/drain.json"
MODEL = "/srv/models/DeepSeek-V4-Flash"
GENCONFIG = f"{MODEL}/generation_config.json"
LAB_ENV = {"SGLANG_LAB_STARTUP_SECONDS": "1", "SGLANG_LAB_DRAIN_POLL_SECONDS": "1", "SGLANG_LAB_FAIL_START": "0"}
OPEN = "Take the lock, snapshot what this run may change and read the host again, in one call"
# The restart's one call (module sglang_host_restart: decide, drain, restart, undrain), and the points inside it.
RESTART = (
    "Drain, restart what does not run from its inputs (prefill and decode together, the router on its own), put back"
)
# Right before its drain (the rollback's call is paused there), and right after it (a kill there leaves the host
# drained, nothing restarted).
BEFORE_DRAIN = f"{RESTART}>before_drain"
AFTER_DRAIN = f"{RESTART}>after_drain"
# Restarted from the new files, still drained: a kill there leaves the host's guard to put it back.
BEFORE_UNDRAIN = f"{RESTART}>before_undrain"

# The sampling defaults' one call (module sglang_generation_config: generation_config.json, then the managed defaults
# and the helper set), and the point between its writes.
GENCONFIG_WRITE = (
    "Merge the sampling defaults into generation_config.json, and install the managed defaults and the helper set"
)

# The verification's one call (module sglang_ask): ready, read, ask, judge, and the apply's close when nothing follows.
VERIFY = "Ask the router, and read both servers when the verification asks"

# Each step of the apply, as the task that starts right after it (or is it, for the restart and the verification).
STEPS = [
    # Points inside the apply's first call (module sglang_rollout_open: lock, snapshot, read under the lock).
    ("after the lock", f"{OPEN}>after_lock"),
    ("after the snapshot", f"{OPEN}>after_snapshot"),
    ("after the generation_config.json write", f"{GENCONFIG_WRITE}>after_generation_config"),
    ("after the env files' write", "Stage the units and the target"),
    ("after the units' write", "Restart what the host's state says does not run from its inputs"),
    # Points inside the restart's one call (module sglang_host_restart: decide, drain, restart, undrain).
    ("after the drain", AFTER_DRAIN),
    ("at the restart request", f"{RESTART}>at_restart"),
    ("before the undrain", BEFORE_UNDRAIN),
    ("during the verification", VERIFY),
    # Inside the verification's call: proven, not yet closed (its result and the release of the lock).
    ("before the close", f"{VERIFY}>before_close"),
]


def change(case: int) -> dict:
    """A change of every kind of input (generation_config.json, env files, units), different for each case."""
    return {
        "sglang_genconfig_temperature": (0.7, 0.65)[case % 2],
        "sglang_services_environment": {**LAB_ENV, "DSV4_CASE": str(case)},
        "sglang_services_timeout_start_sec": 121 + case % 2,
    }


def run(settings: dict | None = None, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    extra = ["-e", json.dumps(settings)] if settings else []
    return deploy(*extra, *args, env={**FAULTS, "DSV4_LAB_FAULT": fault} if fault else None)


def temperatures(state: dict) -> dict:
    return {u: (state["units"][u]["logged"] or {}).get("temperature") for u in ("prefill", "decode")}


def name(host) -> str:
    """The inventory name of testinfra's host (each scenario has its own)."""
    return host.backend.host


def settled(host, seconds: float = 300) -> None:
    """Waits until nothing the killed controller had sent still runs on the host: a module already sent keeps
    running after the controller dies (its ssh master outlives it), and Ansible runs each as `... && sleep 0`."""
    deadline = time.monotonic() + seconds
    while host.run("pgrep -f '[&]& sleep 0$'").rc == 0:
        assert time.monotonic() < deadline, "a module the killed run had sent still runs on the host"
        time.sleep(0.5)


def break_args(host) -> list[str]:
    owner = host.run(f"cat {LOCK}/owner.json")
    run_id = json.loads(owner.stdout)["run_id"] if owner.rc == 0 and owner.stdout.startswith("{") else "true"
    return ["--limit", name(host), "-e", f"sglang_rollout_break_lock={run_id}"]


def converges(host, settings: dict, *args: str) -> dict:
    """The next plain run converges the host, and the run after it changes and restarts nothing."""
    out = run(settings, *args)
    assert out.returncode == 0, text(out)[-4000:]
    state = host_state(host)
    assert runs_from_disk(state) == []
    assert set(temperatures(state).values()) == {settings["sglang_genconfig_temperature"]}, temperatures(state)
    assert not state["lock"]
    again = run(settings)
    assert again.returncode == 0, text(again)[-3000:]
    assert "apply to 0 of 1 host(s): none" in again.stdout and "changed=0" in recap(again.stdout)
    assert pids(host_state(host)) == pids(state)
    return state


@pytest.fixture(scope="module", autouse=True)
def back_to_the_inventory(host):
    yield
    out = deploy(*(break_args(host) if host.file(LOCK).exists else []))
    assert out.returncode == 0, text(out)[-3000:]


@pytest.fixture
def at_inventory(host):
    """The host as the inventory says, so that the only pending change is the one the test makes."""
    out = deploy(*(break_args(host) if host.file(LOCK).exists else []))
    assert out.returncode == 0, text(out)[-3000:]
    assert runs_from_disk(host_state(host)) == []


@pytest.fixture(scope="module")
def cases():
    """Numbers each case, so that every case's change differs from the state the previous one left."""
    counter = iter(range(1, 1000))
    return lambda: next(counter)


def in_rotation(host, router: str) -> bool:
    """The router answers /readiness 200 (it has its workers) and no drain is pending on the host."""
    probe = (
        "import sys, urllib.request\n"
        "try:\n    print(urllib.request.urlopen(sys.argv[1] + '/readiness', timeout=5).status)\n"
        "except Exception:\n    print(0)\n"
    )
    status = host.check_output(f"python3 -c {shlex.quote(probe)} {router}")
    return status.strip() == "200" and not host.file(DRAIN).exists


def guard_said(host) -> str:
    """What the host's guard said last (its transient service's journal)."""
    return host.run("journalctl -u sglang-dsv4-undrain-guard --no-pager -o cat | tail -n 3").stdout


def host_clock(host) -> int:
    """The host's clock, in whole seconds, rounded up: a guard's look logged after it is a look that began after."""
    return int(float(host.check_output("date +%s.%N"))) + 1


def guard_looked(host, since: int, seconds: float = 150) -> str:
    """What the host's guard said at its first look since `since` (host_clock()): waited for, never assumed to have
    happened within a sleep (it looks every 30 s from the drain, later on a loaded machine). Only the guard's own
    words (its service's output), not systemd's lines about the unit."""
    deadline = time.monotonic() + seconds
    while True:
        said = host.run(
            f"journalctl _SYSTEMD_UNIT=sglang-dsv4-undrain-guard.service --since @{since} --no-pager -o cat"
        ).stdout.strip()
        if said:
            return said.splitlines()[0]
        assert time.monotonic() < deadline, f"the host's guard did not look within {seconds} s: {guard_said(host)}"
        time.sleep(1)
