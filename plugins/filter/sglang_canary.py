"""Filters of the analysis (the canary's and every step's): how the plan describes it, and the verdict of a round."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_canary


def sglang_canary_describe(thresholds: dict) -> str:
    """The analysis as the plan prints it (module_utils/sglang_canary.py)."""
    return sglang_canary.describe(thresholds)


def sglang_canary_verdict(
    samples: dict,
    canary: str,
    stable: list[str],
    thresholds: dict,
    answers: list | None = None,
    failed: list | None = None,
    compare: bool = True,
    unreachable: list | None = None,
    unit: dict | None = None,
) -> dict:
    """One round's verdict for one analysed unit (module_utils/sglang_canary.py); without `compare`, the latencies
    are not compared (no host left unchanged); with `unreachable`, the query never reached Prometheus; `unit`, every
    host of the unit (a pool across hosts) with the services it runs."""
    return sglang_canary.verdict(
        samples, canary, stable, thresholds, answers, failed or [], bool(compare), unreachable, unit or None
    )


def sglang_canary_errors(thresholds: dict) -> list[str]:
    """Bad canary thresholds, each naming its variable."""
    return sglang_canary.threshold_errors(thresholds)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_canary_describe": sglang_canary_describe,
            "sglang_canary_verdict": sglang_canary_verdict,
            "sglang_canary_errors": sglang_canary_errors,
        }
