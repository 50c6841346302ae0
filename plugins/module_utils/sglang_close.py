"""The close of a host's apply, in the call that proved it (module sglang_ask's `close`): this run's result for the
monitoring, then the release of this run's rollout lock.

Fenced: a run that no longer holds the lock writes nothing. The result goes into the layout's status folder, made
(root's, 0755) if missing under a parent only root can write, and never written through a link or into a folder
another account could have planted. Only a lock this run holds is released.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import unsafe_folder, write_atomic

RESULT = "rollout.json"


def close(module: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Write spec's `result` (with the host's time) as RESULT in `status_dir`, then release `lock` ({path, run_id});
    {result_file, released}. Fails through the module, before anything is written, when the fence or a folder
    refuses."""
    sglang_lock.fenced(module)
    folder = spec["status_dir"]
    if not os.path.lexists(folder):
        why = unsafe_folder(os.path.dirname(folder.rstrip("/")) or "/")
        if why:
            module.fail_json(msg=f"refusing to make {folder}: {why}")
        os.mkdir(folder, 0o755)
        os.chown(folder, 0, 0)
        os.chmod(folder, 0o755)  # noqa: S103 - root's, read by the monitoring
    why = unsafe_folder(folder)
    if why:
        module.fail_json(msg=f"refusing to write into {folder}: {why}")
    path = os.path.join(folder, RESULT)
    write_atomic(path, json.dumps({**spec["result"], "time": time.time()}, sort_keys=True), mode=0o644)
    os.chown(path, 0, 0)
    lock = spec["lock"]
    return {"result_file": path, "released": sglang_lock.release(lock["path"], lock["run_id"])}
