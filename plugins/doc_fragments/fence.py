"""The fence option, as every module that writes, restarts or rolls back takes it (module_utils/sglang_lock.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  fence:
    description:
      - The rollout lock this run holds (C(path), C(run_id), C(lease)). Checked, and its lease renewed, in the same
        call before each step that writes, restarts, drains or puts back; a run that lost the lock fails with
        C(lost=true) and touches nothing more on the host.
      - Without it the module acts without a lock (a role used on its own).
    type: dict
"""
