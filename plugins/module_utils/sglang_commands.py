"""The host commands of the collection's read-only modules, each bounded, and systemd's view of the units.

Every host command of the plan and the proof is bounded: one wedged host fails its own plan in seconds, naming the
command, instead of stalling the fleet's plan. The bound is kept here, in the module's process, not by coreutils'
`timeout` around the command: on Debian 12 (coreutils 9.1) that wrapper, run from a module, now and then stayed
about a second after its command had ended, holding the output pipe open, and AnsibleModule.run_command waited
out its one-second poll for it (measured in the lab: one journalctl in ten, a second added to a host's read).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
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


# After the bound, the command's process group gets SIGTERM, then SIGKILL this many seconds later.
KILL_AFTER = 2
# The rc of a command that did not answer within its bound (coreutils' timeout's, which callers knew).
TIMED_OUT = 124


def bounded(argv: list[str], seconds: int | None = None) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of argv, run in its own process group with no input; rc TIMED_OUT means it did not answer
    within `seconds` (it is then terminated, and killed KILL_AFTER s later), 127 that it could not be started."""
    seconds = seconds or COMMAND_TIMEOUT
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as error:
        return 127, "", f"{argv[0]}: {error.strerror}"
    try:
        out, err = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.communicate(timeout=KILL_AFTER)
                break
            except subprocess.TimeoutExpired:
                continue
        # A process that not even SIGKILL ends (a wedged driver) is left to the kernel: the call still returns.
        return TIMED_OUT, "", f"{argv[0]} did not answer within {seconds} s"
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def systemd_units(names: list[str]) -> dict[str, dict[str, str]]:
    """One `systemctl show` for every unit: each unit's PROPERTIES by its id (NAME.service)."""
    rc, out, err = bounded(sglang_systemd.show_argv(names, PROPERTIES))
    if rc != 0:
        raise CommandError(f"systemctl show failed: {err.strip()}")
    return sglang_systemd.units(out)
