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


def test_a_host_on_its_first_deploy_goes_first_when_the_guard_has_no_room_for_the_serving_ones():
    # h4 was added to the fleet: not serving yet, so out of rotation, and the guard (1) is used up by it. It changes
    # in the first step (its change costs nothing and brings capacity back); then the serving hosts, one at a time.
    four = ["h1", "h2", "h3", "h4"]
    batch = steps.next_batch(four, [1], 0, 4, allowed=1, unavailable=["h4"], fresh=["h4"])
    assert batch["hosts"] == ["h4"] and batch["room"] == 0
    plan = steps.schedule(four, [1], allowed=1, unavailable=["h4"], fresh=["h4"])
    assert [b["hosts"] for b in plan] == [["h4"], ["h1"], ["h2"], ["h3"]]
    assert not any(b["stopped"] for b in plan)
    # With room, the step takes the first hosts in inventory order as always, and h4 comes when its turn does.
    plan = steps.schedule(four, [1, 2], allowed=3, unavailable=["h4"], fresh=["h4"])
    assert [b["hosts"] for b in plan] == [["h1"], ["h2", "h3"], ["h4"]]
    # A host that served at the plan and fell over since is not pulled forward: the guard stops the run instead.
    assert steps.next_batch(four, [1], 0, 4, allowed=1, unavailable=["h4"])["hosts"] == []
    # The plan and the step before it agree: h4 did not serve when the run planned.
    settings = {**SETTINGS, "steps": [1], "max_unavailable": 1}
    planned = steps.plan(four, ["h1", "h2", "h3"], four, {"h4": "not serving"}, settings, {})
    assert [s["hosts"] for s in planned["steps"]] == [["h4"], ["h1"], ["h2"], ["h3"]]
    now = steps.next_step(1, four, [], ["h1", "h2", "h3"], four, {"h4": "not serving"}, settings)
    assert now["hosts"] == ["h4"] and now["analysed"] == []


def test_a_batch_the_guard_reduces_to_nothing_stops_the_schedule():
    plan = steps.schedule(HOSTS[:4], [2], allowed=2, unavailable=["h7", "h8"])
    assert plan == [{"hosts": [], "wanted": 2, "room": 0, "unavailable": ["h7", "h8"], "step": 1, "stopped": True}]


SETTINGS = {
    "steps": [1, "25%", "50%"],
    "max_unavailable": "25%",
    "analysis": True,
    "pause_after": 0,
    "start_timeout": 1800,
    "notice": 10,
    "drain": True,
    "verification": 10,
    "initial_delay": 60,
    "interval": 60,
    "count": 5,
}


def test_an_estimate_takes_the_slowest_measured_restart_the_drain_and_the_analysis():
    assert steps.estimate(["a", "b"], {"a": 170.0, "b": 185.5}, SETTINGS, True) == 185.5 + 30 + 10 + 360
    # Never measured (a first start, a rotated journal): the start timeout bounds it.
    assert steps.estimate(["c"], {"c": None}, {**SETTINGS, "drain": False}, False) == 1800 + 10


def test_the_plan_sizes_each_step_after_the_guard_and_says_what_each_analysis_judges():
    restarts = dict.fromkeys(HOSTS, 180.0)
    plan = steps.plan(HOSTS, HOSTS, HOSTS, {}, SETTINGS, restarts)
    assert plan["guard"] == 2
    assert [s["hosts"] for s in plan["steps"]] == [["h1"], ["h2", "h3"], ["h4", "h5"], ["h6", "h7"], ["h8"]]
    assert plan["steps"][0]["stable"] == HOSTS[1:] and plan["steps"][0]["compare"]
    # The last step has no host left unchanged: judged without the latency comparison, and the plan says so.
    assert plan["steps"][-1]["stable"] == [] and not plan["steps"][-1]["compare"]
    assert "without latency comparison (no host left unchanged)" in plan["lines"][-2]
    assert "the step asks 4, the guard allows 2" in plan["lines"][3]
    assert plan["estimate"] == 5 * (180 + 30 + 10 + 360)
    assert plan["lines"][-1] == f"estimate: about {5 * 580} s in all (restarts measured from each host's journal)"


def test_the_plan_counts_hosts_out_of_rotation_outside_the_run_and_names_them():
    plan = steps.plan(HOSTS[:4], HOSTS[:4], HOSTS, {"h8": "cannot be reached: timeout"}, SETTINGS, {})
    assert "out of rotation now: h8 (cannot be reached: timeout)" in plan["lines"]
    # Guard 2 of 8, one out already: one host at a time.
    assert [s["hosts"] for s in plan["steps"]] == [["h1"], ["h2"], ["h3"], ["h4"]]
    full = steps.plan(HOSTS[:4], HOSTS[:4], HOSTS, {"h7": "x", "h8": "y"}, SETTINGS, {})
    assert full["steps"][0]["stopped"] and "NONE: the guard leaves no room" in full["lines"][-2]


def test_a_first_start_is_not_analysed_and_no_analysis_when_turned_off():
    plan = steps.plan(["h1", "h2"], ["h2"], HOSTS, {"h1": "not serving"}, SETTINGS, {})
    assert plan["steps"][0]["hosts"] == ["h1"] and plan["steps"][0]["analysed"] == []
    assert plan["steps"][1]["analysed"] == ["h2"]
    off = steps.plan(HOSTS, HOSTS, HOSTS, {}, {**SETTINGS, "analysis": False}, {})
    assert not off["analysis"] and "analysis: none (sglang_rollout_analysis=false)" in off["lines"][1]


def test_the_next_step_is_counted_again_from_live_health():
    # Planned 2 at step 2; h5 fell over during step 1: the guard (2) less one out leaves room for one.
    step = steps.next_step(2, HOSTS, ["h1"], HOSTS, HOSTS, {"h5": "its router's /readiness answered 503"}, SETTINGS)
    assert step["hosts"] == ["h2"] and step["wanted"] == 2 and step["stable"] == ["h3", "h4", "h5", "h6", "h7", "h8"]
    stopped = steps.next_step(2, HOSTS, ["h1"], HOSTS, HOSTS, {"h5": "a", "h6": "b"}, SETTINGS)
    assert stopped["hosts"] == []
    assert "the guard leaves no room: 2 of the inventory's 8 serving hosts are out of rotation" in stopped["line"]
    assert "h5: a; h6: b" in stopped["line"] and "7 host(s) not changed: h2, h3" in stopped["line"]


def test_the_unknown_is_never_counted_as_in_rotation():
    own = {"h1": {"available": True, "why": ""}, "h2": {"available": False, "why": "drained"}, "h3": {}}
    others = [
        {"item": "h4", "available": True},
        {"item": "h5", "unreachable": True, "msg": "ssh: connection refused"},
        {"item": "h6", "failed": True, "msg": "MODULE FAILURE"},
    ]
    out = steps.out_of_rotation(["h1", "h2", "h3", "h4", "h5", "h6", "h7"], own, ["h1", "h2"], others)
    assert out == {
        "h2": "drained",
        "h3": "failed in this run",
        "h5": "cannot be reached: ssh: connection refused",
        "h6": "MODULE FAILURE",
        "h7": "not asked",
    }


def test_a_last_step_smaller_than_it_asks_is_not_blamed_on_the_guard():
    plan = steps.plan(HOSTS[:4], HOSTS[:4], HOSTS[:4], {}, {**SETTINGS, "steps": [1, "50%"], "max_unavailable": 2}, {})
    assert [s["hosts"] for s in plan["steps"]] == [["h1"], ["h2", "h3"], ["h4"]]
    assert plan["lines"][3].startswith("step 3: h4 (1 of 4); analysis of h4 without latency comparison"), plan["lines"]
    held = steps.plan(HOSTS[:4], HOSTS[:4], HOSTS[:4], {}, {**SETTINGS, "steps": [1, "50%"], "max_unavailable": 1}, {})
    assert "step 2: h2 (1 of 4; the step asks 2, the guard allows 1)" in held["lines"][2], held["lines"]


@pytest.mark.parametrize("value", ["²", "٣", "1²", "³%"], ids=["superscript", "arabic-indic", "mixed", "percent"])
def test_a_step_of_digits_int_cannot_read_is_refused_by_name(value):
    errors = steps.step_errors([1, value], "10%")
    assert errors == [
        f"sglang_rollout_steps[1]={value!r} must be a whole number of hosts (at least 1) or a percentage from '1%'"
        " to '100%'"
    ]
    assert steps.step_errors([1], value)[0].startswith(f"sglang_rollout_max_unavailable={value!r} must be")


@pytest.mark.parametrize(
    ("guard", "inventory", "whole"),
    [
        ("100%", 8, True),
        ("100%", 1, True),
        ("100.0%", 8, True),
        (8, 8, True),
        ("9", 8, True),
        (7, 8, False),
        ("99%", 8, False),
        (1, 1, False),
        ("10%", 1, False),
    ],
)
def test_a_guard_that_lets_the_whole_fleet_out_is_refused_unless_allowed_by_name(guard, inventory, whole):
    errors = steps.step_errors(["100%"], guard, inventory)
    if whole:
        assert errors == [
            f"sglang_rollout_max_unavailable={guard!r} lets every one of the inventory's {inventory} serving host(s) out"
            " of rotation at once: no capacity guard at all. Set a smaller guard, or allow it by name with"
            " sglang_rollout_allow_whole_fleet=true"
        ]
    else:
        assert errors == []
    assert steps.step_errors(["100%"], guard, inventory, allow_whole_fleet=True) == []
    # Without the inventory's size (the filter's old form), no whole-fleet check is made.
    assert steps.step_errors(["100%"], guard) == []


def test_the_run_brings_its_own_drained_but_serving_hosts_back_first_and_the_plan_says_so():
    # Guard 1 of 8 (10%), h5 left drained by an earlier run with its services serving: before, no step had room.
    why = {"h5": f"{steps.DRAINED_SERVING}: its router's workers are kept in /run/sglang-dsv4/drain.json"}
    settings = {
        "steps": [1, "25%"],
        "max_unavailable": "10%",
        "analysis": False,
        "start_timeout": 30,
        "drain": False,
        "notice": 0,
        "initial_delay": 0,
        "interval": 0,
        "count": 0,
    }
    plan = steps.plan(HOSTS, HOSTS, HOSTS, why, settings, {})
    # Then one host at a time, as the guard allows.
    assert [s["hosts"] for s in plan["steps"]] == [["h5"], ["h1"], ["h2"], ["h3"], ["h4"], ["h6"], ["h7"], ["h8"]]
    assert any(line.startswith("brought back first: h5 (an earlier run's drain") for line in plan["lines"])
    step = steps.next_step(1, HOSTS, [], HOSTS, HOSTS, why, settings)
    assert step["hosts"] == ["h5"] and "brought back first (drained, serving; no capacity lost): h5" in step["line"]
    # A drained host whose services do not serve is down like any other: it waits its turn, and the guard holds.
    down = {"h5": "drained: its router's workers are kept in /run/sglang-dsv4/drain.json"}
    assert steps.next_step(1, HOSTS, [], HOSTS, HOSTS, down, settings)["hosts"] == []
    # With room, the returning host still goes first, beside the hosts the guard lets go.
    roomy = {**settings, "max_unavailable": 2}
    assert steps.next_step(1, HOSTS, [], HOSTS, HOSTS, why, {**roomy, "steps": [2]})["hosts"] == ["h5", "h1"]
