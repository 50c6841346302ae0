"""Loads the Jinja2 filters and tests every task of this collection uses, once, in the controller's main process.

Ansible runs each task of each host in a worker forked from the main process; a worker that templates a filter loads
the filter's file, and every other filter file of the same collection, from source, and throws them away when it
exits. Loaded here before the first task, they are in every worker already (bench/cpu.py measures what a deploy run
saves; BENCHMARKS.md, "A run's CPU"). It changes nothing a run does or prints.
"""

from __future__ import annotations

DOCUMENTATION = """
name: sglang_preload
type: aggregate
short_description: Loads the Jinja2 filters and tests once, before the workers fork
description:
  - Loads, in the controller's main process at the start of a playbook, the filters and tests of Ansible itself and
    every filter of this collection, so that the worker Ansible forks for each task of each host finds them loaded
    instead of loading them from source again.
  - Changes nothing a run does or prints; only the controller's CPU time.
requirements:
  - enabled with C(callbacks_enabled = dsv4.sglang.sglang_preload) in C(ansible.cfg), or
    C(ANSIBLE_CALLBACKS_ENABLED=dsv4.sglang.sglang_preload)
"""

import pathlib  # noqa: E402 (the sanity test wants the documentation first)

from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible.plugins.loader import filter_loader, test_loader  # noqa: E402

# The collection's filters are documented one per file next to their code (plugins/filter/NAME.yml).
_FILTER_DOCS = pathlib.Path(__file__).resolve().parents[1] / "filter"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dsv4.sglang.sglang_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        # One name loads every file of its kind: Ansible's own filters and tests all at once, this collection's
        # filters one file per documented filter.
        names = [(filter_loader, "ansible.builtin.to_json"), (test_loader, "ansible.builtin.match")]
        names += [(filter_loader, f"dsv4.sglang.{doc.stem}") for doc in sorted(_FILTER_DOCS.glob("*.yml"))]
        for loader, name in names:
            try:
                loader.get_with_context(name)
            except Exception as exc:  # a filter that does not load fails where a task uses it, with Ansible's message
                self._display.vvv(f"sglang_preload: {name}: {exc}")
