"""Steps and the capacity guard (module_utils/sglang_steps.py): batch sizes as Ansible's serial takes them, bounded
by the hosts already out of rotation, counted on the whole inventory."""

from __future__ import annotations

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_steps as steps

HOSTS = [f"h{n}" for n in range(1, 9)]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([], "must be a non-empty list"),
        ("25%", "must be a non-empty list"),
        ([0], "sglang_rollout_steps[0]=0 must be at least 1 host"),
        ([1, "0%"], "sglang_rollout_steps[1]='0%' must be a whole number"),
        ([1, "150%"], "sglang_rollout_steps[1]='150%'"),
        ([True], "sglang_rollout_steps[0]=True must be a whole number of hosts or a percentage"),
        ([1, "ten"], "sglang_rollout_steps[1]='ten'"),
    ],
)
def test_bad_steps_are_named(value, fragment):
    errors = steps.step_errors(value, "10%")
    assert any(fragment in error for error in errors), errors


def test_good_steps_and_guards_pass():
    assert steps.step_errors([1, "10%", "25%", "100%"], "10%") == []
    assert steps.step_errors([1, "2"], 2) == []
    assert steps.step_errors([1], "0%") == [
        "sglang_rollout_max_unavailable='0%' must be a whole number of hosts (at"
        " least 1) or a percentage from '1%' to '100%'"
    ]


def test_a_percentage_step_rounds_up_and_the_guard_rounds_down_to_at_least_one():
    assert steps.amount("25%", 8) == 2 and steps.amount("10%", 8) == 1 and steps.amount("30%", 8) == 3
    assert steps.guard("25%", 8) == 2 and steps.guard("10%", 8) == 1 and steps.guard("30%", 8) == 2
    assert steps.guard(3, 8) == 3


def test_the_last_step_repeats_until_every_host_has_changed():
    plan = steps.schedule(HOSTS, [1, "25%", "50%"], allowed=8, unavailable=[])
    assert [b["hosts"] for b in plan] == [["h1"], ["h2", "h3"], ["h4", "h5", "h6", "h7"], ["h8"]]


def test_the_guard_shrinks_a_batch_by_the_hosts_already_out_of_rotation():
    # Guard 2 of 8; h7 (not in the run's first batches) is down already: one host may go at a time.
    plan = steps.schedule(HOSTS[:6], [1, "50%"], allowed=2, unavailable=["h7"])
    assert [b["hosts"] for b in plan] == [["h1"], ["h2"], ["h3"], ["h4"], ["h5"], ["h6"]]
    assert plan[1]["wanted"] == 3 and plan[1]["room"] == 1


def test_a_host_that_is_down_and_changes_costs_no_more_capacity():
    batch = steps.next_batch(["h1", "h2", "h3"], [3], 0, 3, allowed=1, unavailable=["h1"])
    assert batch["hosts"] == ["h1"]  # h1 is out already; the guard leaves no room for h2
    batch = steps.next_batch(["h1", "h2", "h3"], [3], 0, 3, allowed=2, unavailable=["h1"])
    assert batch["hosts"] == ["h1", "h2"]


def test_a_batch_the_guard_reduces_to_nothing_stops_the_schedule():
    plan = steps.schedule(HOSTS[:4], [2], allowed=2, unavailable=["h7", "h8"])
    assert plan == [{"hosts": [], "wanted": 2, "room": 0, "unavailable": ["h7", "h8"], "step": 1, "stopped": True}]


def test_an_estimate_takes_the_slowest_measured_restart_the_drain_and_the_analysis():
    settings = {
        "start_timeout": 1800,
        "notice": 10,
        "drain_bound": 30,
        "drain": True,
        "verification": 10,
        "analysis": True,
        "initial_delay": 60,
        "interval": 60,
        "count": 5,
    }
    assert steps.estimate(["a", "b"], {"a": 170.0, "b": 185.5}, settings) == 185.5 + 50 + 10 + 360
    assert steps.estimate(["c"], {}, {**settings, "analysis": False, "drain": False}) == 1800 + 10
