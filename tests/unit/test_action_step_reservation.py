"""The step's count, choice and reservation in one task (action plugin sglang_step_reservation): the loop that makes
two runs on different --limits together stay within the capacity guard, on the real reservations file and the real
choice of the steps (module_utils/sglang_steps.py), with the count faked."""

from __future__ import annotations

import os

import pytest
from ansible_collections.dsv4.sglang.plugins.action import sglang_step_reservation as action
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_reservation as res
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_steps as steps

HOSTS = ["h1", "h2", "h3", "h4"]
SETTINGS = {
    "steps": [1],
    "max_unavailable": 1,
    "analysis": False,
    "pause_after": 0,
    "start_timeout": 30,
    "drain": False,
    "notice": 0,
    "verification": 10,
    "initial_delay": 0,
    "interval": 0,
    "count": 0,
}


class Clock:
    def __init__(self, on_sleep=None) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(self)


def run(path, run_id, changing, counts, clock, wait=60.0, check=False, reserve_hook=None):
    """One step's choice of a run over `changing`, on the real file; `counts` yields each count in turn."""
    counts = iter(counts)

    def reserve(hosts, version):
        if reserve_hook:
            reserve_hook()
        return res.reserve(path, run_id, "ops@ctl", 1, hosts, version, 600, now=1000 + clock.now)

    return action.choose_and_reserve(
        run_id,
        lambda: next(counts),
        lambda: res.read(path, now=1000 + clock.now),
        reserve,
        lambda unavailable: steps.next_step(1, changing, [], HOSTS, HOSTS, unavailable, SETTINGS),
        wait,
        5.0,
        check=check,
        sleep=clock.sleep,
        clock=clock,
    )


@pytest.fixture
def path(tmp_path):
    os.chmod(tmp_path, 0o700)
    return str(tmp_path / "reservations.json")


def test_a_step_with_room_reserves_its_hosts_at_once(path):
    clock = Clock()
    found = run(path, "run-a", ["h1", "h2"], [{}], clock)
    assert found["reserved"] and found["step"]["hosts"] == ["h1"] and found["tries"] == 1 and clock.slept == []
    assert [(e["run"], e["hosts"]) for e in res.read(path, now=1000.0)["entries"]] == [("run-a", ["h1"])]


def test_a_second_run_counts_the_first_runs_chosen_host_as_out_and_waits_for_it(path):
    def first_step_done(clock):
        if len(clock.slept) == 2:  # run-a's h1 back in rotation: its place given back
            res.release(path, "run-a", ["h1"], now=1000 + clock.now)

    clock = Clock(first_step_done)
    run(path, "run-a", ["h1", "h2"], [{}], clock)
    # run-b's count sees every host in rotation (run-a has not drained h1 yet): the reservation says h1 is out. It
    # looks at the reservations every 5 s and counts again only once they changed (h1 given back, in rotation again).
    counts = [{}, {}]
    found = run(path, "run-b", ["h3", "h4"], counts, clock)
    # It waited (it never chose while h1 was run-a's), then took h3 once h1 was given back.
    assert clock.slept == [5.0, 5.0] and found["tries"] == 2 and found["reserved"] and found["step"]["hosts"] == ["h3"]
    assert "waited" in found["step"]["line"] and "runs run-a" in found["step"]["line"]
    assert [(e["run"], e["hosts"]) for e in res.read(path, now=1000.0)["entries"]] == [("run-b", ["h3"])]


def test_a_step_waits_at_most_its_wait_and_then_stops_naming_the_other_run(path):
    clock = Clock()
    run(path, "run-a", ["h1", "h2"], [{}], clock)
    found = run(path, "run-b", ["h3", "h4"], [{}], clock, wait=20.0)
    assert not found["reserved"] and found["step"]["hosts"] == []
    assert sum(clock.slept) == 20.0
    line = found["step"]["line"]
    assert "the guard leaves no room" in line and "reserved by run run-a (ops@ctl) for its step 1" in line
    assert "sglang_rollout_reservation_wait=20" in line
    assert [e["run"] for e in res.read(path, now=1000.0)["entries"]] == ["run-a"]


def test_no_room_for_another_reason_stops_at_once(path):
    clock = Clock()
    run(path, "run-a", ["h1", "h2"], [{}], clock)
    # h4 is down for no run's sake: even without run-a's host there is no room (at most 1 out).
    found = run(path, "run-b", ["h3"], [{"h4": "its router's /readiness answered 503"}], clock)
    assert not found["reserved"] and found["step"]["hosts"] == [] and clock.slept == []


def test_another_run_that_reserves_between_the_read_and_the_write_makes_it_choose_again(path):
    clock = Clock()
    raced = []

    def other_run_first():
        if not raced:
            raced.append(res.reserve(path, "run-a", "x", 1, ["h1"], 0, 600, now=1000.0)["reserved"])

    found = run(path, "run-b", ["h3", "h4"], [{}] * 100, clock, reserve_hook=other_run_first)
    # run-b read version 0, run-a wrote version 1 in between: run-b never wrote on its stale view, read again,
    # and found no room (run-a holds the one place) until it gave it back; here it waits out its wait.
    assert raced == [True] and found["tries"] >= 2 and not found["reserved"]
    assert [e["run"] for e in res.read(path, now=1000.0)["entries"]] == ["run-a"]


def test_check_mode_chooses_and_reserves_nothing(path):
    found = run(path, "run-a", ["h1", "h2"], [{}], Clock(), check=True)
    assert found["step"]["hosts"] == ["h1"] and not found["reserved"]
    assert res.read(path, now=1000.0)["entries"] == []


def test_a_host_both_counted_out_and_reserved_says_both():
    merged = action.merged(
        {"h1": "drained", "h2": "not serving"}, {"h1": "reserved by run a", "h3": "reserved by run b"}
    )
    assert merged == {"h1": "drained; reserved by run a", "h2": "not serving", "h3": "reserved by run b"}


def test_a_run_whose_lock_was_broken_by_id_holds_nothing(path):
    clock = Clock()
    run(path, "run-dead", ["h1", "h2"], [{}], clock)
    counts = iter([{}])
    found = action.choose_and_reserve(
        "run-b",
        lambda: next(counts),
        lambda: res.read(path, now=1000.0),
        lambda hosts, version: res.reserve(path, "run-b", "", 1, hosts, version, 600, 1000.0, ["run-dead"]),
        lambda unavailable: steps.next_step(1, ["h3"], [], HOSTS, HOSTS, unavailable, SETTINGS),
        60.0,
        5.0,
        sleep=clock.sleep,
        clock=clock,
        dead_runs=["run-dead"],
    )
    assert found["reserved"] and found["step"]["hosts"] == ["h3"] and clock.slept == []
    # The dead run's entry went in the same write.
    assert [e["run"] for e in res.read(path, now=1000.0)["entries"]] == ["run-b"]


def test_reservations_that_cannot_be_read_stop_the_step_and_still_say_the_guards_count():
    def unreadable():
        raise OSError("dsv4-traf-1: UNREACHABLE")

    with pytest.raises(action.StepReservationError, match="UNREACHABLE") as error:
        action.choose_and_reserve(
            "run-b",
            lambda: {"h2": "cannot be reached: ssh"},
            unreadable,
            lambda hosts, version: pytest.fail("never reserves"),
            lambda unavailable: steps.next_step(1, ["h3"], [], HOSTS, HOSTS, unavailable, SETTINGS),
            60.0,
            5.0,
        )
    assert "the guard leaves no room" in error.value.line and "h2: cannot be reached: ssh" in error.value.line
