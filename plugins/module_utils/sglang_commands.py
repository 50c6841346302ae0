"""The host commands of the collection's read-only modules, each bounded, and systemd's view of the units.

Every host command of the plan is bounded: one wedged host fails its own plan in seconds, naming the command,
instead of stalling the fleet's plan. `run` is the module's `run_command` (argv in, rc, stdout, stderr out).
"""

from __future__ import annotations

from collections.abc import Callable

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_systemd

Run = Callable[[list], tuple]

COMMAND_TIMEOUT = 15
PROPERTIES = (
    "Id",
    "ActiveState",
    "SubState",
    "InvocationID",
    "MainPID",
    "NeedDaemonReload",
    "UnitFileState",
    "LoadState",
    "ExecMainStartTimestampMonotonic",
)


class CommandError(Exception):
    """A host command that failed or did not answer in time, with what it said."""


def bounded(run: Run, argv: list[str], seconds: int | None = None) -> tuple[int, str, str]:
    """run under coreutils' timeout; rc 124 (or 137 after the kill) means the command did not answer in time."""
    seconds = seconds or COMMAND_TIMEOUT
    rc, out, err = run(["timeout", "--kill-after=2", str(seconds), *argv])
    if rc in (124, 137):
        err = f"{argv[0]} did not answer within {seconds} s"
    return rc, out, err


def systemd_units(run: Run, names: list[str]) -> dict[str, dict[str, str]]:
    """One `systemctl show` for every unit: each unit's PROPERTIES by its id (NAME.service)."""
    rc, out, err = bounded(run, sglang_systemd.show_argv(names, PROPERTIES))
    if rc != 0:
        raise CommandError(f"systemctl show failed: {err.strip()}")
    return sglang_systemd.units(out)
