"""The fleet's plan as one table, printed by deploy.yml before any host changes."""

from __future__ import annotations

from typing import Any


def _proof(plan: dict[str, Any]) -> str:
    proof = plan.get("proof") or {}
    if not proof.get("ran"):
        return "after apply" if not plan.get("empty") else "-"
    failures = [f for group in proof.get("failures", {}).values() for f in group]
    return "FAILED: " + "; ".join(failures) if failures else "ok"


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
        for path in plan.get("files", []):
            lines.append(f"{'':<20} {'':<8} {'':>5}  changes {path}")
        for item in plan.get("other", []):
            lines.append(f"{'':<20} {'':<8} {'':>5}  {item}")
        lines.append(f"{'':<20} {'':<8} {'':>5}  light proof: {_proof(plan)}")
    lines.append(f"apply to {len(apply)} of {len(hosts)} host(s): {', '.join(apply) or 'none'}")
    return lines


def sglang_pending(files: list[dict[str, Any]], changes: list[str] | None) -> list[dict[str, Any]]:
    """The desired files still to write: those whose path differs now, or all when no rollout read the host."""
    if changes is None:
        return list(files)
    return [f for f in files if f["path"] in changes]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_plan_table": sglang_plan_table, "sglang_pending": sglang_pending}
