"""The collection's host programs, in one place: what the roles install on a host or run there.

Every program a host runs comes from this one set: the collection's host/programs/ (the helper's command line, the
health gate, the key launcher) and the modules the helper runs beside it, one concern each, which live in
plugins/module_utils because the collection's modules import them too. No role's folder is read: a role reaches a
program by name, through the filter sglang_host_program or the desired-state document.
"""

from __future__ import annotations

from pathlib import Path

COLLECTION = Path(__file__).resolve().parents[2]
HOST_PROGRAMS = COLLECTION / "host/programs"
MODULE_UTILS = COLLECTION / "plugins/module_utils"
# The helper set: the helper's command line and, beside it on the host, the modules it imports.
HELPER_MODULES = (
    "sglang_systemd.py",
    "sglang_files.py",
    "sglang_sampling_defaults.py",
    "sglang_records.py",
    "sglang_metrics.py",
    "sglang_rotation.py",
    "sglang_redact.py",
)
PROGRAMS = {
    "sglang_helper.py": HOST_PROGRAMS / "sglang_helper.py",
    **{name: MODULE_UTILS / name for name in HELPER_MODULES},
    "sglang_wait_healthy.py": HOST_PROGRAMS / "sglang_wait_healthy.py",
    "sglang_with_secret.py": HOST_PROGRAMS / "sglang_with_secret.py",
}


def host_program(name: str, what: str = "content") -> str:
    """One host program by name: its text (what=content) or its path on the controller (what=path)."""
    if name not in PROGRAMS:
        raise ValueError(f"{name!r} is not one of the collection's host programs ({', '.join(sorted(PROGRAMS))})")
    if what == "path":
        return str(PROGRAMS[name])
    if what != "content":
        raise ValueError(f"what={what!r} must be content or path")
    return PROGRAMS[name].read_text(encoding="utf-8")


def helper_module_paths(libexec_dir: str) -> list[str]:
    """Where the helper set's modules are on a host: beside the helper, in the layout's libexec_dir."""
    return [f"{libexec_dir.rstrip('/')}/{name}" for name in HELPER_MODULES]
