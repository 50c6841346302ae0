"""Filters of progressive rollouts: the steps' and the guard's input errors, the plan's steps with their estimates,
and the step a run takes now (module_utils/sglang_steps.py holds the rules)."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_steps


def sglang_step_errors(
    steps: Any, max_unavailable: Any, inventory: int | None = None, allow_whole_fleet: Any = False
) -> list[str]:
    """What is wrong with sglang_rollout_steps and sglang_rollout_max_unavailable, naming each variable; with the
    inventory's size, a whole-fleet guard the operator did not allow by name."""
    return sglang_steps.step_errors(steps, max_unavailable, inventory, allow_whole_fleet)


def sglang_rollout_schedule(
    changing: list[str],
    serving: list[str],
    inventory: list[str],
    unavailable: dict[str, str],
    settings: dict[str, Any],
    restart_seconds: dict[str, Any],
) -> dict[str, Any]:
    """The run's steps as planned now, with the guard, the analysis of each step and the estimates."""
    return sglang_steps.plan(changing, serving, inventory, unavailable, settings, restart_seconds)


def sglang_rollout_next_step(
    number: int,
    changing: list[str],
    done: list[str],
    serving: list[str],
    inventory: list[str],
    unavailable: dict[str, str],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The step the run takes now, from the health read just before it."""
    return sglang_steps.next_step(int(number), changing, done, serving, inventory, unavailable, settings)


def sglang_out_of_rotation(
    inventory: list[str], answers: dict[str, Any], run: list[str], alive: list[str]
) -> dict[str, str]:
    """The inventory's hosts out of rotation now, each with why (no answer counts as out)."""
    return sglang_steps.out_of_rotation(inventory, answers, run, alive)


def sglang_rollout_step_report(
    number: int,
    step_hosts: list[str],
    hosts: list[str],
    alive: list[str],
    done: list[str],
    verdicts: dict[str, Any],
    locks: dict[str, Any],
    settings: dict[str, Any],
    analysis_failures: list[str] | None = None,
    run_id: str = "?",
) -> dict[str, Any]:
    """What one step did, host by host (a host without a verdict was lost), and whether the run stops, pauses or
    goes on; the last step's lines count changed, rolled back, lost and untouched hosts apart."""
    return sglang_steps.step_report(
        int(number), step_hosts, hosts, alive, done, verdicts, locks, settings, analysis_failures or (), str(run_id)
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_step_errors": sglang_step_errors,
            "sglang_rollout_schedule": sglang_rollout_schedule,
            "sglang_rollout_next_step": sglang_rollout_next_step,
            "sglang_out_of_rotation": sglang_out_of_rotation,
            "sglang_rollout_step_report": sglang_rollout_step_report,
        }
