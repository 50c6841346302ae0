"""BENCH ONLY. Writes how long each task of a playbook run took, for bench/bench.py's breakdown of a change.

Enabled by bench.py alone (ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins, ANSIBLE_CALLBACKS_ENABLED=
bench_task_times); it writes one JSON line per task, play start or handler to the file named by
BENCH_TASK_TIMES: {"play", "role", "task", "seconds", "service_wait", "host_tasks", "module_runs"}, where seconds is
the wall time from the task's start to the next one's (under the linear strategy, the time every host of the batch
waited for it), service_wait, for the drain, the undrain and the restart, the longest the module itself reported
waiting for the services on any host of the batch (the drain's notice and in-flight wait, the start-to-ready wait,
the return notice), host_tasks how many hosts ran or skipped it (each a worker process on the controller), and
module_runs how many module runs it made on the hosts (a result that carries the module's `invocation`; each item
of a loop counts).
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: bench_task_times
type: aggregate
short_description: BENCH ONLY. Wall time of each task, as JSON lines, for bench/bench.py
description:
  - Writes one JSON line per task to the file named by the environment variable BENCH_TASK_TIMES.
requirements:
  - enabled in ANSIBLE_CALLBACKS_ENABLED
"""


# The modules that wait for the services, and the field in which each reports how long it waited.
WAITING = {"sglang_drain": "seconds", "sglang_service_restart": "waited", "sglang_host_restart": "waited"}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[dict] = []
        self._current: dict | None = None
        self._play = ""

    def _close(self) -> None:
        if self._current is not None:
            started = self._current.pop("started")
            self._rows.append({**self._current, "seconds": round(time.monotonic() - started, 3)})
            self._current = None

    def _open(self, role: str, task: str) -> None:
        self._close()
        self._current = {"play": self._play, "role": role, "task": task, "started": time.monotonic()}

    def v2_playbook_on_play_start(self, play) -> None:
        self._play = play.get_name()
        self._open("", "(play start)")

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        role = task._role.get_name(include_role_fqcn=False) if task._role else ""
        self._open(role, task.name or task.action)

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self.v2_playbook_on_task_start(task, False)

    def _count(self, result) -> None:
        if self._current is None:
            return
        self._current["host_tasks"] = self._current.get("host_tasks", 0) + 1
        found = result._result
        items = found.get("results") if isinstance(found.get("results"), list) else [found]
        runs = sum(1 for item in items if isinstance(item, dict) and item.get("invocation"))
        self._current["module_runs"] = self._current.get("module_runs", 0) + runs

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._count(result)

    def v2_runner_on_skipped(self, result) -> None:
        self._count(result)

    def v2_runner_on_unreachable(self, result) -> None:
        self._count(result)

    def v2_runner_on_ok(self, result) -> None:
        self._count(result)
        if self._current is None or result._task.action.rsplit(".", 1)[-1] not in WAITING:
            return
        reported = result._result.get(WAITING[result._task.action.rsplit(".", 1)[-1]]) or 0.0
        self._current["service_wait"] = max(self._current.get("service_wait", 0.0), float(reported))

    def v2_playbook_on_stats(self, stats) -> None:
        self._close()
        path = os.environ.get("BENCH_TASK_TIMES")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row) + "\n" for row in self._rows)
