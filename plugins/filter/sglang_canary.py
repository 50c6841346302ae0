"""Filters of the canary: which hosts it is and what it is judged on (the plan), and the verdict of one round."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_canary


def sglang_canary_plan(
    apply_hosts: list[str], count: int, prometheus: dict[str, Any], thresholds: dict, serving: list[str]
) -> dict:
    """The canary of this run: the first `count` hosts to change, judged against the hosts that change after them
    and serve now (not yet changed). prometheus: {"host": the inventory host to query from, "url": its URL there}.
    Without such hosts (a fleet's first start, every host in the first batch) there is nothing to compare with,
    and no analysis."""
    count = int(count)
    canary = list(apply_hosts[:count])
    stable = [host for host in apply_hosts[count:] if host in serving]
    plan = {"hosts": canary if count and stable else [], "stable": stable if count else [], "analysis": False}
    if not count:
        plan["lines"] = ["canary: none (sglang_rollout_canary=0): every batch is judged by its own verification only"]
    elif not stable:
        later = apply_hosts[count:]
        why = "no host changes after the first batch" if not later else f"none of {', '.join(later)} serves yet"
        plan["lines"] = [f"canary: none ({why}: nothing to compare a canary with)"]
    else:
        plan["analysis"] = True
        plan["lines"] = [
            f"canary: {', '.join(canary)}, judged against {', '.join(stable)} (not yet changed) on Prometheus at"
            f" {prometheus.get('url') or '?'} (from {prometheus.get('host') or '?'})",
            "canary analysis: " + sglang_canary.describe(thresholds),
            "a failed analysis rolls the canary back and stops the rollout before any other host changes",
        ]
    return plan


def sglang_canary_verdict(
    samples: dict,
    canary: str,
    stable: list[str],
    thresholds: dict,
    answers: list | None = None,
    failed: list | None = None,
) -> dict:
    """One round's verdict for one canary host (module_utils/sglang_canary.py)."""
    return sglang_canary.verdict(samples, canary, stable, thresholds, answers, failed or [])


def sglang_canary_errors(thresholds: dict) -> list[str]:
    """Bad canary thresholds, each naming its variable."""
    return sglang_canary.threshold_errors(thresholds)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_canary_plan": sglang_canary_plan,
            "sglang_canary_verdict": sglang_canary_verdict,
            "sglang_canary_errors": sglang_canary_errors,
        }
