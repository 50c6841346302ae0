#!/usr/bin/python
"""Ansible module: restart the SGLang services a plan names, and wait for them within one start timeout."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_service_restart
short_description: Restart prefill and decode together (their target) and/or the router, then wait, bounded
description:
  - The one way this collection restarts services. Optionally reloads systemd, queues the restarts
    (C(systemctl --no-block)), then waits until every listed unit is active and its URL answers 200.
  - Bounded by one start timeout plus C(margin) seconds in all. Fails at once, naming the unit and quoting its
    journal, when a unit enters C(failed) or C(auto-restart) (its start failed and systemd would retry).
  - Units that are not installed are not started. One of O(orphans) that still runs with no unit file (a
    rollback of a first deploy removed it) is stopped and cleared, so that nothing runs that no file on disk
    describes (on a GPU host such a process would hold every GPU's memory and the ports the next run needs).
  - The journal lines quoted in a failure have every key masked (the values in O(secret_files), and any
    key-shaped value).
  - A unit to restart on which a start or restart queued by an earlier call still runs (a call that failed, or whose
    controller was lost, right after queueing it) is stopped first. Queued onto that job, the restart would be merged
    into it and re-run by systemd, killing that start halfway while this call already waits.
  - In check mode it reports what it would do and does nothing.
extends_documentation_fragment:
  - dsv4.sglang.fence
options:
  daemon_reload:
    description: Run C(systemctl daemon-reload) first.
    type: bool
    default: false
  restart:
    description: Groups of units, in order; the units of a group are restarted by one C(systemctl restart), one
      transaction (prefill and decode together, then the router). A unit that is not running is started; one that
      is starting, or waiting to restart after a failure, is restarted, so it comes up from its current inputs.
    type: list
    elements: list
    default: []
  start:
    description: Units to start when they are not active (the target that groups the services).
    type: list
    elements: str
    default: []
  wait:
    description: Units to wait for, each C(name) and C(health_url) (C(/health) of a server, C(/readiness) of the
      router).
    type: list
    elements: dict
    default: []
  timeout:
    description: The units' start timeout (TimeoutStartSec), in seconds.
    type: int
    required: true
  margin:
    description: Seconds allowed beyond the start timeout.
    type: int
    default: 15
  enable:
    description: Units to enable (C(systemctl enable)) when they are not; done after the reload, before any restart.
    type: list
    elements: str
    default: []
  orphans:
    description: The units (and the target) this collection manages; any of them that runs with no unit file is
      stopped.
    type: list
    elements: str
    default: []
  unit_dir:
    description: Where the units' files and their enable links are; a link left to one of O(orphans) whose unit file
      is gone is removed, and so is a C(.wants) folder of theirs left empty.
    type: path
    default: /etc/systemd/system
  secret_files:
    description: The credential files on the host whose values are masked in quoted journal lines.
    type: list
    elements: path
    default: []
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Restart prefill and decode together and wait for them and the router
  dsv4.sglang.sglang_service_restart:
    restart: [[sglang-dsv4-prefill, sglang-dsv4-decode]]
    start: [sglang-dsv4.target]
    wait:
      - {name: sglang-dsv4-prefill, health_url: "http://127.0.0.1:30000/health"}
      - {name: sglang-dsv4-decode, health_url: "http://127.0.0.1:30001/health"}
      - {name: sglang-dsv4-router, health_url: "http://127.0.0.1:8000/readiness"}
    timeout: 1800
"""

RETURN = r"""
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
units:
  description: Per waited unit, its last ActiveState/SubState and URL status.
  returned: always
  type: dict
enabled:
  description: The units this call enabled.
  returned: always
  type: list
stopped:
  description: The units stopped because they ran with no unit file.
  returned: always
  type: list
unlinked:
  description: The enable links (and empty C(.wants) folders) removed because their unit file is gone.
  returned: always
  type: list
interrupted:
  description: The units to restart on which a job an earlier call queued still ran (a start or restart), each with
    its job and state; each was stopped before this call queued its restart.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_ready
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_restart import restart


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "daemon_reload": {"type": "bool", "default": False},
            "restart": {"type": "list", "elements": "list", "default": []},
            "start": {"type": "list", "elements": "str", "default": []},
            "wait": {"type": "list", "elements": "dict", "default": []},
            "timeout": {"type": "int", "required": True},
            "margin": {"type": "int", "default": sglang_ready.MARGIN},
            "enable": {"type": "list", "elements": "str", "default": []},
            "orphans": {"type": "list", "elements": "str", "default": []},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            # Paths of the key files, not keys: what they hold is read on the host and never returned.
            "secret_files": {"type": "list", "elements": "path", "default": [], "no_log": False},
            "fence": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**restart(module, module.params))


if __name__ == "__main__":
    main()
