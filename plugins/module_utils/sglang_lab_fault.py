"""LAB TOOL: the fault points inside the rollout's host-side calls (the rollout fault matrix). Never in production.

A call that folds several steps of a rollout names the points between them (module sglang_rollout_open: lock,
snapshot, read; module sglang_host_restart: drain, restart, undrain). The lab's fault injector
(molecule/shared/fault_plugins/lab_fault.py) hands a call `lab_fault` ({point, action, seconds, label, notify}); at
that point the call fails (action fail), waits (action pause), dies with its controller (action kill) or is held
until the test lets it go (action hold). It first leaves REACHED on the host and, with `notify` (a loopback HOST:PORT
the injector listens on), says so there: for a kill the injector SIGKILLs the controller then, and the call ends
`seconds` later without a word, as a call whose session died with its controller would (the worst case: nothing but
the host's own guard is left to act). A held call names its host on that connection and waits for the injector's
word (the test released it: the call goes on), or for the connection's end (the controller is gone: the call goes
on, as a call whose controller died does); one never released within `seconds` fails, so that a test that forgot
it ends in bounded time. What each run sees is then decided by the test, not by how fast a loaded machine runs.
The hook is refused on a host without LAB_MARKER, which only roles/lab_hosts writes: a production host never runs it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

LAB_MARKER = "/etc/sglang-dsv4-lab-host"
REACHED = "/run/sglang-dsv4-lab-fault.json"
ACTIONS = ("fail", "pause", "kill", "hold")
# The injector's word that lets a held call go on.
RELEASE = b"release\n"
# The exit status of a call that died at its point (as 128 + SIGKILL).
KILLED = 137


def refused(fault: dict[str, Any] | None, points: tuple[str, ...]) -> str:
    """Why this call may not take the fault (empty when it may, or when there is none); checked before anything
    changes."""
    if not fault:
        return ""
    if not os.path.isfile(LAB_MARKER):
        return f"lab_fault is a lab tool, refused on a host that is not a lab host (no {LAB_MARKER})"
    if fault.get("point") not in points or fault.get("action") not in ACTIONS:
        return f"lab_fault={fault!r}: point one of {', '.join(points)}, action one of {', '.join(ACTIONS)}"
    return ""


def at(fault: dict[str, Any] | None, point: str, fail: Any) -> None:
    """The call reached `point`: fail there (through `fail`, which does not return), wait, or end with the
    controller, as the fault says."""
    if not fault or fault.get("point") != point:
        return
    with open(REACHED, "w", encoding="utf-8") as out:
        json.dump({"point": point, "pid": os.getpid(), "time": time.time()}, out)
    if fault["action"] == "hold":
        held(fault, fail)
        return
    if fault.get("notify"):
        host, _sep, port = str(fault["notify"]).rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except (OSError, ValueError):
            pass  # the injector is gone: the pause below still holds the call at its point
    if fault["action"] == "pause":
        time.sleep(float(fault.get("seconds") or 0))
        return
    if fault["action"] == "kill":
        # The controller is killed meanwhile; the call ends here, leaving the host exactly as it is at this point.
        time.sleep(float(fault.get("seconds") or 2))
        os._exit(KILLED)
    fail(f"lab fault injected at {fault.get('label') or point}")


def held(fault: dict[str, Any], fail: Any) -> None:
    """Hold the call at its point until the injector releases it (or its controller is gone); fail when neither
    happens within the fault's seconds, or when the injector cannot be told."""
    label = fault.get("label") or fault.get("point")
    seconds = float(fault.get("seconds") or 600)
    address, _sep, port = str(fault.get("notify") or "").rpartition(":")
    try:
        told = socket.create_connection((address, int(port)), timeout=10)
    except (OSError, ValueError) as error:
        fail(f"lab fault hold at {label}: the injector at {fault.get('notify')!r} could not be told: {error}")
        return
    with told:
        told.sendall(socket.gethostname().encode() + b"\n")
        told.settimeout(seconds)
        # RELEASE (the test let it go) or nothing (the connection ended: the controller is gone): the call goes on.
        try:
            told.recv(len(RELEASE))
        except TimeoutError:
            fail(f"lab fault hold at {label}: not released within {seconds:g} s")
        except OSError:
            pass
