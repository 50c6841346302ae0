"""A store of the controller's own, kept between runs next to Ansible's temporary files (local_tmp): the folders the
preload keeps module payloads and compiled templates in (plugins/callback/sglang_preload.py,
plugins/plugin_utils/sglang_template_cache.py). Only a folder of this user's that no one else may write is used, and
only files of this user's that no one else may write are read from it: nothing another account could have planted.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import time


def private_folder(path: pathlib.Path) -> bool:
    """A real folder (not a link), this user's own, that no one else may write."""
    info = os.lstat(path)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def private_file(info: os.stat_result) -> bool:
    """The stat (lstat, or fstat of an open file) of a regular file of this user's that no one else may write."""
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


# A store no run has opened for this long is of sources or versions no longer used: removed by the next run that
# opens another. Not at once: two checkouts (or two versions of Ansible) that run side by side on one controller
# would otherwise remove each other's store at every run, and each run would build everything again.
STALE_SECONDS = 24 * 3600


def open_store(parent: pathlib.Path, prefix: str, key: str) -> pathlib.Path:
    """The store parent/prefix+key, made if missing and marked as used now; the stores of other keys that no run has
    opened for STALE_SECONDS removed. Raises OSError where parent or the store is not a private folder."""
    if not private_folder(parent):
        raise OSError(f"{parent} is not a private folder of this user's")
    store = parent / f"{prefix}{key}"
    store.mkdir(mode=0o700, exist_ok=True)
    if not private_folder(store):
        raise OSError(f"{store} is not a private folder of this user's")
    os.utime(store)
    stale = time.time() - STALE_SECONDS
    for old in parent.glob(f"{prefix}*"):
        if old != store and private_folder(old) and os.lstat(old).st_mtime < stale:
            shutil.rmtree(old, ignore_errors=True)
    return store
