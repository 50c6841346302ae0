"""The host's preconditions the plan checks before anything changes: who may write the model directory and
generation_config.json, the model's files, and as many GPUs as the topology uses. Each error names the variable."""

from __future__ import annotations

import os
import pwd
import stat
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_commands


def foreign_writers(path: str, users: list[str]) -> str | None:
    """Why an account other than root and the service users could write path (or plant a file in it), or None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    allowed_uids, allowed_gids = {0}, {0}
    for user in users:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            continue
        allowed_uids.add(entry.pw_uid)
        allowed_gids.add(entry.pw_gid)
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if info.st_uid not in allowed_uids:
        return f"is owned by uid {info.st_uid}"
    if info.st_mode & stat.S_IWOTH:
        return "is writable by every account"
    if info.st_mode & stat.S_IWGRP and info.st_gid not in allowed_gids:
        return f"is writable by group gid {info.st_gid}"
    return None


def check_errors(checks: dict[str, Any]) -> list[str]:
    """Every precondition the host fails (checks: model_path, writers, model_files, gpus)."""
    errors = []
    model_path = checks.get("model_path")
    if model_path:
        # Root writes generation_config.json there (merge, heal, rollback): nobody else may plant files in it.
        writers = list(checks.get("writers") or [])
        for path, follow in ((model_path, True), (os.path.join(model_path, "generation_config.json"), False)):
            why = foreign_writers(os.path.realpath(path) if follow else path, writers)
            if why:
                errors.append(
                    f"sglang_common_model_path: {path} {why}; only root and {', '.join(writers) or 'root'} may write"
                    " the model directory and generation_config.json (chown root and chmod go-w)"
                )
    for name in checks.get("model_files") or []:
        if model_path and not os.path.isfile(os.path.join(model_path, name)):
            errors.append(f"sglang_common_model_path={model_path} does not hold {name}: put the model there first")
    gpus = int(checks.get("gpus") or 0)
    if gpus:
        rc, out, err = sglang_commands.bounded(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"])
        found = len(out.split()) if rc == 0 else 0
        if rc == sglang_commands.TIMED_OUT:
            errors.append(f"{err} (sglang_services_check_gpu_count): the driver is wedged or the GPUs are hung")
        elif found != gpus:
            errors.append(
                f"sglang_services_topology uses {gpus} GPUs but nvidia-smi reports {found} (rc {rc});"
                " set sglang_services_check_gpu_count=false only for a host without NVIDIA tools"
            )
    return errors
