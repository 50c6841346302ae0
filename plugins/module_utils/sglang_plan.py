"""What restarts the services, and when: decided here, from the host's state, and nowhere else.

Level-triggered: a service restarts when what it runs from differs from what it was started from, whatever
this run did or did not change. Each server (and the router) records, at every start, the digest of its
inputs under /run (`sglang_helper.py record`, module_utils/sglang_records.py). The plan compares that record
with the digest its inputs will have once this run's files are in place:

  not running                       -> start it
  unit changed on disk, not loaded  -> daemon-reload and restart
  record of another invocation/none -> unknown: restart only if the light proof fails
  record differs from the inputs    -> restart (a run that died after changing a file is repaired here)
                                       (the reason names the inputs that changed since the start)
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
        return STALE
    return CHANGING


STALE = "started from inputs that have changed since"
CHANGING = "its inputs change in this run"


def _reason(name: str, status: str, detail: dict[str, Any]) -> str:
    if status == STALE and detail.get("changed_since_start"):
        return f"{name}: {status}: {', '.join(detail['changed_since_start'])}"
    if status == CHANGING and detail.get("changed_inputs"):
        return f"{name}: {status}: {', '.join(detail['changed_inputs'])}"
    return f"{name}: {status}"


def decide(
    changes: list[str],
    statuses: dict[str, str],
    groups: dict[str, str],
    proof_failures: dict[str, list[str]] | None = None,
    facts: dict[str, list[str]] | None = None,
    details: dict[str, dict[str, Any]] | None = None,
    pool: list[str] | None = None,
) -> dict[str, Any]:
    """The host's plan, as data: file changes, what restarts per group and why, what else the run must do.

    groups maps each service to "servers" or "router"; proof_failures maps a group to what failed. facts holds
    `missing_users`, `disabled_units`, `build` (releases not built yet) and `held` (files that differ but belong
    to roles a --tags run leaves out); details holds per service its `changed_since_start`, `changed_inputs` and
    `held_inputs`. pool: why this host's servers restart with their PD pool across hosts although their own inputs
    did not change (another host of the pool restarts its servers: a pool's prefills and decodes restart as one).
    """
    proof_failures = dict(proof_failures or {})
    if proof_failures.get("servers"):
        # The router's readiness follows its workers; restarting the servers is the repair, not the router.
        proof_failures["router"] = []
    facts = facts or {}
    details = details or {}
    restart: dict[str, list[str]] = {"servers": [], "router": []}
    for name, status in sorted(statuses.items()):
        group = groups[name]
        if status == UNKNOWN:
            if proof_failures.get(group):
                restart[group].append(f"{name}: no start record, and the light proof failed")
        elif status != CURRENT:
            restart[group].append(_reason(name, status, details.get(name, {})))
    for group, failures in proof_failures.items():
        if failures and not restart[group]:
            restart[group] += [f"light proof: {failure}" for failure in failures]
    has_servers = "servers" in groups.values()
    if pool and not restart["servers"] and has_servers:
        restart["servers"] += [f"pool: {reason}" for reason in pool]
    # The router host of a pool across hosts (no servers of its own): it takes the pool's workers out of rotation
    # before they restart and puts them back once they are ready (sglang_services' handlers).
    drain_pool = bool(pool) and not has_servers and "router" in groups.values()
    missing_users = sorted(facts.get("missing_users", []))
    disabled_units = sorted(facts.get("disabled_units", []))
    # A restart this run makes would start a service while some of its inputs still wait for another role.
    held_conflicts = sorted(
        f"{name}: {path}"
        for name, group in groups.items()
        if restart[group]
        for path in details.get(name, {}).get("held_inputs", [])
    )
    other = [f"create user {user}" for user in missing_users] + [f"enable {unit}" for unit in disabled_units]
    if facts.get("undrain"):
        other.append("put the router's workers back into rotation (an earlier run's drain did not end)")
    if drain_pool:
        other.append(f"drain the pool's workers while its servers restart ({'; '.join(pool or [])})")
    return {
        "files": sorted(changes),
        "other": sorted(other),
        "missing_users": missing_users,
        "disabled_units": disabled_units,
        "held": sorted(facts.get("held", [])),
        "held_conflicts": held_conflicts,
        "undrain": bool(facts.get("undrain")),
        # Releases to build before the batches (the build play), by id.
        "build": sorted(facts.get("build", [])),
        "restart": restart,
        # Every service runs now (a host that serves; not a first start): a canary is compared with such hosts.
        "serving": not any(status.startswith("not running") for status in statuses.values()),
        "restart_servers": bool(restart["servers"]),
        "restart_router": bool(restart["router"]),
        "pool": list(pool or []),
        "drain_pool": drain_pool,
        "empty": not changes
        and not other
        and not facts.get("build")
        and not restart["servers"]
        and not restart["router"],
    }
