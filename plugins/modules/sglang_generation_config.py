#!/usr/bin/python
"""Ansible module: set SGLang's sampling defaults in a model's generation_config.json."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_generation_config
short_description: Merge sampling defaults into a model's generation_config.json
description:
  - Sets only the given sampling keys (and C(do_sample) when C(temperature) is given) and keeps every
    other key and value. Creates the file when the model has none.
  - Writes stable JSON (two-space indent, key order kept), so a re-run is byte-identical.
  - Keeps the untouched original once as C(generation_config.json.orig) and a timestamped backup per change.
  - Supports check mode and diff mode.
  - O(files), the role's other files (the managed defaults the units' pre-start healer reads, and its helper set),
    are written in the same call after the file, as M(dsv4.sglang.sglang_managed_files) writes them, so that a change
    of the sampling defaults is one host-side call; the lock is checked before each of the two writes.
extends_documentation_fragment:
  - dsv4.sglang.fence
  - dsv4.sglang.lab_fault
options:
  path:
    description: Path of generation_config.json.
    type: path
    required: true
  sampling:
    description: Keys temperature, top_p, top_k, min_p, repetition_penalty; a null value leaves the key alone.
    type: dict
    required: true
  allow_greedy:
    description: Accept temperature 0.
    type: bool
    default: false
  backup:
    description: Keep a timestamped copy of the file before each change.
    type: bool
    default: true
  files:
    description:
      - Files written in the same call after the merge, each with C(path), C(mode) (octal string) and C(content)
        (null - the file must not exist); root-owned, never through a link or into a folder another account could
        have planted (as M(dsv4.sglang.sglang_managed_files)). Other keys are ignored.
      - Its lab fault point C(after_generation_config) lies between the file's write and these.
    type: list
    elements: dict
    default: []
  directories:
    description: Folders made first for O(files), each with C(path) and C(mode).
    type: list
    elements: dict
    default: []
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Temperature 0.6 and top_p 0.95 as the model's defaults, every other key kept
  dsv4.sglang.sglang_generation_config:
    path: /srv/models/DeepSeek-V4-Flash/generation_config.json
    sampling:
      temperature: 0.6
      top_p: 0.95
      top_k: null
"""

RETURN = r"""
backup_file:
  description: The timestamped backup made by this change.
  returned: changed and backup
  type: str
orig_file:
  description: Path of the kept original.
  returned: always
  type: str
applied:
  description: The managed sampling keys after the change.
  returned: always
  type: dict
written:
  description: The paths of O(files) written (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
removed:
  description: The paths of O(files) removed (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lab_fault, sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import UnsafeFileError, load, write_atomic
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_managed import RefusedError, planned_files, write_files
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    SAMPLING_KEYS,
    merge,
    render,
    validate,
)

# The lab fault matrix's point inside this call (module_utils/sglang_lab_fault.py): the file written, not yet the
# managed defaults.
POINTS = ("after_generation_config",)


def apply(module) -> None:
    """Merge, then write the role's other files; exits through the module (exit_json or fail_json)."""
    path, sampling, fault = module.params["path"], module.params["sampling"], module.params["lab_fault"]
    errors = validate(sampling, module.params["allow_greedy"])
    planned = []
    try:
        # Planned (and a bad path refused) before anything is written.
        planned = planned_files(module.params["files"], None)
    except RefusedError as error:
        errors.append(str(error))
    refused = sglang_lab_fault.refused(fault, POINTS)
    if refused:
        errors.append(refused)
    if errors:
        module.fail_json(msg="; ".join(errors))
    if not os.path.isdir(os.path.dirname(path)):
        module.fail_json(msg=f"model directory {os.path.dirname(path)} does not exist")
    try:
        config, before = load(path)
    except UnsafeFileError as error:
        module.fail_json(msg=f"{error}: replace it with a regular file (sglang_common_model_path)")
    except ValueError as error:
        module.fail_json(msg=f"{path} is not valid JSON: {error}")
    after = render(merge(config or {}, sampling))
    orig = path + ".orig"
    result = {
        "changed": after != before,
        "path": path,
        "orig_file": orig,
        "applied": {key: sampling[key] for key in SAMPLING_KEYS if sampling.get(key) is not None},
        "diff": {"before": before or "", "after": after, "before_header": path, "after_header": path},
    }
    if not module.check_mode:
        sglang_lock.fenced(module)
    if result["changed"] and not module.check_mode:
        # Every write goes through a random name made with O_EXCL in the same folder, then a rename: never
        # through a link that someone planted at the original's or the backup's name.
        if before is not None and not os.path.lexists(orig):
            write_atomic(orig, before, like=path)
        if before is not None and module.params["backup"]:
            backup = f"{path}.{os.getpid()}.{time.strftime('%Y-%m-%d@%H:%M:%S')}~"
            write_atomic(backup, before, like=path)
            result["backup_file"] = backup
        write_atomic(path, after, like=path)
    sglang_lab_fault.at(fault, "after_generation_config", lambda msg: module.fail_json(msg=msg, **result))
    try:
        # The lock is checked again (and its lease renewed) before these writes, as before the file's.
        files = write_files(
            planned, module.params["directories"], module.check_mode, lambda: sglang_lock.fenced(module)
        )
    except RefusedError as error:
        module.fail_json(msg=str(error), **result)
    result.update(written=files["written"], removed=files["removed"], changed=result["changed"] or files["changed"])
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "sampling": {"type": "dict", "required": True},
            "allow_greedy": {"type": "bool", "default": False},
            "backup": {"type": "bool", "default": True},
            "files": {"type": "list", "elements": "dict", "default": []},
            "directories": {"type": "list", "elements": "dict", "default": []},
            "fence": {"type": "dict"},
            "lab_fault": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    apply(module)


if __name__ == "__main__":
    main()
