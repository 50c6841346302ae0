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
  - In check mode it reports what it would do and does nothing.
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
  fence:
    description:
      - The rollout lock this run holds (C(path), C(run_id), C(lease)); checked and renewed in this call before
        anything restarts. A run that lost the lock fails with C(lost) and restarts nothing.
    type: dict
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
"""

import glob
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock, sglang_ready


def installed(module: AnsibleModule, name: str) -> bool:
    return sglang_ready.installed(module.run_command, name)


def enabled(module: AnsibleModule, name: str) -> bool:
    """Whether systemd starts the unit at boot (C(systemctl is-enabled) says enabled)."""
    return module.run_command(["systemctl", "is-enabled", name], check_rc=False)[1].strip() == "enabled"


def orphaned(module: AnsibleModule, name: str) -> bool:
    """Whether the unit runs (or is starting, stopping, or failed) while no unit file describes it."""
    props = sglang_ready.unit_props(module.run_command, name)
    return props.get("LoadState") == "not-found" and props.get("ActiveState") not in ("inactive", None, "")


def unit_file_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


def unlink_dangling(unit_dir: str, names: list[str]) -> list[str]:
    """Remove the enable links to these units whose unit file is gone, and their own .wants folders left empty: a
    rolled-back first deploy leaves nothing enabled that was not before."""
    files = {unit_file_name(name) for name in names}
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
    p = module.params
    to_enable = [name for name in p["enable"] if not enabled(module, name)]
    acting = bool(p["daemon_reload"] or p["restart"] or to_enable)
    if module.check_mode:
        module.exit_json(changed=acting, waited=0.0, units={}, enabled=to_enable, stopped=[], unlinked=[])
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
    # Units this call restarts must come up anew: the old process answering /health, or the "failed" or
    # "auto-restart" state of an earlier start, says nothing about the new one. A unit counts once it has left the
    # inactive state after this call (systemd's monotonic clock is this host's).
    issued_us = int(time.monotonic() * 1_000_000)
    fresh: set[str] = set()
    for group in p["restart"]:
        units = [str(name) for name in group if installed(module, str(name))]
        if units:
            module.run_command(["systemctl", "reset-failed", *units], check_rc=False)
            module.run_command(["systemctl", "restart", "--no-block", *units], check_rc=True)
            fresh.update(name.removesuffix(".service") for name in units)
    for name in p["start"]:
        if installed(module, name):
            module.run_command(["systemctl", "start", "--no-block", name], check_rc=True)

    # Within one start timeout (module_utils/sglang_ready.py, also the verification's wait).
    ready = sglang_ready.wait_ready(
        module.run_command,
        p["wait"],
        p["timeout"],
        p["margin"],
        p["secret_files"],
        frozenset(fresh),
        issued_us,
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
    module.exit_json(
        changed=acting,
        waited=ready["waited"],
        units=units,
        enabled=to_enable,
        stopped=stopped,
        unlinked=unlinked,
    )


if __name__ == "__main__":
    main()
