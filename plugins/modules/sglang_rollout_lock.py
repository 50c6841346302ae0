#!/usr/bin/python
"""Ansible module: take, renew or release the per-host rollout lock (a lease)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_rollout_lock
short_description: Take, renew or release the per-host rollout lock, a lease named after the run
description:
  - C(acquired) makes the lock folder with an atomic mkdir (directly under /run, where only root can create
    anything) and writes the run's id, owner and lease end. When another run holds it, fails naming the holder,
    how long it has held it and whether its lease has expired, and changes nothing. C(break_lock) removes
    another run's lock first, only when it names that run's id, or is C(true) and the lease has expired or the
    lock is unreadable.
  - C(renewed) extends this run's lease and fails if this run no longer holds the lock (the fencing check every
    writing, restarting or rolling-back step makes first).
  - C(released) removes the lock only if this run holds it.
  - Bookkeeping, not a change of the deployment, so it always reports unchanged.
options:
  path:
    description: The lock folder.
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [acquired, renewed, released]
    required: true
  run_id:
    description: This run's id.
    type: str
    required: true
  owner:
    description: Who runs this run (user@controller and command), shown to other runs.
    type: str
    default: ''
  lease:
    description: Seconds the lock stays valid without renewal.
    type: int
    default: 3600
  break_lock:
    description: Remove another run's lock before taking it. Its run id breaks it whatever its lease; C(true)
      breaks it only when its lease has expired or it is unreadable. Empty breaks nothing.
    type: str
    default: ''
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Take the lock
  dsv4.sglang.sglang_rollout_lock:
    path: /run/sglang-dsv4-deploy
    state: acquired
    run_id: "{{ run_id }}"
    owner: root@controller
"""

RETURN = r"""
holder:
  description: The other run holding the lock (owner, run_id, age, expired), when the task failed because of it.
  returned: failure
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["acquired", "renewed", "released"], "required": True},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "lease": {"type": "int", "default": 3600},
            "break_lock": {"type": "str", "default": ""},
        },
        supports_check_mode=False,
    )
    p = module.params
    if p["state"] == "acquired":
        taken, holder, why = sglang_lock.acquire(p["path"], p["run_id"], p["owner"], p["lease"], p["break_lock"])
        if not taken:
            module.fail_json(msg=f"the rollout lock {p['path']}: {why}; nothing was changed", holder=holder)
    elif p["state"] == "renewed":
        holder = sglang_lock.renew(p["path"], p["run_id"], p["lease"])
        if holder is not None:
            module.fail_json(msg=sglang_lock.lost_message(p["path"], p["run_id"], holder), holder=holder, lost=True)
    else:
        sglang_lock.release(p["path"], p["run_id"])
    module.exit_json(changed=False)


if __name__ == "__main__":
    main()
