"""LAB TOOL: inject a fault into a playbook run at a named task, for the rollout fault matrix. Never in production.

Enabled only by the lab tests, through the environment of the run they start:
    ANSIBLE_CALLBACK_PLUGINS=molecule/shared/fault_plugins ANSIBLE_CALLBACKS_ENABLED=lab_fault
    DSV4_LAB_FAULT=ACTION:TASK[#N][@SECONDS]   (and DSV4_LAB_FAULT_GATE=DIR for hold)
ACTION is
    fail    the task fails on every host (its module is replaced by ansible.builtin.fail before it is queued);
    kill    the controller is killed (SIGKILL to its workers and its process group) as the task starts, or SECONDS
            after;
    pause   the controller stops for SECONDS as the task starts (another run can act meanwhile);
    hold    the controller stops as the task starts until the test releases it: it appends a line to DIR/reached
            when it gets there and goes on once DIR/release exists (the task fails if that takes over SECONDS,
            default 600). What each of two runs sees is then decided by the test, not by the machine's speed.
TASK is the task's name (exact), #N its N-th start in the run (default: the first). TASK>POINT is a point inside
the host-side call the task makes (module_utils/sglang_lab_fault.py): the module fails there, or waits SECONDS
there; for kill it tells this plugin it got there (a connection to a loopback port the plugin listens on: the lab
hosts share this machine's network), the plugin kills the controller then, and the call ends at that point too; for
hold each host's call names its host on that connection (a line in DIR/reached per host) and waits there until
DIR/release exists (the call fails if that takes over SECONDS).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time

from ansible.plugins.callback import CallbackBase
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_lab_fault import RELEASE

ACTIONS = ("fail", "kill", "pause", "hold")
# A held run polls its gate's release file this often.
POLL = 0.1

DOCUMENTATION = r"""
name: lab_fault
type: aggregate
short_description: LAB TOOL, injects a fault at a named task (the rollout fault matrix)
description:
  - Reads DSV4_LAB_FAULT=ACTION:TASK[>POINT][#N][@SECONDS]; ACTION is fail, kill, pause or hold.
  - A hold reads DSV4_LAB_FAULT_GATE=DIR (DIR/reached, a line per arrival; DIR/release lets the run go on).
requirements: [enabled in ANSIBLE_CALLBACKS_ENABLED]
"""


def parse(spec: str) -> tuple[str, str, int, float, str]:
    """(action, task, nth start, seconds, point); #N is taken before or after >POINT."""
    action, _sep, rest = spec.partition(":")
    rest, _sep, seconds = rest.rpartition("@") if "@" in rest else (rest, "", "0")
    found = re.fullmatch(r"(?P<name>[^#>]+)(?:#(?P<n1>\d+))?(?:>(?P<point>[a-z_]+))?(?:#(?P<n2>\d+))?", rest)
    if action not in ACTIONS or not found or (found["n1"] and found["n2"]):
        raise ValueError(
            f"DSV4_LAB_FAULT={spec!r}: ACTION:TASK[>POINT][#N][@SECONDS], ACTION one of {', '.join(ACTIONS)}"
        )
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
        self.gate = os.environ.get("DSV4_LAB_FAULT_GATE", "")
        if self.fault and self.fault[0] == "hold" and not os.path.isdir(self.gate):
            raise ValueError(f"DSV4_LAB_FAULT={spec!r} holds the run: DSV4_LAB_FAULT_GATE must name a folder")

    def _arrived(self, who: str) -> None:
        """One line in the gate's reached file per arrival (the test counts them)."""
        with open(os.path.join(self.gate, "reached"), "a", encoding="utf-8") as reached:
            reached.write(who + "\n")

    def _released(self) -> bool:
        return os.path.exists(os.path.join(self.gate, "release"))

    def _hold(self, task, seconds: float) -> None:
        """The controller waits at the task's start until the test releases it; past `seconds` the task fails."""
        self._arrived(f"controller at {task.get_name()}")
        limit = seconds or 600
        deadline = time.monotonic() + limit
        while not self._released():
            if time.monotonic() > deadline:
                task.action = "ansible.builtin.fail"
                task.args = {"msg": f"lab fault hold at {task.get_name()}: not released within {limit:g} s"}
                return
            time.sleep(POLL)

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
                fault.update(seconds=seconds or 2, notify=self._listen(self._kill_on_arrival))
            elif action == "hold":
                fault.update(seconds=seconds or 600, notify=self._listen(self._hold_on_arrival))
            task.args["lab_fault"] = fault
        elif action == "fail":
            task.action = "ansible.builtin.fail"
            task.args = {"msg": f"lab fault injected at {name}"}
        elif action == "kill" and seconds:
            threading.Timer(seconds, self._kill).start()
        elif action == "kill":
            self._kill()
        elif action == "hold":
            self._hold(task, seconds)
        else:
            time.sleep(seconds)

    def _kill_on_arrival(self, server: socket.socket) -> None:
        server.settimeout(600)
        try:
            server.accept()
        except OSError:
            return
        self._kill()

    def _hold_on_arrival(self, server: socket.socket) -> None:
        """Every host's call that reaches the point names its host and waits for the release word (its own timeout
        fails it); the controller goes on meanwhile only as far as the task's other hosts allow."""

        def hold(connection: socket.socket) -> None:
            with connection:
                connection.settimeout(30)
                host = connection.makefile("r", encoding="utf-8").readline().strip() or "?"
                self._arrived(host)
                while not self._released():
                    time.sleep(POLL)
                connection.sendall(RELEASE)

        while True:
            try:
                connection, _address = server.accept()
            except OSError:
                return
            threading.Thread(target=hold, args=(connection,), daemon=True).start()

    def _listen(self, on_arrival) -> str:
        """A loopback port the module connects to once it has reached its point (the lab hosts share this machine's
        network); `on_arrival` serves it in a thread of its own."""
        server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=on_arrival, args=(server,), daemon=True).start()
        return f"127.0.0.1:{server.getsockname()[1]}"

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self._start(task)
