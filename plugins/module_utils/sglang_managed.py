"""Writing exactly a role's part of the host's desired state: root-owned files, never through a link or into a folder
another account could have planted. Used by the modules that write it (sglang_managed_files, and
sglang_generation_config for the files of the sampling defaults' role), each after its fence."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import (
    UnsafeFileError,
    read_regular,
    unsafe_folder,
    write_atomic,
)


class RefusedError(Exception):
    """A file or folder that may not be written: the message names it. Nothing after it was written."""


def is_right(path: str, content: str, mode: int) -> bool:
    try:
        current = read_regular(path)
    except UnsafeFileError:
        return False  # a link or a FIFO at the path: replaced, never followed
    if current is None or current != content.encode():
        return False
    info = os.lstat(path)
    return stat.S_IMODE(info.st_mode) == mode and (info.st_uid, info.st_gid) == (0, 0)


def planned_files(files: list[dict[str, Any]], into: str | None) -> list[tuple[str, int, Any]]:
    """(path, mode, content) of each file; a path that is not absolute is refused before anything is written."""
    planned = []
    for item in files:
        if not isinstance(item.get("path"), str) or not os.path.isabs(item["path"]):
            raise RefusedError(f"every file needs an absolute path, got {item.get('path')!r}")
        path = os.path.join(into, os.path.basename(item["path"])) if into else item["path"]
        planned.append((path, int(str(item.get("mode", "0644")), 8), item.get("content")))
    return planned


def _make_folders(directories: list[dict[str, Any]], check_mode: bool) -> tuple[list[str], dict[str, int]]:
    made, modes = [], {}
    for folder in directories:
        path, mode = folder["path"], int(str(folder["mode"]), 8)
        modes[path] = mode
        missing, nearest = [], path
        while not os.path.lexists(nearest):
            missing.append(nearest)
            nearest = os.path.dirname(nearest)
        if missing:
            # The nearest folder that exists must be safe before anything is made inside it.
            why = unsafe_folder(nearest)
            if why:
                raise RefusedError(f"refusing to make {path}: {why}")
        for part in reversed(missing):
            made.append(part)
            if not check_mode:
                os.mkdir(part, mode if part == path else 0o755)
                os.chown(part, 0, 0)
                os.chmod(part, mode if part == path else 0o755)
    return made, modes


def write_files(
    planned: list[tuple[str, int, Any]],
    directories: list[dict[str, Any]],
    check_mode: bool,
    fence: Callable[[], None],
) -> dict[str, Any]:
    """Make the host hold exactly the `planned` files (planned_files; a null content: the file must not exist), after
    making `directories`; `fence` is called before the first write (it fails the call when this run no longer holds
    the lock). Returns {changed, written, removed}; raises RefusedError before writing into an unsafe folder."""
    if not check_mode:
        # The first write of this call is a folder or a file: the lock is checked before either.
        fence()
    made, modes = _make_folders(directories, check_mode)
    # Every folder written into is checked before any file is written: one refused folder changes nothing.
    for folder in sorted({os.path.dirname(path) for path, _mode, _content in planned} | set(made)):
        why = None if check_mode and folder in made else unsafe_folder(folder)
        if why:
            raise RefusedError(f"refusing to write into {folder}: {why}")
    # A folder of the layout keeps its mode (the credentials' stays root-only).
    for path, mode in modes.items():
        if os.path.isdir(path) and stat.S_IMODE(os.lstat(path).st_mode) != mode:
            made.append(path)
            if not check_mode:
                os.chmod(path, mode)
    written, removed = [], []
    for path, mode, content in planned:
        if content is None:
            if os.path.lexists(path):
                removed.append(path)
                if not check_mode:
                    os.unlink(path)
        elif not is_right(path, str(content), mode):
            written.append(path)
            if not check_mode:
                write_atomic(path, str(content), mode=mode)
                os.chown(path, 0, 0)
    return {"changed": bool(written or removed or made), "written": written, "removed": removed}
