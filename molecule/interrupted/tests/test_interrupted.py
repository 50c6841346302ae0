"""Runs cut short, judged on the host: the controller killed at each step of the apply and of its rollback, a live
lease broken by another run, a lock nobody can read.

The lab fault injector (molecule/shared/fault_plugins/lab_fault.py, a lab tool) kills the controller at a step, or
pauses it. Invariants, read on the host (files byte for byte, start records of the current invocations, their
journals, MainPIDs), never from Ansible's output: a run that does not hold the lease changes nothing, and the next
plain run converges the host (every service runs from the files on disk), the run after it changed=0 and restarting
nothing. The shared helpers are in molecule/shared/faultcases.py.
"""

from __future__ import annotations

import json
import time

import pytest
from faultcases import (
    AFTER_DRAIN,
    BEFORE_UNDRAIN,
    DRAIN,
    GENCONFIG_WRITE,
    LOCK,
    RESTART,
    STEPS,
    break_args,
    change,
    converges,
    guard_looked,
    guard_said,
    host_clock,
    in_rotation,
    pids,
    run,
    settled,
    temperatures,
)
from labtools import Hold, finish, runs_from_disk, start

from conftest import host_state, text

HOST = "dsv4-int-1"
ROUTER = "http://127.0.0.1:27010"


# A kill between the restart call's drain and its undrain has cases of its own below (the host's guard puts it back
# once the lease ends; the next run converges it): not twice.
KILLED = [s for s in STEPS if s[1] not in (AFTER_DRAIN, BEFORE_UNDRAIN)]


@pytest.mark.parametrize(("step", "task"), KILLED, ids=[s[0] for s in KILLED])
def test_a_run_killed_at_a_step_is_repaired_by_the_next_run(host, cases, step, task):
    case = cases()
    out = run(change(case), fault=f"kill:{task}")
    assert out.returncode != 0 and "PLAY RECAP" not in out.stdout, step
    settled(host)
    left = host_state(host)
    assert left["lock"], "a run killed after taking the lock leaves it"
    # A run that does not hold the lease changes nothing.
    blocked = run(change(case + 500))
    assert blocked.returncode != 0 and "Nothing was changed" in text(blocked)
    assert host_state(host)["files"] == left["files"]
    converges(host, change(case), *break_args(host))


@pytest.mark.parametrize(
    "task",
    ["Put this run's snapshot back (checked byte for byte)", f"{RESTART}#2"],
    ids=["before", "after the restore"],
)
def test_a_run_killed_during_its_rollback_is_repaired_by_the_next_run(host, cases, task):
    case = cases()
    wrong = {**change(case), "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95}}
    out = run(wrong, fault=f"kill:{task}")
    assert out.returncode != 0 and "PLAY RECAP" not in out.stdout
    settled(host)
    assert host_state(host)["lock"]
    converges(host, change(case), *break_args(host))


@pytest.mark.parametrize(
    "plant",
    [
        f"mkfifo {LOCK}",
        f"mkdir -m 0700 {LOCK} && mkfifo {LOCK}/owner.json",
        f"mkdir -m 0700 {LOCK} && echo '{{\"run_id\": 7}}' > {LOCK}/owner.json",
    ],
    ids=["fifo", "fifo-owner", "non-number"],
)
def test_an_unreadable_lock_is_reported_in_bounded_time_and_cleared_only_by_a_limited_break(host, cases, plant):
    case = cases()
    host.run_test(plant)
    started = time.monotonic()
    blocked = run(change(case))
    assert time.monotonic() - started < 120, "reading the lock must never hang the plan"
    assert blocked.returncode != 0
    assert (
        "unreadable lock" in text(blocked)
        and "holder unknown" in text(blocked)
        and "Nothing was changed" in text(blocked)
    )
    converges(host, change(case), "--limit", HOST, "-e", "sglang_rollout_break_lock=true")


def test_a_run_whose_live_lease_was_broken_stops_and_touches_nothing_more(host, cases, tmp_path):
    evicted_case, case = cases(), cases()
    # Held at the start of the sampling defaults' call (its module checks the lock before writing), after its open
    # took the lock, until the other run has broken its lease and finished (plan, apply, and a no-op run).
    hold = Hold(tmp_path, GENCONFIG_WRITE)
    evicted = start("deploy.yml", "-e", json.dumps(change(evicted_case)), env=hold.env)
    try:
        hold.reached(evicted)
        run_id = json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"]
        plain = run(change(case), "--limit", HOST, "-e", "sglang_rollout_break_lock=true")
        assert plain.returncode != 0 and "a live lease is broken only by naming its run" in text(plain)
        state = converges(host, change(case), "--limit", HOST, "-e", f"sglang_rollout_break_lock={run_id}")
    finally:
        hold.release()
        output = text(finish(evicted, timeout=300))
    assert evicted.returncode != 0
    assert f"this run lost the lock of {HOST} to another run and touched nothing more there" in output, output[-3000:]
    after = host_state(host)
    assert after["files"] == state["files"] and pids(after) == pids(state)
    assert temperatures(after) == {"prefill": change(case)["sglang_genconfig_temperature"]} | {
        "decode": change(case)["sglang_genconfig_temperature"]
    }
    assert not after["lock"]


def end_lease_and_wait_for_the_guard(host, seconds: int) -> None:
    """End the killed run's lease (as time would), then wait until the host's guard has put the workers back (it looks
    every 30 s): within `seconds`, with its message."""
    host.run_test(
        f"python3 -c \"import json; p='{LOCK}/owner.json'; o=json.load(open(p)); o['lease_until']=0;"
        " json.dump(o, open(p, 'w'))\""
    )
    deadline = time.monotonic() + seconds
    while not in_rotation(host, ROUTER):
        assert time.monotonic() < deadline, f"the guard did not put the host back: {guard_said(host)}"
        time.sleep(2)
    assert "worker(s) back in rotation" in guard_said(host)


def test_a_controller_killed_right_after_the_drain_costs_capacity_no_longer_than_the_lease(host, cases):
    """SIGKILL right after the drain: the host is out of rotation, nothing restarted. While the killed run's lease
    lives the host's guard leaves it alone; once the lease has ended (set here to its end, as time would) the guard
    puts the workers back on its own: the services that served before the run serve again, with no run at all."""
    case = cases()
    before = host_state(host)
    assert in_rotation(host, ROUTER)
    out = run(change(case), fault=f"kill:{AFTER_DRAIN}")
    assert out.returncode != 0 and "PLAY RECAP" not in out.stdout
    settled(host)
    assert host.file(DRAIN).exists and not in_rotation(host, ROUTER)
    assert "sglang-dsv4-undrain-guard.timer" in host.check_output("systemctl list-timers --all --no-legend")
    assert pids(host_state(host)) == pids(before)
    # The killed run's lease is live: the guard's next look (every 30 s) leaves the host to it.
    said = guard_looked(host, host_clock(host))
    assert "a rollout holds the host" in said, said
    assert host.file(DRAIN).exists, guard_said(host)
    end_lease_and_wait_for_the_guard(host, 120)
    assert pids(host_state(host)) == pids(before)
    assert "sglang-dsv4-undrain-guard" not in host.check_output("systemctl list-timers --all --no-legend")
    converges(host, change(case), *break_args(host))


def test_a_controller_killed_between_the_drain_and_the_undrain_ends_in_rotation_by_the_hosts_guard(host, cases):
    """SIGKILL while the restart's one call is between its drain and its undrain (the call ends there too): the host
    runs the new settings, drained. Once the killed run's lease ends (set here to its end, as time would) the host's
    guard puts the workers back on its own, within its next looks: in rotation, serving from the files on disk, with
    the guard's message, and no run at all."""
    case = cases()
    before = host_state(host)
    assert in_rotation(host, ROUTER)
    out = run(change(case), fault=f"kill:{BEFORE_UNDRAIN}")
    assert out.returncode != 0 and "PLAY RECAP" not in out.stdout
    settled(host)
    left = host_state(host)
    assert host.file(DRAIN).exists and not in_rotation(host, ROUTER)
    assert "sglang-dsv4-undrain-guard.timer" in host.check_output("systemctl list-timers --all --no-legend")
    # Restarted from the new files before the kill (the change's environment feeds the router too): every service
    # anew, each from the files on disk.
    assert left["lock"] and runs_from_disk(left) == []
    assert set(temperatures(left).values()) == {change(case)["sglang_genconfig_temperature"]}
    assert all(pids(left)[unit] != pids(before)[unit] for unit in ("prefill", "decode", "router"))
    end_lease_and_wait_for_the_guard(host, 90)
    after = host_state(host)
    assert runs_from_disk(after) == [] and pids(after) == pids(left)
    assert "sglang-dsv4-undrain-guard" not in host.check_output("systemctl list-timers --all --no-legend")
    converges(host, change(case), *break_args(host))
