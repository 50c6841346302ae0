"""LAB TOOL: inject a fault into a playbook run at a named task, for the rollout fault matrix. Never in production.

Enabled only by the lab tests, through the environment of the run they start:
    ANSIBLE_CALLBACK_PLUGINS=molecule/shared/fault_plugins ANSIBLE_CALLBACKS_ENABLED=lab_fault
    DSV4_LAB_FAULT=ACTION:TASK[#N][@SECONDS]
ACTION is
    fail    the task fails on every host (its module is replaced by ansible.builtin.fail before it is queued);
    kill    the controller is killed (SIGKILL to its workers and its process group) as the task starts, or SECONDS
            after;
    pause   the controller stops for SECONDS as the task starts (another run can act meanwhile).
TASK is the task's name (exact), #N its N-th start in the run (default: the first). TASK>POINT is a point inside
the host-side call the task makes (module_utils/sglang_lab_fault.py): the module fails there, or waits SECONDS
there; for kill it tells this plugin it got there (a connection to a loopback port the plugin listens on: the lab
hosts share this machine's network), the plugin kills the controller then, and the call ends at that point too.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: lab_fault
type: aggregate
short_description: LAB TOOL, injects a fault at a named task (the rollout fault matrix)
description:
  - Reads DSV4_LAB_FAULT=ACTION:TASK[>POINT][#N][@SECONDS]; ACTION is fail, kill or pause.
requirements: [enabled in ANSIBLE_CALLBACKS_ENABLED]
"""


def parse(spec: str) -> tuple[str, str, int, float, str]:
    """(action, task, nth start, seconds, point); #N is taken before or after >POINT."""
    action, _sep, rest = spec.partition(":")
    rest, _sep, seconds = rest.rpartition("@") if "@" in rest else (rest, "", "0")
    found = re.fullmatch(r"(?P<name>[^#>]+)(?:#(?P<n1>\d+))?(?:>(?P<point>[a-z_]+))?(?:#(?P<n2>\d+))?", rest)
    if action not in ("fail", "kill", "pause") or not found or (found["n1"] and found["n2"]):
        raise ValueError(f"DSV4_LAB_FAULT={spec!r}: ACTION:TASK[>POINT][#N][@SECONDS], ACTION one of fail, kill, pause")
    return action, found["name"], int(found["n1"] or found["n2"] or 1), float(seconds), found["point"] or ""


def children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (from /proc; one that ends meanwhile is skipped)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                # pid (comm) state ppid ...: comm may hold spaces and parentheses.
                ppid = int(stat.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent:
            found.append(int(entry))
    return found


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "lab_fault"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        spec = os.environ.get("DSV4_LAB_FAULT", "")
        self.fault = parse(spec) if spec else None
        self.seen = 0

    def _kill(self) -> None:
        with open(os.environ.get("DSV4_LAB_FAULT_LOG", os.devnull), "a") as log:
            log.write(f"killed at {self.fault[1]}\n")
        # The whole controller: its workers first. ansible-core's WorkerProcess starts its own session (os.setsid),
        # so the group's kill misses a worker mid-task, which then blocks forever writing its result to a queue
        # no one reads. Its ssh client is left to end with the host-side call, as when only the worker died.
        for pid in children(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(os.getpgid(0), signal.SIGKILL)

    def _start(self, task) -> None:
        if self.fault is None or (task.get_name() != self.fault[1] and task.name != self.fault[1]):
            return
        self.seen += 1
        action, name, nth, seconds, point = self.fault
        if self.seen != nth:
            return
        self._display.warning(f"LAB FAULT: {action} at {name!r}{f' > {point}' if point else ''} (#{nth})")
        if point:
            # Inside the task's host-side call: the module takes it as its lab_fault option.
            fault = {"point": point, "action": action, "seconds": seconds, "label": f"{name}>{point}"}
            if action == "kill":
                fault.update(seconds=seconds or 2, notify=self._listen())
            task.args["lab_fault"] = fault
        elif action == "fail":
            task.action = "ansible.builtin.fail"
            task.args = {"msg": f"lab fault injected at {name}"}
        elif action == "kill" and seconds:
            threading.Timer(seconds, self._kill).start()
        elif action == "kill":
            self._kill()
        else:
            time.sleep(seconds)

    def _listen(self) -> str:
        """A loopback port that kills the controller when the module connects to it (it has reached its point)."""
        server = socket.create_server(("127.0.0.1", 0))

        def wait() -> None:
            server.settimeout(600)
            try:
                server.accept()
            except OSError:
                return
            self._kill()

        threading.Thread(target=wait, daemon=True).start()
        return f"127.0.0.1:{server.getsockname()[1]}"

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self._start(task)
