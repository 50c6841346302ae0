"""Progressive rollouts: the steps a run takes, the capacity guard that bounds each batch, and what the plan says
of them (filters sglang_rollout_schedule, sglang_step_errors).

- A step is a batch size, a whole number of hosts or a percentage of the hosts that change ("25%": rounded up, at
  least one host), as Ansible's `serial` list takes them; the last step repeats until every host has changed.
- The guard (`sglang_rollout_max_unavailable`) is a count or a percentage of the inventory's serving hosts
  (rounded down, at least one host, as Kubernetes' maxUnavailable is rounded down). No batch takes more hosts out
  of rotation than the guard less the hosts already unavailable (not serving, not ready, or drained), counted on
  the whole inventory before every batch; a batch the guard reduces to nothing stops the run.
"""

from __future__ import annotations

import math
import re
from typing import Any

PERCENT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)%$")


def _spec_errors(variable: str, spec: Any) -> list[str]:
    if isinstance(spec, bool):
        return [f"{variable}={spec!r} must be a whole number of hosts or a percentage such as '25%'"]
    if isinstance(spec, int):
        return [] if spec >= 1 else [f"{variable}={spec!r} must be at least 1 host"]
    if isinstance(spec, str):
        if spec.isdigit():
            return [] if int(spec) >= 1 else [f"{variable}={spec!r} must be at least 1 host"]
        found = PERCENT.match(spec.strip())
        if found and 0 < float(found.group(1)) <= 100:
            return []
    return [f"{variable}={spec!r} must be a whole number of hosts (at least 1) or a percentage from '1%' to '100%'"]


def step_errors(steps: Any, max_unavailable: Any) -> list[str]:
    """What is wrong with the steps and the guard, each message naming the variable and the value."""
    errors: list[str] = []
    if not isinstance(steps, list) or not steps:
        errors.append(f"sglang_rollout_steps={steps!r} must be a non-empty list of host counts or percentages")
    else:
        for index, spec in enumerate(steps):
            errors += _spec_errors(f"sglang_rollout_steps[{index}]", spec)
    errors += _spec_errors("sglang_rollout_max_unavailable", max_unavailable)
    return errors


def amount(spec: Any, total: int, round_up: bool = True) -> int:
    """A count, or a percentage of total (rounded up for a step, down for the guard), at least 1."""
    if isinstance(spec, str) and spec.strip().endswith("%"):
        share = float(spec.strip()[:-1]) * total / 100
        value = math.ceil(share - 1e-9) if round_up else math.floor(share + 1e-9)
    else:
        value = int(spec)
    return max(1, value)


def guard(max_unavailable: Any, serving: int) -> int:
    """How many of the inventory's serving hosts may be out of rotation at once."""
    return amount(max_unavailable, serving, round_up=False)


def batch_size(steps: list[Any], index: int, changing: int) -> int:
    """The size step `index` asks for (the last step repeats)."""
    return amount(steps[min(index, len(steps) - 1)], changing)


def next_batch(
    pending: list[str], steps: list[Any], index: int, changing: int, allowed: int, unavailable: list[str]
) -> dict[str, Any]:
    """The next batch: the first hosts still to change, as many as the step asks and the guard allows now.

    pending: hosts still to change, in inventory order; changing: how many change in the whole run; allowed: the
    guard; unavailable: the inventory's hosts out of rotation now (a host of the batch that is itself unavailable
    does not take more capacity away, so it is not counted twice)."""
    wanted = batch_size(steps, index, changing)
    down = set(unavailable)
    room = allowed - len(down)
    batch: list[str] = []
    for host in pending:
        if len(batch) >= wanted:
            break
        if host in down:
            batch.append(host)  # already out of rotation: changing it costs no more capacity
        elif room > 0:
            batch.append(host)
            room -= 1
        else:
            break
    return {"hosts": batch, "wanted": wanted, "room": max(allowed - len(down), 0), "unavailable": sorted(down)}


def schedule(changing: list[str], steps: list[Any], allowed: int, unavailable: list[str]) -> list[dict[str, Any]]:
    """The plan's batches, as they would be if no host's health changed during the run."""
    pending, batches, index = list(changing), [], 0
    while pending:
        batch = next_batch(pending, steps, index, len(changing), allowed, unavailable)
        if not batch["hosts"]:
            batches.append({**batch, "step": index + 1, "stopped": True})
            break
        batches.append({**batch, "step": index + 1, "stopped": False})
        pending = [host for host in pending if host not in batch["hosts"]]
        index += 1
    return batches


def estimate(hosts: list[str], restart_seconds: dict[str, float | None], settings: dict[str, Any]) -> float:
    """Seconds one batch of these hosts takes: the slowest host's measured restart (start to ready; the start
    timeout when none was measured), the drain (two notices and the in-flight wait's timeout as its bound), the
    verification's requests, and the analysis when it runs (initial delay and every round)."""
    slowest = max((restart_seconds.get(h) or float(settings["start_timeout"]) for h in hosts), default=0.0)
    drain = 2 * float(settings["notice"]) + float(settings["drain_bound"]) if settings.get("drain") else 0.0
    analysis = (
        float(settings["initial_delay"]) + float(settings["interval"]) * int(settings["count"])
        if settings.get("analysis")
        else 0.0
    )
    return round(slowest + drain + float(settings.get("verification", 10)) + analysis, 1)
