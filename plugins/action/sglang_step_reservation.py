"""Action plugin: count the fleet, choose this step's hosts and reserve them fleet-wide, in one task (controller side).

The capacity guard of one run cannot see what another run has chosen but not drained yet: two runs on different
--limits would each count the other's chosen hosts as serving, and together take more of the fleet out than
sglang_rollout_max_unavailable. A Kubernetes PodDisruptionBudget avoids this because every eviction goes through one
API server that counts what it allowed; here that place is one file on one host every run reaches (the task's
delegated host, sglang_rollout_reservation_host; module sglang_fleet_reservation, module_utils/sglang_reservation.py).

Each try: count every serving host (as sglang_fleet_rotation does; the plan's count stands for the first try of the
first step), read the reservations, add the other runs' reserved hosts to the hosts out of rotation, choose the step
(module_utils/sglang_steps.py, next_step), and reserve its hosts with a compare-and-set on the version the choice read.
Another run that wrote in between makes this one read, count and choose again. A step with no room only because other
runs hold hosts waits for them (counting again every `poll` seconds) for at most `wait` seconds; with no room for any
other reason it stops at once, as the guard always did. In check mode nothing is reserved.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.dsv4.sglang.plugins.action.sglang_fleet_rotation import ActionModule as RotationAction
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_steps
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_reservation import reserved_by_others
from ansible_collections.dsv4.sglang.plugins.modules.sglang_fleet_rotation import ARGUMENT_SPEC as COUNT_SPEC
from ansible_collections.dsv4.sglang.plugins.modules.sglang_step_reservation import ARGUMENT_SPEC

MODULE = "dsv4.sglang.sglang_fleet_reservation"


class StepReservationError(Exception):
    """The reservations could not be read or written: the step changes nothing. `line` is what the guard's own count
    said of the step, so that the run still names the hosts out of rotation."""

    def __init__(self, message: str, line: str) -> None:
        super().__init__(message)
        self.line = line


def merged(counted: dict[str, str], others: dict[str, str]) -> dict[str, str]:
    """The hosts out of rotation for this run's choice: those its count found (with the other run's reservation
    said too where it holds them) and those other runs reserved."""
    seen = {host: f"{why}; {others[host]}" if host in others else why for host, why in counted.items()}
    seen.update({host: why for host, why in others.items() if host not in counted})
    return seen


def choose_and_reserve(
    run: str,
    count: Callable[[], dict[str, str]],
    read: Callable[[], dict[str, Any]],
    reserve: Callable[[list[str], int], dict[str, Any]],
    choose: Callable[[dict[str, str]], dict[str, Any]],
    wait: float,
    poll: float,
    counted: dict[str, str] | None = None,
    check: bool = False,
    dead_runs: tuple[str, ...] | list[str] = (),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The step and its reservation: {'step', 'unavailable', 'reserved', 'version', 'entries', 'waited', 'tries'}.

    `count` is the fleet's count now (host -> why out), `read` the reservations' view, `reserve(hosts, version)` the
    compare-and-set, `choose(unavailable)` the step from it. A step the other runs' reservations leave no room for
    waits, at most `wait` s: it reads the reservations every `poll` s and counts the fleet and chooses again once they
    changed (another run gave hosts back, or took more); one with no room without them stops at once. The entries of
    `dead_runs` (runs whose lock this run breaks) hold nothing.
    """
    started, tries, waited_for, held = clock(), 0, [], None

    def guarded(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return call()
        except Exception as error:  # cannot read or write them: the step changes nothing, and says the guard's count
            raise StepReservationError(str(error), choose(counted or {})["line"]) from None

    def ended(found: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        return {**found, "step": step, "reserved": False, "waited": round(clock() - started, 1)}

    while True:
        tries += 1
        counted = count() if counted is None else counted
        held = guarded(read) if held is None else held
        others = reserved_by_others(held["entries"], run, dead_runs)
        unavailable = merged(counted, others)
        step = choose(unavailable)
        found = {"unavailable": unavailable, "version": held["version"], "entries": held["entries"], "tries": tries}
        if step["hosts"]:
            if check:
                return ended(found, step)
            done = guarded(functools.partial(reserve, step["hosts"], held["version"]))
            if done["reserved"]:
                waited = round(clock() - started, 1)
                if waited_for:
                    step["line"] += f"; waited {waited:g} s for room other runs held ({waited_for[-1]})"
                return {**found, "step": step, "reserved": True, "version": done["version"], "waited": waited}
            # Another run wrote between this read and this write: its hosts may be in now; read and count again.
            counted, held = None, None
            if clock() - started < wait:
                continue
            step["hosts"] = []
            step["line"] = (
                f"step {step.get('step', '?')}: the step reservations kept changing for {wait:g} s"
                " (sglang_rollout_reservation_wait): other runs reserved each time this one chose. The rollout stops"
                " before this step; run again once the other runs' steps are done."
            )
            return ended(found, step)
        held_by = sorted({entry["run"] for entry in held["entries"] if entry["run"] != run} - set(dead_runs))
        if not held_by:
            return ended(found, step)
        alone = {host: why for host, why in counted.items() if host not in others}
        if not choose(alone)["hosts"]:  # no room even without the other runs' hosts: they are not why
            return ended(found, step)
        if clock() - started >= wait:
            step["line"] += (
                f" Waited {clock() - started:.0f} s (sglang_rollout_reservation_wait={wait:g}) for the hosts other runs"
                f" reserved (runs {', '.join(held_by)}) to come back."
            )
            return ended(found, step)
        waited_for.append(f"runs {', '.join(held_by)}")
        # Until the reservations change (nothing else can make room: without them there is room) or the wait ends.
        version = held["version"]
        while True:
            sleep(min(poll, max(0.0, wait - (clock() - started))))
            held = guarded(read)
            if held["version"] != version or clock() - started >= wait:
                break
        if held["version"] != version:
            counted = None


class ActionModule(RotationAction):
    """Runs on the controller; the reservation module runs on the task's (delegated) host, the reservation host."""

    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super(RotationAction, self).run(tmp, task_vars)
        _spec, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        task_vars = task_vars or {}
        hostvars = task_vars.get("hostvars", {})
        where = args["reservation"]
        # Runs whose lock this run breaks by their id (sglang_rollout_break_lock): dead, they hold nothing.
        dead = list(where.get("dead_runs") or [])
        choice = args["choice"]
        checked = ArgumentSpecValidator(COUNT_SPEC).validate(args["count"])
        if checked.error_messages:
            result.update(failed=True, msg=f"sglang_step_reservation: count: {'; '.join(checked.error_messages)}")
            return result
        counting = checked.validated_parameters

        def count() -> dict[str, str]:
            answers, _prepared = self._count(hostvars, counting)
            return sglang_steps.out_of_rotation(choice["inventory"], answers, args["run_hosts"], args["alive"])

        def call(state: str, **extra: Any) -> dict[str, Any]:
            module_args = {"path": where["path"], "state": state, "run_id": where["run_id"], **extra}
            done = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
            if done.get("failed") or done.get("unreachable"):
                raise AnsibleError(
                    f"the step reservations on {task_vars.get('inventory_hostname', '?')}"
                    f" (sglang_rollout_reservation_host) cannot be {'read' if state == 'read' else 'written'}:"
                    f" {done.get('msg', done)}; this step changes nothing"
                )
            return done

        def choose(unavailable: dict[str, str]) -> dict[str, Any]:
            return sglang_steps.next_step(
                int(choice["number"]),
                choice["changing"],
                choice["done"],
                choice["serving"],
                choice["inventory"],
                unavailable,
                choice["settings"],
            )

        try:
            found = choose_and_reserve(
                where["run_id"],
                count,
                lambda: call("read"),
                lambda hosts, version: call(
                    "reserved",
                    hosts=hosts,
                    version=version,
                    step=int(choice["number"]),
                    owner=where["owner"],
                    lease=int(where["lease"]),
                    dead_runs=dead,
                ),
                choose,
                float(where["wait"]),
                float(where["poll"]),
                counted=args["counted"],
                check=bool(self._task.check_mode),
                dead_runs=dead,
            )
        except StepReservationError as error:
            result.update(failed=True, msg=f"{error} The guard's own count, without the reservations: {error.line}")
            return result
        found["step"]["reserved"] = found["reserved"]
        result.update(changed=False, **found)
        return result
