"""What restarts the services, and when: decided here, from the host's state, and nowhere else.

Level-triggered: a service restarts when what it runs from differs from what it was started from, whatever
this run did or did not change. Each server (and the router) records, at every start, the digest of its
inputs under /run (`sglang_sampling_defaults.py record`). The plan compares that record with the digest its
inputs will have once this run's files are in place:

  not running                       -> start it
  unit changed on disk, not loaded  -> daemon-reload and restart
  record of another invocation/none -> unknown: restart only if the light proof fails
  record differs from the inputs    -> restart (a run that died after changing a file is repaired here)
  record equals the inputs          -> current

Prefill and decode always restart together (the target), the router only for its own reasons. File times
decide nothing: a touch or an rsync that keeps the bytes costs no model reload.
"""

from __future__ import annotations

from typing import Any

CURRENT = "current"
UNKNOWN = "unknown"


def unit_status(unit: dict[str, Any], record: dict[str, Any] | None, desired: str, current: str) -> str:
    """One service's evidence: CURRENT, UNKNOWN, or the reason it must restart."""
    if unit.get("active") != "active":
        return f"not running ({unit.get('active', 'unknown')})"
    if unit.get("need_reload"):
        return "unit file changed on disk and is not loaded"
    if not record or record.get("invocation") != unit.get("invocation"):
        return UNKNOWN
    if record.get("digest") == desired:
        return CURRENT
    if record.get("digest") != current:
        return "started from inputs that have changed since"
    return "its inputs change in this run"


def decide(
    changes: list[str],
    statuses: dict[str, str],
    groups: dict[str, str],
    proof_failures: dict[str, list[str]] | None = None,
    unmet: list[str] | None = None,
) -> dict[str, Any]:
    """The host's plan from file changes, per-service evidence and (optional) light-proof failures.

    groups maps each service to "servers" or "router"; proof_failures maps a group to what failed.
    """
    proof_failures = proof_failures or {}
    restart: dict[str, list[str]] = {"servers": [], "router": []}
    for name, status in sorted(statuses.items()):
        group = groups[name]
        if status == UNKNOWN:
            if proof_failures.get(group):
                restart[group].append(f"{name}: no start record, and the light proof failed")
        elif status != CURRENT:
            restart[group].append(f"{name}: {status}")
    for group, failures in proof_failures.items():
        if failures and not restart[group]:
            restart[group] += [f"light proof: {failure}" for failure in failures]
    return {
        "files": sorted(changes),
        "other": sorted(unmet or []),
        "restart": restart,
        "empty": not changes and not unmet and not restart["servers"] and not restart["router"],
    }
