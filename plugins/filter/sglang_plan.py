"""The fleet's plan as one table, printed by deploy.yml before any host changes."""

from __future__ import annotations

import hashlib
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import keyed_digest


def _proof(plan: dict[str, Any]) -> str:
    proof = plan.get("proof") or {}
    if not proof.get("ran"):
        return "after apply" if not plan.get("empty") else "-"
    failures = [f for group in proof.get("failures", {}).values() for f in group]
    return "FAILED: " + "; ".join(failures) if failures else "ok"


def _releases(plan: dict[str, Any]) -> list[str]:
    """'runtime servers: release A (sglang 0.5.22) -> B (sglang 0.5.23), to build' for each release that moves."""
    lines = []
    for release in plan.get("releases", []):
        if release.get("running") == [release["id"]] and release.get("ready"):
            continue
        running = zip(release.get("running", []), release.get("running_describe", []), strict=True)
        before = ", ".join(f"{rid} ({what})" for rid, what in running) or "none running"
        built = "built" if release.get("ready") else "to build"
        after = f"{release['id']} ({release['describe']})"
        lines.append(f"runtime {release['group']}: release {before} -> {after}, {built}")
    return lines


def _weights(plan: dict[str, Any]) -> list[str]:
    """'weights sha256:A (61 files), running' or, where a server started from others, which version each runs."""
    weights = plan.get("weights")
    if not weights:
        return []
    if weights.get("unreadable"):
        return [f"weights: unknown ({weights['unreadable']})"]
    head = f"weights {weights['version']} ({weights['files']} weight files)"
    running = weights.get("running") or {}
    if running and set(running.values()) == {weights["version"]}:
        return [f"{head}, running"]
    started = ", ".join(f"{name} {version or 'unknown'}" for name, version in sorted(running.items()))
    return [f"{head}; started from: {started or 'none'}"]


def sglang_plan_table(plans: list[dict[str, Any]], hosts: list[str]) -> list[str]:
    """One line per host: what changes, what restarts and why, the light proof; then the apply set."""
    lines = [f"{'host':<20} {'action':<8} {'files':>5}  restart servers / router; light proof"]
    apply = []
    for host, plan in zip(hosts, plans, strict=True):
        restart = plan.get("restart", {})
        servers = "; ".join(restart.get("servers", [])) or "-"
        router = "; ".join(restart.get("router", [])) or "-"
        action = "none" if plan.get("empty") else "apply"
        if action == "apply":
            apply.append(host)
        lines.append(f"{host:<20} {action:<8} {len(plan.get('files', [])):>5}  servers: {servers} / router: {router}")
        for line in _releases(plan) + _weights(plan):
            lines.append(f"{'':<20} {'':<8} {'':>5}  {line}")
        for path in plan.get("files", []):
            lines.append(f"{'':<20} {'':<8} {'':>5}  changes {path}")
        drain = plan.get("drain") or {}
        if plan.get("in_pool") and restart.get("servers"):
            lines.append(
                f"{'':<20} {'':<8} {'':>5}  pool {plan['in_pool']}: its router host takes the pool's workers out of"
                " rotation before any server of the pool restarts, and back once every one is ready"
            )
        elif restart.get("servers") or restart.get("router"):
            if drain.get("enabled"):
                lines.append(
                    f"{'':<20} {'':<8} {'':>5}  drain before the restart: out of rotation, {drain['notice']} s for the"
                    f" balancer, in-flight work to zero within {drain['timeout']} s (then: {drain['on_timeout']})"
                )
            else:
                lines.append(f"{'':<20} {'':<8} {'':>5}  no drain before the restart (sglang_services_drain=false)")
        for item in plan.get("other", []):
            lines.append(f"{'':<20} {'':<8} {'':>5}  {item}")
        for path in plan.get("held", []):
            lines.append(f"{'':<20} {'':<8} {'':>5}  held (outside --tags): {path}")
        lines.append(f"{'':<20} {'':<8} {'':>5}  light proof: {_proof(plan)}")
    lines.append(f"apply to {len(apply)} of {len(hosts)} host(s): {', '.join(apply) or 'none'}")
    return lines


def sglang_pending(files: list[dict[str, Any]], changes: list[str] | None) -> list[dict[str, Any]]:
    """The desired files still to write: those whose path differs now, or all when no rollout read the host."""
    if changes is None:
        return list(files)
    return [f for f in files if f["path"] in changes]


def sglang_file_digests(files: list[dict[str, Any]], key: str = "") -> list[dict[str, Any]]:
    """The desired files as the host read compares them: path, mode, role and digest; the content only where a
    --diff may show it (never a secret, never an env file, which may hold tokens). A key file's digest is an HMAC
    under `key` (module_utils/sglang_files.keyed_digest), which the host read takes as a no_log argument."""
    out = []
    for item in files:
        content = item.get("content")
        if content is None:
            digest = None
        elif item.get("secret") and key:
            digest = keyed_digest(content.encode(), key)
        else:
            digest = hashlib.sha256(content.encode()).hexdigest()
        out.append(
            {
                "path": item["path"],
                "mode": item.get("mode"),
                "role": item.get("role"),
                "sha256": digest,
                "content": None if item.get("secret") or item.get("private") else content,
            }
        )
    return out


def sglang_apply_hosts(hosts: list[str], plans: list[dict[str, Any]]) -> list[str]:
    """The hosts whose plan is not empty, in the order given (the inventory's), whatever order plans came back in."""
    return [host for host, plan in zip(hosts, plans, strict=True) if not plan.get("empty")]


def sglang_pool_restart(plan: dict[str, Any], others: dict[str, Any], has_servers: bool) -> dict[str, Any]:
    """A host's plan with its PD pool across hosts: where another host of the pool (`others`: host -> the plan its
    read found) restarts its servers, this host's servers restart too, in the same step (a pool's prefills and
    decodes restart as one: never a prefill beside a decode of other settings). `pool_restart` says why; the apply's
    read under the lock carries it (module_utils/sglang_plan.decide's `pool`). A host without servers (the pool's
    router host) drains the pool's workers around their restart instead (`drain_pool`)."""
    reasons = [
        f"{host} restarts its servers ({'; '.join(other['restart']['servers'][:1])})"
        for host, other in sorted((others or {}).items())
        if isinstance(other, dict) and other.get("restart_servers")
    ]
    if not reasons:
        return plan
    if not has_servers:
        # The pool's router host: it drains the pool's workers while they restart, and puts them back after.
        other = [*plan.get("other", []), f"drain the pool's workers while its servers restart ({'; '.join(reasons)})"]
        return {**plan, "other": other, "drain_pool": True, "empty": False, "pool_restart": reasons}
    restart = dict(plan.get("restart") or {"servers": [], "router": []})
    if not restart.get("servers"):
        restart["servers"] = [f"pool: {reason}" for reason in reasons]
    return {**plan, "restart": restart, "restart_servers": True, "empty": False, "pool_restart": reasons}


def sglang_lock_verdict(holder: dict[str, Any] | None, break_lock: str = "") -> dict[str, Any]:
    """Whether this run may take a host's lock: free, its own, or a break that names it (module_utils/sglang_lock)."""
    allowed, why = sglang_lock.may_break(holder, break_lock or "")
    return {"allowed": allowed, "breaks": bool(holder) and allowed, "why": why}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_plan_table": sglang_plan_table,
            "sglang_pending": sglang_pending,
            "sglang_file_digests": sglang_file_digests,
            "sglang_apply_hosts": sglang_apply_hosts,
            "sglang_lock_verdict": sglang_lock_verdict,
            "sglang_pool_restart": sglang_pool_restart,
        }
