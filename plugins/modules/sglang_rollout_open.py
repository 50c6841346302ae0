#!/usr/bin/python
"""Ansible module: open a host's apply in one call: take the rollout lock, snapshot, read the host under the lock."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_rollout_open
short_description: Take the rollout lock, snapshot what the run may change and read the host again, in one call
version_added: 0.9.0
description:
  - The first host-side call of a host's apply (one module run where there were three). In order, on the host
    and without a round trip between them
  - 1. Takes the rollout lock O(lock) (as M(dsv4.sglang.sglang_rollout_lock) C(state=acquired) does). A run that
    cannot take it fails here, C(locked=false), and has changed nothing.
  - 2. Saves this run's own snapshot of O(snapshot.files) under O(snapshot.path) and prunes the older ones down
    to O(snapshot.keep) (as M(dsv4.sglang.sglang_snapshot) C(state=saved) does); a rollback puts back only this.
  - 3. Reads the host's whole state and plan under the lock, as M(dsv4.sglang.sglang_host_state) does, with the
    same options.
  - A failure after the lock was taken returns C(locked=true) (the caller rolls back what this run snapshotted and
    releases the lock). The lock and the snapshot are bookkeeping, not a change of the deployment, so it always
    reports unchanged.
  - Its lab fault points (O(lab_fault)) are C(after_lock) and C(after_snapshot).
extends_documentation_fragment:
  - dsv4.sglang.host_read
  - dsv4.sglang.lab_fault
options:
  lock:
    description: The lock to take.
    type: dict
    required: true
    suboptions:
      path:
        description: The lock folder.
        type: path
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
        description: Remove another run's lock first (its run id; or C(true) for an expired or unreadable one).
        type: str
        default: ''
  snapshot:
    description: This run's snapshot.
    type: dict
    required: true
    suboptions:
      path:
        description: The snapshot's folder (one per run).
        type: path
        required: true
      files:
        description: Every file the rollout may change.
        type: list
        elements: path
        default: []
      keep:
        description: Snapshots kept in the folder's parent, this one included.
        type: int
        default: 5
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Open this host's apply
  dsv4.sglang.sglang_rollout_open:
    lock: {path: /run/sglang-dsv4-deploy, run_id: "{{ run_id }}", owner: root@controller, lease: 900}
    snapshot: {path: "/var/lib/sglang-dsv4/snapshots/{{ run_id }}", files: [/etc/sglang-dsv4/prefill.env]}
    files: []
    generation_config: {path: /srv/models/DeepSeek-V4-Flash/generation_config.json, sampling: {temperature: 0.6}}
    units: []
    record_dir: /run/sglang-dsv4
    lock_path: /run/sglang-dsv4-deploy
  register: opened
"""

RETURN = r"""
locked:
  description: Whether this run holds the lock now (also on failure).
  returned: always
  type: bool
holder:
  description: The other run holding the lock, when the lock could not be taken because of it.
  returned: failure
  type: dict
snapshot:
  description: C(saved) and C(missing) files, and C(pruned) snapshots.
  returned: success
  type: dict
state:
  description: What M(dsv4.sglang.sglang_host_state) returns (C(plan), C(units), C(proof), C(lock), ...).
  returned: success
  type: dict
"""

from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lab_fault, sglang_lock, sglang_snapshot
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_host_read import READ_SPEC, read

POINTS = ("after_lock", "after_snapshot")


class Locked:
    """The module as the read sees it, once this run holds the lock: every failure says so."""

    def __init__(self, module: AnsibleModule) -> None:
        self._module = module

    def fail_json(self, **kwargs: Any) -> None:
        self._module.fail_json(locked=True, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


ARGUMENT_SPEC = {
    **READ_SPEC,
    "lock": {
        "type": "dict",
        "required": True,
        "options": {
            "path": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "lease": {"type": "int", "default": 3600},
            "break_lock": {"type": "str", "default": ""},
        },
    },
    "snapshot": {
        "type": "dict",
        "required": True,
        "options": {
            "path": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "path", "default": []},
            "keep": {"type": "int", "default": 5},
        },
    },
    "lab_fault": {"type": "dict"},
}


def open_apply(module: Any) -> None:
    """Lock, snapshot, read; exits through the module (exit_json or fail_json)."""
    p = module.params
    lock, snapshot, fault = p["lock"], p["snapshot"], p["lab_fault"]
    if snapshot["keep"] < 1:
        module.fail_json(msg=f"snapshot.keep must be at least 1, got {snapshot['keep']}", locked=False)
    refused = sglang_lab_fault.refused(fault, POINTS)
    if refused:
        module.fail_json(msg=f"{refused}; nothing was changed", locked=False)
    taken, holder, why = sglang_lock.acquire(
        lock["path"], lock["run_id"], lock["owner"], lock["lease"], lock["break_lock"]
    )
    if not taken:
        module.fail_json(
            msg=f"the rollout lock {lock['path']}: {why}; nothing was changed", holder=holder, locked=False
        )
    locked = Locked(module)
    sglang_lab_fault.at(fault, "after_lock", lambda msg: locked.fail_json(msg=msg))
    folder = Path(snapshot["path"])
    try:
        saved = sglang_snapshot.save(folder, snapshot["files"])
        saved["pruned"] = sglang_snapshot.prune(folder, snapshot["keep"])
    except (sglang_snapshot.SnapshotError, OSError, ValueError) as error:
        locked.fail_json(msg=f"snapshot {folder}: {error}")
    sglang_lab_fault.at(fault, "after_snapshot", lambda msg: locked.fail_json(msg=msg))
    try:
        state = read(locked, {name: p[name] for name in READ_SPEC})
    except Exception as error:  # a failed read under the lock still says that this run holds it
        locked.fail_json(msg=f"reading the host under the lock failed: {error!r}")
    result = {"changed": False, "locked": True, "snapshot": saved, "state": state}
    if "diff" in state:
        result["diff"] = state.pop("diff")
    module.exit_json(**result)


def main() -> None:
    open_apply(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=False))


if __name__ == "__main__":
    main()
