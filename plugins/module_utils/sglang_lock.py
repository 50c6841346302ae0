"""The per-host rollout lock: a folder made with an atomic mkdir, holding a lease.

The holder writes `owner.json` (run id, who, since when, lease end) and renews the lease at each phase of
its rollout. A lock whose lease has ended belongs to a run that was killed (Ctrl-C, lost connection); it is
reported, never taken over silently: breaking it is an explicit operator decision.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

OWNER = "owner.json"


def inspect(path: str, now: float | None = None) -> dict[str, Any] | None:
    """The lock's holder, age and lease, or None when nobody holds it."""
    if not os.path.isdir(path):
        return None
    now = time.time() if now is None else now
    try:
        with open(os.path.join(path, OWNER), encoding="utf-8") as handle:
            owner = json.load(handle)
    except (OSError, ValueError):
        # Taken an instant ago (owner not written yet), or left half-written by a killed run.
        taken = os.stat(path).st_mtime
        owner = {"run_id": "?", "owner": "unknown (no owner file)", "taken": taken, "lease_until": taken + 60}
    owner["age"] = int(now - float(owner.get("taken", now)))
    owner["expired"] = now > float(owner.get("lease_until", 0))
    return owner


def describe(holder: dict[str, Any]) -> str:
    lease = "its lease has EXPIRED (the run was probably killed)" if holder["expired"] else "its lease is live"
    return f"held by {holder.get('owner')} (run {holder.get('run_id')}) for {holder['age']} s; {lease}"


def _write_owner(path: str, entry: dict[str, Any]) -> None:
    temporary = os.path.join(path, f".{OWNER}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(entry, handle)
    os.replace(temporary, os.path.join(path, OWNER))


def acquire(path: str, run_id: str, owner: str, lease: int, force: bool = False) -> tuple[bool, dict[str, Any] | None]:
    """(True, None) when this run now holds the lock; (False, holder) when another run does."""
    holder = inspect(path)
    if holder is not None and holder.get("run_id") == run_id:
        return True, None
    if holder is not None and force:
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False, inspect(path)
    now = time.time()
    _write_owner(path, {"run_id": run_id, "owner": owner, "taken": now, "lease_until": now + lease})
    return True, None


def renew(path: str, run_id: str, lease: int) -> dict[str, Any] | None:
    """Extend this run's lease; returns the holder when this run no longer holds the lock."""
    holder = inspect(path)
    if holder is None or holder.get("run_id") != run_id:
        return holder or {"run_id": None, "owner": "nobody", "age": 0, "expired": False}
    entry = {k: holder[k] for k in ("run_id", "owner", "taken")}
    entry["lease_until"] = time.time() + lease
    _write_owner(path, entry)
    return None


def release(path: str, run_id: str) -> bool:
    """Remove the lock if this run holds it; True when it did."""
    holder = inspect(path)
    if holder is None or holder.get("run_id") != run_id:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True
