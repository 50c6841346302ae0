#!/usr/bin/python
"""Ansible module: this run's snapshot of the files a rollout may change, and its restore (fenced)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_snapshot
short_description: Save the files a rollout may change into this run's snapshot, or put that snapshot back
description:
  - C(saved) copies each file of O(files) into O(snapshot) (a folder of this run's own, mode 0700), noting the ones
    that do not exist, and keeps the O(keep) newest snapshots beside it. Bookkeeping, so it reports unchanged.
  - C(restored) puts the snapshot back (files byte for byte, with their mode, owner and group; files that did not
    exist are removed), then compares every file with the snapshot and fails on any difference left.
  - Files are never read or written through a link or a FIFO (module_utils/sglang_snapshot.py).
  - With O(fence), the rollout lock is checked and its lease renewed in the same call, before anything is read or
    written; a run that lost the lock fails with C(lost) and touches nothing.
extends_documentation_fragment:
  - dsv4.sglang.fence
options:
  state:
    description: Save or restore.
    type: str
    choices: [saved, restored]
    required: true
  snapshot:
    description: This run's snapshot folder (named after the run id).
    type: path
    required: true
  files:
    description: The files to save (C(saved) only).
    type: list
    elements: path
    default: []
  keep:
    description: How many snapshots to keep beside this one, this one included (C(saved) only).
    type: int
    default: 5
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Snapshot the files this rollout may change
  dsv4.sglang.sglang_snapshot:
    state: saved
    snapshot: /var/lib/sglang-dsv4-rollout/RUN_ID
    files: [/etc/sglang-dsv4/prefill.env]
"""

RETURN = r"""
saved:
  description: The files copied into the snapshot.
  returned: state=saved
  type: list
missing:
  description: The files that did not exist (a restore removes them).
  returned: state=saved
  type: list
restored:
  description: The files put back.
  returned: state=restored
  type: list
removed:
  description: The files removed because they did not exist at the snapshot.
  returned: state=restored
  type: list
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock, sglang_snapshot


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["saved", "restored"], "required": True},
            "snapshot": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "path", "default": []},
            "keep": {"type": "int", "default": 5},
            "fence": {"type": "dict"},
        },
        supports_check_mode=False,
    )
    p = module.params
    if p["keep"] < 1:
        module.fail_json(msg=f"keep must be at least 1, got {p['keep']}")
    sglang_lock.fenced(module)
    snapshot = Path(p["snapshot"])
    try:
        if p["state"] == "saved":
            result = sglang_snapshot.save(snapshot, p["files"])
            result["pruned"] = sglang_snapshot.prune(snapshot, p["keep"])
            module.exit_json(changed=False, **result)
        result = sglang_snapshot.restore(snapshot)
    except (sglang_snapshot.SnapshotError, OSError, ValueError) as error:
        module.fail_json(msg=f"snapshot {snapshot}: {error}")
    module.exit_json(changed=bool(result["restored"] or result["removed"]), **result)


if __name__ == "__main__":
    main()
