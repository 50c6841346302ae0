#!/usr/bin/python
"""Write exactly a role's part of the host's desired state: root-owned files in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_managed_files
short_description: Write exactly the given files, root-owned, and remove those whose content is null
version_added: 0.5.0
description:
  - Each file of O(files) gets exactly its C(content) and C(mode), owned by root, replaced in one
    rename (a temporary file with a random name in the same folder, created exclusively); a file whose content is
    null is removed. A file already right is left alone. This is how the roles write their part of the host's
    desired state (the fact C(sglang_desired), from the action sglang_desired_state).
  - Never writes through a link or into a folder another account could have planted - a link at a file's path is
    replaced itself, never followed; a folder that is a link, is not owned by root, or is writable by group or
    others is refused, naming it, before anything is written.
  - O(directories) are made (root-owned, with their mode, and any missing parent with 0755) when missing, and
    get their mode back when it differs; the folder of every file must exist or be among them.
extends_documentation_fragment:
  - dsv4.sglang.fence
options:
  files:
    description: The files, each with C(path), C(mode) (octal string) and C(content) (null - the file must not
      exist). Other keys (C(role), C(secret), C(unit), ...) are ignored.
    type: list
    elements: dict
    required: true
  directories:
    description: Folders to make first, each with C(path) and C(mode).
    type: list
    elements: dict
    default: []
  into:
    description: Write each file into this folder under the last part of its path instead (staging).
    type: path
  release:
    description:
      - The rollout lock to release once every file is written (C(path), C(run_id)), in the same call; only a lock
        this run holds is removed. The rollout's close (the result of a host's apply, then the lock).
    type: dict
    suboptions:
      path:
        description: The lock folder.
        type: path
        required: true
      run_id:
        description: This run's id.
        type: str
        required: true
attributes:
  check_mode:
    description: Reports what it would write and remove, and changes nothing.
    support: full
  diff_mode:
    description: No diff (the files may hold keys); the plan shows what differs.
    support: none
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Install the managed defaults and the helper set
  dsv4.sglang.sglang_managed_files:
    files: "{{ sglang_desired.files | selectattr('role', 'eq', 'genconfig') }}"
"""

RETURN = r"""
released:
  description: Whether O(release) removed this run's lock.
  returned: always
  type: bool
written:
  description: The paths written (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
removed:
  description: The paths removed (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_managed import (
    RefusedError,
    planned_files,
    write_files,
)


def write(module) -> None:
    """Make the host hold exactly the files of module.params, or fail before the first write."""
    p = module.params
    try:
        planned = planned_files(p["files"], p["into"])
        result = write_files(planned, p["directories"], module.check_mode, lambda: sglang_lock.fenced(module))
    except RefusedError as error:
        module.fail_json(msg=str(error), written=[], removed=[])
    release = p.get("release")
    released = bool(release) and not module.check_mode and sglang_lock.release(release["path"], release["run_id"])
    module.exit_json(**result, released=released)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True},
            "directories": {"type": "list", "elements": "dict", "default": []},
            "into": {"type": "path"},
            "release": {
                "type": "dict",
                "options": {"path": {"type": "path", "required": True}, "run_id": {"type": "str", "required": True}},
            },
            "fence": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    write(module)


if __name__ == "__main__":
    main()
