"""What each service started from, as the plan reads it on the host (module sglang_host_state): its start record,
and which of its inputs differ from that record (for a runtime, which distributions moved).

Not in the helper set (module_utils/sglang_records.py writes the records on the host): a change here never
changes what the services start from.
"""

from __future__ import annotations

import json
import os

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import read_regular
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import (
    DISTRIBUTIONS,
    WEIGHTS,
    distributions,
    weight_version,
)


def run_record(path: str) -> dict | None:
    """A service's start record (root-only, under /run), or None when absent or not a small regular file."""
    try:
        raw = read_regular(path, limit=1 << 20)
        entry = json.loads(raw) if raw else None
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def started_weight_version(record: dict | None) -> str | None:
    """The --weight-version a server's current start got (its record's), or None (a router, or no record)."""
    weights = (record or {}).get("weights")
    return next(iter(weights.values()), None) if isinstance(weights, dict) else None


# How many changed distributions a restart reason names before it says "and N more".
MOVED_SHOWN = 6


def changed_since_start(unit: dict, record: dict | None, current: dict) -> list[str]:
    """The inputs whose content differs from the service's start record; for a runtime, which distributions."""
    if not record:
        return []
    started = record.get("inputs") or {}
    changed = []
    for path in unit["inputs"]:
        if started.get(path, "absent") == current[path]:
            continue
        if path.startswith(DISTRIBUTIONS):
            venv = path[len(DISTRIBUTIONS) :]
            runtimes = record.get("runtime") or {}
            # Another release in place of the one it started from: compare the two.
            was = venv if venv in runtimes or len(runtimes) != 1 else next(iter(runtimes))
            before = runtimes.get(was) or {}
            now = distributions(venv)
            moved = [
                f"{name} {before.get(name, '-')} -> {now.get(name, '-')}"
                for name in sorted(set(before) | set(now))
                if before.get(name) != now.get(name)
            ]
            if len(moved) > MOVED_SHOWN:
                moved = [*moved[:MOVED_SHOWN], f"and {len(moved) - MOVED_SHOWN} more"]
            if was == venv:
                changed.append(f"runtime {venv} ({', '.join(moved) or 'changed'})")
            else:
                what = ", ".join(moved) if now else "not built yet"
                changed.append(f"runtime release {os.path.basename(was)} -> {os.path.basename(venv)} ({what})")
        elif path.startswith(WEIGHTS):
            model_dir = path[len(WEIGHTS) :]
            was = (record.get("weights") or {}).get(model_dir, "unknown")
            changed.append(f"weights {model_dir} ({was} -> {weight_version(current[path] or '')})")
        else:
            changed.append(path)
    return changed
