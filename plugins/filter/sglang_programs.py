"""The collection's host programs, in one place: what the roles install on a host or run there.

Every program a host runs comes from this one set: roles/sglang_common/files/ (the helper's command line, the health
gate, the router's key launcher, the snapshot) and the modules the helper runs beside it, one concern each, which
live in plugins/module_utils because the collection's modules import them too. `sglang_host_program` is how a role
reaches one, by name, never through another role's path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLLECTION = Path(__file__).resolve().parents[2]
PROGRAMS = {
    "sglang_helper.py": COLLECTION / "roles/sglang_common/files/sglang_helper.py",
    "sglang_files.py": COLLECTION / "plugins/module_utils/sglang_files.py",
    "sglang_sampling_defaults.py": COLLECTION / "plugins/module_utils/sglang_sampling_defaults.py",
    "sglang_records.py": COLLECTION / "plugins/module_utils/sglang_records.py",
    "sglang_metrics.py": COLLECTION / "plugins/module_utils/sglang_metrics.py",
    "sglang_rotation.py": COLLECTION / "plugins/module_utils/sglang_rotation.py",
    "sglang_redact.py": COLLECTION / "plugins/module_utils/sglang_redact.py",
    "sglang_wait_healthy.py": COLLECTION / "roles/sglang_common/files/sglang_wait_healthy.py",
    "sglang_with_secret.py": COLLECTION / "roles/sglang_common/files/sglang_with_secret.py",
    "sglang_snapshot.py": COLLECTION / "roles/sglang_common/files/sglang_snapshot.py",
}


def sglang_host_program(name: str, what: str = "content") -> str:
    """One host program by name: its text (what=content) or its path on the controller (what=path)."""
    if name not in PROGRAMS:
        raise ValueError(f"{name!r} is not one of the collection's host programs ({', '.join(sorted(PROGRAMS))})")
    if what == "path":
        return str(PROGRAMS[name])
    if what != "content":
        raise ValueError(f"what={what!r} must be content or path")
    return PROGRAMS[name].read_text(encoding="utf-8")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_host_program": sglang_host_program}
