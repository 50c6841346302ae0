"""The restart of a host's SGLang services (modules sglang_service_restart and sglang_host_restart).

Reload systemd if asked, enable what is not, stop any managed unit that runs with no unit file (a rolled-back first
deploy), queue each group's restart as one transaction (prefill and decode together, the router on its own), then
wait within one start timeout (module_utils/sglang_ready.py). The rollout lock (the caller's `fence`) is checked
and renewed before anything restarts.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock, sglang_ready, sglang_systemd
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_commands import CommandError


def installed(module: Any, name: str) -> bool:
    return sglang_ready.installed(module.run_command, name)


def enabled(module: Any, name: str) -> bool:
    """Whether systemd starts the unit at boot (C(systemctl is-enabled) says enabled)."""
    return module.run_command(["systemctl", "is-enabled", name], check_rc=False)[1].strip() == "enabled"


def orphaned(module: Any, name: str) -> bool:
    """Whether the unit runs (or is starting, stopping, or failed) while no unit file describes it."""
    props = sglang_ready.unit_props(module.run_command, name)
    return props.get("LoadState") == "not-found" and props.get("ActiveState") not in ("inactive", None, "")


def unlink_dangling(unit_dir: str, names: list[str]) -> list[str]:
    """Remove the enable links to these units whose unit file is gone, and their own .wants folders left empty: a
    rolled-back first deploy leaves nothing enabled that was not before."""
    files = {sglang_systemd.unit_id(name) for name in names}
    removed = []
    for folder in sorted(glob.glob(os.path.join(glob.escape(unit_dir), "*.wants"))):
        for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) and not os.path.islink(folder) else []:
            link = os.path.join(folder, entry)
            if entry in files and os.path.islink(link) and not os.path.exists(link):
                os.unlink(link)
                removed.append(link)
        owner = os.path.basename(folder).removesuffix(".wants")
        if owner in files and not os.path.exists(os.path.join(unit_dir, owner)) and not os.listdir(folder):
            os.rmdir(folder)
            removed.append(folder)
    return removed


def restart(
    module: Any,
    p: dict[str, Any],
    issued: Callable[[], None] | None = None,
    nudge: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Reload, enable, clear orphans, queue the restarts and starts, wait; the result (module sglang_service_restart's
    RETURN). `p` holds the restart's options; `issued` is called once every restart and start is queued; `nudge`
    goes to the wait (module_utils/sglang_ready.py)."""
    to_enable = [name for name in p["enable"] if not enabled(module, name)]
    acting = bool(p["daemon_reload"] or p["restart"] or to_enable)
    if module.check_mode:
        return {
            "changed": acting,
            "waited": 0.0,
            "units": {},
            "enabled": to_enable,
            "stopped": [],
            "unlinked": [],
            "interrupted": {},
        }
    sglang_lock.fenced(module)
    if p["daemon_reload"]:
        module.run_command(["systemctl", "daemon-reload"], check_rc=True)
    if to_enable:
        module.run_command(["systemctl", "enable", *to_enable], check_rc=True)
    stopped = [name for name in p["orphans"] if orphaned(module, name)]
    if stopped:
        # Blocking: bounded by each unit's TimeoutStopSec, and gone before anything else starts on their ports.
        module.run_command(["systemctl", "stop", *stopped], check_rc=False)
        module.run_command(["systemctl", "reset-failed", *stopped], check_rc=False)
        running = [name for name in stopped if orphaned(module, name)]
        if running:
            module.fail_json(msg=f"these units run with no unit file and did not stop: {', '.join(running)}")
        acting = True
    unlinked = unlink_dangling(p["unit_dir"], [n for n in p["orphans"] if not installed(module, n)])
    if unlinked:
        module.run_command(["systemctl", "daemon-reload"], check_rc=True)
        acting = True
    groups = [[str(name) for name in group if installed(module, str(name))] for group in p["restart"]]
    # A start or restart an earlier call queued and that still runs (a call that failed, or whose controller was
    # lost, right after it queued it) is stopped first: queued onto it, this call's restart would be merged into it
    # and re-run by systemd, killing that start halfway after this call began to wait (and its moment of "failed"
    # would be taken for this call's own). It starts from what this call replaces. Blocking: bounded by each unit's
    # TimeoutStopSec.
    try:
        earlier = sglang_ready.busy(module.run_command, [name for group in groups for name in group])
        if earlier:
            module.run_command(["systemctl", "stop", *sorted(earlier)], check_rc=False)
        still = sglang_ready.busy(module.run_command, sorted(earlier))
    except CommandError as error:
        module.fail_json(msg=f"nothing restarted: {error}")
    if still:
        module.fail_json(
            msg="a systemd job an earlier call queued still runs after stopping the unit; nothing restarted: "
            + ", ".join(f"{name} has {job}" for name, job in sorted(still.items())),
            busy=still,
        )
    if earlier:
        acting = True
    # Units this call restarts must come up anew: the old process answering /health, or the "failed" or
    # "auto-restart" state of an earlier start, says nothing about the new one. A unit counts once it has left the
    # inactive state after this call (systemd's monotonic clock is this host's).
    issued_us = int(time.monotonic() * 1_000_000)
    fresh: set[str] = set()
    for units in groups:
        if units:
            module.run_command(["systemctl", "reset-failed", *units], check_rc=False)
            module.run_command(["systemctl", "restart", "--no-block", *units], check_rc=True)
            fresh.update(name.removesuffix(".service") for name in units)
    for name in p["start"]:
        if installed(module, name):
            module.run_command(["systemctl", "start", "--no-block", name], check_rc=True)
    if issued is not None:
        issued()

    # Within one start timeout (module_utils/sglang_ready.py, also the verification's wait).
    ready = sglang_ready.wait_ready(
        module.run_command,
        p["wait"],
        p["timeout"],
        p["margin"],
        p["secret_files"],
        frozenset(fresh),
        issued_us,
        nudge,
    )
    units = ready["units"]
    if ready["failure"]:
        module.fail_json(
            msg=ready["failure"],
            units=units,
            waited=ready["waited"],
            enabled=to_enable,
            stopped=stopped,
            unlinked=unlinked,
        )
    return {
        "changed": acting,
        "waited": ready["waited"],
        "units": units,
        "enabled": to_enable,
        "stopped": stopped,
        "unlinked": unlinked,
        "interrupted": earlier,
    }
