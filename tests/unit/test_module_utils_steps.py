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
# Settings whose estimates wait for nothing: no analysis, no drain, no start time to speak of.
NO_WAITS = {
    "analysis": False,
    "start_timeout": 30,
    "drain": False,
    "notice": 0,
    "initial_delay": 0,
    "interval": 0,
    "count": 0,
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
    answers = {
        "h1": {"available": True, "why": ""},
        "h2": {"available": False, "why": "drained"},
        "h4": {"available": True},
        "h5": {"available": False, "why": "cannot be reached: ssh: connection refused"},
        "h6": {"available": False},
        "h8": {"available": "yes"},
    }
    out = steps.out_of_rotation(
        ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"], answers, ["h1", "h2", "h3"], ["h1", "h2"]
    )
    assert out == {
        "h2": "drained",
        "h3": "failed in this run",
        "h5": "cannot be reached: ssh: connection refused",
        "h6": "did not say",
        "h7": "not asked",
        "h8": "did not say",
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
            f"sglang_rollout_max_unavailable={guard!r} lets every one of the inventory's {inventory} serving host(s)"
            " out of rotation at once: no capacity guard at all. Set a smaller guard, or allow it by name with"
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
    settings = {**NO_WAITS, "steps": [1, "25%"], "max_unavailable": "10%"}
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


# --- The step's report (playbooks/tasks/step.yml's "Stop, pause or go on") ---
APPLY = ["h1", "h2", "h3", "h4"]
STEP_FENCE = {"path": "/var/lib/sglang-dsv4/rollout.lock", "run_id": "R1", "lease": 900}
STEP_SETTINGS = {"max_fail_percentage": 0, "pause_after": 0}


def report(step_hosts, alive, done, verdicts, settings=None, failures=(), number=2):
    settings = STEP_SETTINGS if settings is None else settings
    locks = dict.fromkeys([h for h in APPLY if verdicts.get(h) or h in step_hosts], STEP_FENCE)
    return steps.step_report(number, step_hosts, APPLY, alive, done, verdicts, locks, settings, failures, "R1")


def test_a_host_lost_mid_step_fails_the_step_and_is_never_called_rolled_back():
    """h3 was unreachable after its drain: no rescue ran for it, so it has no outcome. The step stops, h3's line
    says what is known and how to end it, and the counts keep it apart from the rolled-back h2."""
    out = report(["h2", "h3"], ["h1", "h2", "h4"], ["h1", "h2", "h3"], {"h1": "changed", "h2": "rolled back"})
    assert out["stop"] and out["end"] and out["lost"] == ["h3"] and out["failed"] == ["h2", "h3"]
    lost = out["lines"][0]
    assert lost.startswith("h3: LOST in step 2 (unreachable, or it never reached its step's end): NOT rolled back")
    assert "possibly OUT OF ROTATION (drained) until its lease on /var/lib/sglang-dsv4/rollout.lock ends" in lost
    assert "at most 900 s after its last renewal" in lost and "the lock stays held by run R1" in lost
    assert lost.endswith("ansible-playbook deploy.yml --limit h3 -e sglang_rollout_break_lock=R1")
    assert "step 2: rolled back to their state before this run (see above): h2" in out["lines"]
    assert "step 2 failed on h2, h3: the rollout stops; 1 host(s) not changed: h4" in out["lines"]
    assert out["lines"][-1] == (
        "rollout: 1 changed, 1 rolled back, 0 failed and NOT rolled back, 1 lost, 1 untouched, of 4;"
        " rolled back: h2; lost: h3; untouched: h4"
    )
    assert not any("h3" in line and "rolled back:" in line for line in out["lines"][1:-1])


def test_a_lost_host_stops_the_run_whatever_max_fail_percentage_allows():
    out = report(
        ["h2", "h3"],
        ["h1", "h2", "h4"],
        ["h1", "h2", "h3"],
        {"h1": "changed", "h2": "changed"},
        {"max_fail_percentage": 100, "pause_after": 0},
    )
    assert out["stop"] and out["lost"] == ["h3"]


def test_a_host_lost_before_its_lock_changed_nothing_and_may_hold_the_lock():
    out = steps.step_report(1, ["h1"], APPLY, ["h2", "h3", "h4"], ["h1"], {}, {}, STEP_SETTINGS, (), "R9")
    assert out["lines"][0] == (
        "h1: LOST in step 1 while or before it took the lock (unreachable): NOT changed by this run; it may hold"
        " this run's lock (run R9) until its lease ends. Once it can be reached: ansible-playbook deploy.yml"
        " --limit h1 -e sglang_rollout_break_lock=R9"
    )


def test_a_host_that_dropped_out_before_its_step_is_not_changed_never_rolled_back():
    """h4 became unreachable while it waited: the last step ends the run, and h4 is untouched, not rolled back."""
    out = report(["h3"], ["h1", "h2", "h3"], ["h1", "h2", "h3"], dict.fromkeys(["h1", "h2", "h3"], "changed"), number=3)
    assert not out["stop"] and out["end"] and out["dropped"] == ["h4"] and out["left"] == []
    assert "h4: dropped out of the run before its step (unreachable): NOT changed by this run" in out["lines"]
    assert out["lines"][-1] == (
        "rollout: 3 changed, 0 rolled back, 0 failed and NOT rolled back, 0 lost, 1 untouched, of 4; untouched: h4"
    )


def test_a_run_that_rolled_hosts_back_never_ends_with_every_host_changed():
    """With sglang_rollout_max_fail_percentage=50 a step of two goes on past one rolled-back host; the last step's
    line counts it, and never says every host changed."""
    loose = {"max_fail_percentage": 50, "pause_after": 0}
    verdicts = {"h1": "changed", "h2": "rolled back", "h3": "changed", "h4": "changed"}
    middle = report(["h2", "h3"], ["h1", "h3", "h4"], ["h1", "h2", "h3"], verdicts, loose)
    assert not middle["stop"] and not middle["end"] and middle["left"] == ["h4"]
    last = report(["h4"], ["h1", "h3", "h4"], APPLY, verdicts, loose, number=3)
    assert last["end"] and not last["stop"]
    assert last["lines"][-1].startswith("rollout: 3 changed, 1 rolled back, 0 failed and NOT rolled back, 0 lost")
    every = report(["h4"], APPLY, APPLY, dict.fromkeys(APPLY, "changed"), number=3)
    assert every["lines"] == [
        "every host changed: 4 changed, 0 rolled back, 0 failed and NOT rolled back, 0 lost, 0 untouched, of 4"
    ]


def test_outcomes_other_than_changed_are_named_for_what_they_are():
    verdicts = {"h1": "rollback failed", "h2": "lock lost", "h3": "not locked"}
    out = report(["h1", "h2", "h3"], ["h4"], ["h1", "h2", "h3"], verdicts, number=1)
    assert out["stop"] and out["lost"] == []
    assert "step 1: NOT rolled back: the rollback failed (see above): h1" in out["lines"]
    assert "step 1: NOT rolled back: this run lost their lock to another run (see above): h2" in out["lines"]
    assert "step 1: not changed: another run held their lock (see above): h3" in out["lines"]
    assert out["lines"][-1] == (
        "rollout: 0 changed, 0 rolled back, 2 failed and NOT rolled back, 0 lost, 2 untouched, of 4;"
        " NOT rolled back: h1, h2; untouched: h4, h3"
    )


def test_a_host_changed_then_failed_at_the_steps_end_fails_the_step():
    out = report(["h1"], ["h2", "h3", "h4"], ["h1"], {"h1": "changed"}, number=1)
    assert out["stop"] and out["failed"] == ["h1"] and out["lost"] == []
    assert "step 1: changed and verified, then failed at the step's end (see above): h1" in out["lines"]


def test_pause_and_go_on():
    verdicts = {"h1": "changed"}
    paused = report(["h1"], APPLY, ["h1"], verdicts, {"max_fail_percentage": 0, "pause_after": 1}, number=1)
    assert paused["pause"] and paused["end"] and not paused["stop"]
    assert paused["lines"][0].startswith("paused after step 1 (sglang_rollout_pause_after): 3 host(s) not changed yet")
    going = report(["h1"], APPLY, ["h1"], verdicts, number=1)
    assert not going["end"] and going["lines"] == []


def test_the_step_report_filter_takes_the_playbooks_arguments():
    from ansible_collections.dsv4.sglang.plugins.filter.sglang_steps import sglang_rollout_step_report

    out = sglang_rollout_step_report(
        "1", ["h1"], APPLY, ["h2", "h3", "h4"], ["h1"], {"h1": ""}, {"h1": STEP_FENCE}, STEP_SETTINGS
    )
    assert out["lost"] == ["h1"] and "sglang_rollout_break_lock=R1" in out["lines"][0]


# --- PD pools across hosts (xPyD): a pool is one unit of the steps and of the guard -----------------------------

POOLED = ["p1", "p2", "d1", "r1", "q1", "e1", "s1", "h1", "h2"]
POOLS = {"p1": "pd-a", "p2": "pd-a", "d1": "pd-a", "r1": "pd-a", "q1": "pd-b", "e1": "pd-b", "s1": "pd-b"}
POOL_SETTINGS = {**NO_WAITS, "steps": [1, "50%"], "max_unavailable": 1, "pools": POOLS, "pool_routers": ["r1", "s1"]}


def test_a_step_takes_a_pool_whole_and_the_steps_and_the_guard_count_it_as_one():
    plan = steps.plan(POOLED, POOLED, POOLED, {}, POOL_SETTINGS, {})
    # Four units (pd-a, pd-b, h1, h2); the guard, 1 unit at a time; the canary step is the first pool, whole.
    assert [s["hosts"] for s in plan["steps"]] == [["p1", "p2", "d1", "r1"], ["q1", "e1", "s1"], ["h1"], ["h2"]]
    assert plan["refused"] == [] and plan["guard"] == 1
    assert plan["lines"][0].startswith("rollout: 4 unit(s) (a host, or a pool across hosts as one) change in 4 step(s)")
    assert "of the inventory's 4 serving unit(s) out of rotation at once" in plan["lines"][0]
    assert "pool pd-a: p1, p2, d1, r1 change as one" in plan["lines"][1]
    assert plan["lines"][3].startswith("step 1: pool pd-a (p1, p2, d1, r1) (1 of 4)")
    step = steps.next_step(1, POOLED, [], POOLED, POOLED, {}, POOL_SETTINGS)
    assert step["hosts"] == ["p1", "p2", "d1", "r1"] and step["pools"] == ["pd-a"]
    # A bigger guard lets a pool and a host go together: still whole pools.
    roomy = {**POOL_SETTINGS, "max_unavailable": 2, "steps": [2]}
    assert steps.next_step(1, POOLED, [], POOLED, POOLED, {}, roomy)["hosts"] == [
        "p1",
        "p2",
        "d1",
        "r1",
        "q1",
        "e1",
        "s1",
    ]
    assert steps.next_step(2, POOLED, ["p1", "p2", "d1", "r1", "q1", "e1", "s1"], POOLED, POOLED, {}, roomy)[
        "hosts"
    ] == [
        "h1",
        "h2",
    ]


def test_a_pool_serves_when_its_router_serves_whatever_a_member_that_answered_says():
    # d1 (pd-a's decode host) answered that it does not serve (fell over, or a new member on its first deploy); r1,
    # pd-a's router host, serves: pd-a is in rotation, and its restart costs the guard's one unit.
    down = {"d1": "its servers' /health: http://d1/health answered 503"}
    assert steps.Units(POOLS, POOLED, ["r1", "s1"]).down(down) == {}
    step = steps.next_step(1, POOLED, [], POOLED, POOLED, down, {**POOL_SETTINGS, "steps": [2]})
    assert step["hosts"] == ["p1", "p2", "d1", "r1"]
    plan = steps.plan(POOLED, POOLED, POOLED, down, POOL_SETTINGS, {})
    assert not [line for line in plan["lines"] if line.startswith("out of rotation now")]
    # Taking it would leave nothing in rotation: it must be allowed by name, as a pool in rotation.
    alone = ["p1", "p2", "d1", "r1"]
    whole = {**POOL_SETTINGS, "max_unavailable": "100%"}
    assert steps.plan(alone, alone, alone, down, whole, {})["refused"] == ["pd-a"]


def test_a_pool_is_out_when_its_router_host_says_it_does_not_serve():
    down = {"r1": "its router's /readiness answered 503"}
    units = steps.Units(POOLS, POOLED, ["r1", "s1"])
    assert list(units.down(down)) == ["p1"] and units.costly(units.down(down), down) == []
    # Already out: pd-a changes at no more cost, and nothing else goes with it (the guard's one unit is pd-a).
    step = steps.next_step(1, POOLED, [], POOLED, POOLED, down, {**POOL_SETTINGS, "steps": [2]})
    assert step["hosts"] == ["p1", "p2", "d1", "r1"]
    plan = steps.plan(POOLED, POOLED, POOLED, down, POOL_SETTINGS, {})
    assert "out of rotation now: pool pd-a (p1, p2, d1, r1) (r1: its router's /readiness answered 503)" in plan["lines"]


@pytest.mark.parametrize(
    "silent",
    [
        {"p1": "did not answer within 30 s"},
        {"r1": "cannot be reached: ssh: connect to host r1 port 22: Connection timed out"},
        {"d1": "not asked", "r1": "its router's /readiness answered 503"},
    ],
    ids=["a-prefill", "the-router", "with-its-router-out"],
)
def test_a_pool_with_a_host_that_could_not_be_asked_is_never_free(silent):
    units = steps.Units(POOLS, POOLED, ["r1", "s1"])
    # Counted out for the guard's room (the unknown never counts as serving)...
    assert "p1" in units.down(silent)
    # ...and, unless its router host answered that it does not serve, still costing capacity when a step takes it.
    known_out = set(silent.get("r1", "").split(":")[:1]) == {"its router's /readiness answered 503"}
    assert units.costly(units.down(silent), silent) == ([] if known_out else ["p1"])
    if known_out:
        return
    held = steps.next_step(1, POOLED, [], POOLED, POOLED, silent, {**POOL_SETTINGS, "steps": [2]})
    assert held["hosts"] == [] and "the guard leaves no room" in held["line"]
    assert f"{next(iter(silent))}: {next(iter(silent.values()))}" in held["line"]
    roomy = steps.next_step(1, POOLED, [], POOLED, POOLED, silent, {**POOL_SETTINGS, "max_unavailable": 2})
    assert roomy["hosts"] == ["p1", "p2", "d1", "r1"]
    # The pool alone in the inventory: the guard's one unit is counted out already, so its step waits (stops).
    alone = ["p1", "p2", "d1", "r1"]
    whole = {**POOL_SETTINGS, "max_unavailable": "100%"}
    first = steps.plan(alone, alone, alone, silent, whole, {})["steps"][0]
    assert first["stopped"] and "estimate" not in first


def test_another_pools_silent_host_leaves_no_room_for_this_pool():
    held = steps.next_step(1, POOLED, [], POOLED, POOLED, {"e1": "not asked"}, POOL_SETTINGS)
    assert held["hosts"] == [] and "the guard leaves no room" in held["line"] and "e1: not asked" in held["line"]


def test_a_pool_whose_step_takes_the_inventorys_last_capacity_is_refused_unless_allowed_by_name():
    alone = ["p1", "p2", "d1", "r1"]
    settings = {**POOL_SETTINGS, "max_unavailable": "100%"}
    plan = steps.plan(alone, alone, alone, {}, settings, {})
    assert plan["refused"] == ["pd-a"]
    assert plan["steps"][0]["hosts"] == alone and plan["steps"][0]["stopped"]
    line = next(line for line in plan["lines"] if line.startswith("step 1: NONE"))
    assert "pool pd-a (p1, p2, d1, r1) while nothing else of the inventory is in rotation: a pool's" in line
    assert "sglang_rollout_allow_pool_outage=['pd-a']" in line
    step = steps.next_step(1, alone, [], alone, alone, {}, settings)
    assert step["hosts"] == [] and step["refused"] == ["pd-a"]
    allowed = {**settings, "allow_pool_outage": ["pd-a"]}
    assert steps.plan(alone, alone, alone, {}, allowed, {})["refused"] == []
    assert steps.next_step(1, alone, [], alone, alone, {}, allowed)["hosts"] == alone
    # With another unit in rotation, the pool's outage leaves capacity: no name needed.
    assert steps.plan(POOLED, POOLED, POOLED, {}, POOL_SETTINGS, {})["refused"] == []
    # A pool out of rotation already (its first deploy: nothing serves, its router host says so) has no capacity to
    # lose.
    nothing = {host: "its router's /readiness answered nothing (no connection)" for host in alone}
    fresh = steps.plan(alone, [], alone, nothing, settings, {})
    assert fresh["refused"] == [] and fresh["steps"][0]["hosts"] == alone
    # A host of its own taking the last capacity stays the guard's matter (sglang_rollout_allow_whole_fleet).
    assert steps.plan(["h1"], ["h1"], ["h1"], {}, POOL_SETTINGS, {})["refused"] == []


def test_without_pools_the_steps_are_the_hosts_as_before():
    plain = {key: value for key, value in POOL_SETTINGS.items() if key != "pools"}
    hosts = ["h1", "h2", "h3", "h4"]
    named_once = {**plain, "pools": {"h1": "pd-z"}}  # a pool named by one host only is a host of its own
    for settings in (plain, named_once):
        plan = steps.plan(hosts, hosts, hosts, {}, settings, {})
        assert [s["hosts"] for s in plan["steps"]] == [["h1"], ["h2"], ["h3"], ["h4"]]
        assert plan["lines"][0].startswith("rollout: 4 host(s) change in 4 step(s)")
        assert plan["lines"][1].startswith("step 1: h1 (1 of 4)")


def test_a_refused_pool_outage_names_what_else_is_out_of_rotation():
    inventory = ["p1", "p2", "d1", "r1", "h1"]
    settings = {**POOL_SETTINGS, "max_unavailable": 2}
    plan = steps.plan(
        ["p1", "p2", "d1", "r1"], inventory, inventory, {"h1": "its router's /readiness answered 503"}, settings, {}
    )
    assert plan["refused"] == ["pd-a"]
    line = next(line for line in plan["lines"] if line.startswith("step 1: NONE"))
    assert "in rotation (out of rotation: h1: its router's /readiness answered 503): a pool's" in line


POOL_SERVICES = {
    "p1": ["prefill"],
    "p2": ["prefill"],
    "d1": ["decode"],
    "r1": ["router"],
    "q1": ["prefill"],
    "e1": ["decode"],
    "s1": ["router"],
}


def test_the_analysis_judges_a_pool_as_one_unit_through_its_router_host_and_a_host_of_its_own_as_itself():
    analysed = {**POOL_SETTINGS, "analysis": True, "pool_services": POOL_SERVICES}
    plan = steps.plan(POOLED, POOLED, POOLED, {}, analysed, {})
    first, second, third = plan["steps"][:3]
    # The pool is judged once, by its router host, with every host of it and only the services each one runs.
    assert first["analysed"] == ["r1"] and first["analysed_names"] == ["pool pd-a (through r1)"]
    assert first["judge"] == {"r1": {"p1": ["prefill"], "p2": ["prefill"], "d1": ["decode"], "r1": ["router"]}}
    assert first["stable"] == ["q1", "e1", "s1", "h1", "h2"] and first["compare"]
    assert second["judge"] == {"s1": {"q1": ["prefill"], "e1": ["decode"], "s1": ["router"]}}
    # A host of its own is judged as itself, with all three of its services.
    assert third["judge"] == {"h1": {"h1": ["prefill", "decode", "router"]}}
    assert plan["pool_analysis"] == [] and plan["analysis"]
    line = next(line for line in plan["lines"] if line.startswith("step 1:"))
    assert "; analysis of pool pd-a (through r1) against q1, e1, s1, h1, h2 (not yet changed)" in line
    # Without the analysis, nothing is judged.
    assert [s["judge"] for s in steps.plan(POOLED, POOLED, POOLED, {}, POOL_SETTINGS, {})["steps"]] == [{}] * 4


def test_a_pool_is_judged_when_its_router_host_served_whatever_a_new_member_says_and_not_on_its_first_deploy():
    analysed = {**POOL_SETTINGS, "analysis": True, "pool_services": POOL_SERVICES}
    # p2 is new (its first deploy: it served nothing before the run); the pool served through r1: it is judged,
    # p2 with it (its series must be there after the step like every member's).
    serving = [host for host in POOLED if host != "p2"]
    plan = steps.plan(POOLED, serving, POOLED, {}, analysed, {})
    assert plan["steps"][0]["judge"] == {
        "r1": {"p1": ["prefill"], "p2": ["prefill"], "d1": ["decode"], "r1": ["router"]}
    }
    # The whole pool on its first deploy (its router served nothing): no traffic to judge, nothing analysed.
    first = steps.plan(["p1", "p2", "d1", "r1"], [], POOLED, {}, analysed, {})
    assert first["steps"][0]["analysed"] == [] and first["pool_analysis"] == []


def test_a_pool_with_no_router_host_in_its_step_cannot_be_judged_and_the_plan_names_it():
    # The inventory's pool checks refuse such a pool; the analysis never takes it for judged all the same.
    analysed = {**POOL_SETTINGS, "analysis": True, "pool_routers": ["s1"], "pool_services": POOL_SERVICES}
    plan = steps.plan(POOLED, POOLED, POOLED, {}, analysed, {})
    assert plan["pool_analysis"] == ["pool pd-a (p1, p2, d1, r1)"]
    assert "r1" not in plan["steps"][0]["judge"]
