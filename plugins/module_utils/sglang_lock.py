"""The per-host rollout lock: a folder made with an atomic mkdir directly under /run, holding a lease.

Only root can create anything in /run (mode 0755), so no other account can take the lock first, plant a link or
a FIFO in its place, or edit its owner file. The holder writes `owner.json` (run id, who, since when, lease end)
and renews the lease before every step that writes, restarts or rolls back: the run id is the fencing token, and
a run whose lease is gone (broken by another run) stops at its next step and touches nothing more.

A lock is read without following links and without blocking; anything but a small regular owner file with the
expected fields is reported as an unreadable lock whose holder is unknown, never as a traceback or a hang.
A live lease is broken only by naming its run id; a plain break (`true`) clears an expired or unreadable lock.
Every change of the lock (take, break, renew, release) happens under an exclusive flock of a root-only file beside
it, so that two runs breaking the same expired lock at once cannot both win: the second sees the first's live lease.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from typing import Any

OWNER = "owner.json"
MAX_OWNER_BYTES = 4096
# An unreadable lock, or one taken an instant ago whose owner file is not written yet, counts as held this long.
UNREADABLE_GRACE = 60


def _unsafe_parent(path: str) -> str | None:
    """Why the lock's folder is not root's alone, or None."""
    parent = os.path.dirname(path.rstrip("/")) or "/"
    info = os.lstat(parent)
    if stat.S_ISLNK(info.st_mode) or info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{parent} is not a folder only root can write (mode {stat.filemode(info.st_mode)}, uid {info.st_uid})"
    return None


def _unreadable(why: str, since: float, now: float) -> dict[str, Any]:
    return {
        "run_id": None,
        "owner": f"unknown (unreadable lock: {why})",
        "taken": since,
        "lease_until": since + UNREADABLE_GRACE,
        "unreadable": True,
    }


def _read_owner(path: str, now: float) -> dict[str, Any]:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return _unreadable(f"{path} is not a folder ({stat.filemode(info.st_mode)})", info.st_mtime, now)
    if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return _unreadable(f"{path} is not root's alone ({stat.filemode(info.st_mode)})", info.st_mtime, now)
    owner_path = os.path.join(path, OWNER)
    try:
        handle = os.open(owner_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        # Taken an instant ago (owner not written yet), or left empty by a run killed at that instant.
        return _unreadable("no owner file", info.st_mtime, now)
    except OSError as error:
        return _unreadable(f"{OWNER}: {error.strerror}", info.st_mtime, now)
    try:
        owner_info = os.fstat(handle)
        if not stat.S_ISREG(owner_info.st_mode) or owner_info.st_size > MAX_OWNER_BYTES:
            return _unreadable(f"{OWNER} is not a small regular file", info.st_mtime, now)
        raw = os.read(handle, MAX_OWNER_BYTES + 1)
    finally:
        os.close(handle)
    try:
        owner = json.loads(raw)
    except ValueError:
        return _unreadable(f"{OWNER} is not JSON", info.st_mtime, now)
    if not (
        isinstance(owner, dict)
        and isinstance(owner.get("run_id"), str)
        and isinstance(owner.get("owner", ""), str)
        and all(
            isinstance(owner.get(k), (int, float)) and not isinstance(owner.get(k), bool)
            for k in ("taken", "lease_until")
        )
    ):
        return _unreadable(f"{OWNER} lacks run_id, taken or lease_until", info.st_mtime, now)
    owner["unreadable"] = False
    return owner


def inspect(path: str, now: float | None = None) -> dict[str, Any] | None:
    """The lock's holder, age and lease, or None when nobody holds it."""
    now = time.time() if now is None else now
    if not os.path.lexists(path):
        return None
    holder = _read_owner(path, now)
    holder["age"] = int(now - float(holder.get("taken", now)))
    holder["expired"] = now > float(holder.get("lease_until", 0))
    return holder


def describe(holder: dict[str, Any]) -> str:
    if holder.get("unreadable"):
        return f"{holder.get('owner')}; holder unknown"
    lease = "its lease has EXPIRED (the run was probably killed)" if holder["expired"] else "its lease is live"
    return f"held by {holder.get('owner')} (run {holder.get('run_id')}) for {holder['age']} s; {lease}"


def may_break(holder: dict[str, Any] | None, break_lock: str) -> tuple[bool, str]:
    """Whether `break_lock` (empty, "true", or a run id) may remove this holder's lock, and why not."""
    if holder is None or not break_lock:
        return holder is None, "" if holder is None else describe(holder)
    if break_lock == holder.get("run_id"):
        return True, ""
    if break_lock == "true" and (holder.get("expired") or holder.get("unreadable")):
        return True, ""
    if break_lock == "true":
        return False, (
            f"{describe(holder)}: a live lease is broken only by naming its run: sglang_rollout_break_lock="
            f"{holder.get('run_id')}"
        )
    return False, f"{describe(holder)}: sglang_rollout_break_lock={break_lock} does not name that run"


@contextlib.contextmanager
def _serialized(path: str) -> Iterator[None]:
    """Hold the exclusive flock of PATH.guard (a root-only regular file, never opened through a link) while the
    lock is read and changed. The kernel drops it when the holder dies, so a killed run never leaves it held."""
    guard = path.rstrip("/") + ".guard"
    handle = os.open(guard, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(f"{guard} is not a regular file of this account")
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def lost_message(path: str, run_id: str, holder: dict[str, Any]) -> str:
    """What a run that lost the lock says, at the step that found out."""
    return (
        f"this run (run {run_id}) no longer holds the rollout lock {path}: it is now held by {holder.get('owner')}"
        f" (run {holder.get('run_id')}); this run stops here and touches nothing more on this host"
    )


def fenced(module: Any) -> None:
    """In a module that writes: fail, touching nothing, when this run no longer holds the host's rollout lock given
    as its `fence` parameter (path, run_id, lease), and renew the lease when it does."""
    fence = module.params.get("fence")
    if not fence:
        return
    holder = renew(fence["path"], fence["run_id"], int(fence["lease"]))
    if holder is not None:
        module.fail_json(msg=lost_message(fence["path"], fence["run_id"], holder), holder=holder, lost=True)


def _remove(path: str) -> None:
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)


def _write_owner(path: str, entry: dict[str, Any]) -> None:
    temporary = os.path.join(path, f".{OWNER}.{os.getpid()}")
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(entry, out)
    os.replace(temporary, os.path.join(path, OWNER))


def acquire(
    path: str, run_id: str, owner: str, lease: int, break_lock: str = ""
) -> tuple[bool, dict[str, Any] | None, str]:
    """(True, None, "") when this run now holds the lock; (False, holder, why) when it may not take it."""
    unsafe = _unsafe_parent(path)
    if unsafe:
        return False, None, unsafe
    with _serialized(path):
        return _acquire(path, run_id, owner, lease, break_lock)


def _acquire(
    path: str, run_id: str, owner: str, lease: int, break_lock: str
) -> tuple[bool, dict[str, Any] | None, str]:
    holder = inspect(path)
    if holder is not None and holder.get("run_id") == run_id:
        return True, None, ""
    if holder is not None:
        allowed, why = may_break(holder, break_lock)
        if not allowed:
            return False, holder, why
        _remove(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        holder = inspect(path)
        return False, holder, describe(holder) if holder else "taken and released meanwhile"
    now = time.time()
    _write_owner(path, {"run_id": run_id, "owner": owner, "taken": now, "lease_until": now + lease})
    return True, None, ""


def renew(path: str, run_id: str, lease: int) -> dict[str, Any] | None:
    """Extend this run's lease (the fencing check); returns the holder when this run no longer holds the lock."""
    with _serialized(path):
        return _renew(path, run_id, lease)


def _renew(path: str, run_id: str, lease: int) -> dict[str, Any] | None:
    holder = inspect(path)
    if holder is None or holder.get("run_id") != run_id:
        return holder or {"run_id": None, "owner": "nobody", "age": 0, "expired": False}
    entry = {k: holder[k] for k in ("run_id", "owner", "taken")}
    entry["lease_until"] = time.time() + lease
    _write_owner(path, entry)
    return None


def release(path: str, run_id: str) -> bool:
    """Remove the lock if this run holds it; True when it did."""
    with _serialized(path):
        holder = inspect(path)
        if holder is None or holder.get("run_id") != run_id:
            return False
        _remove(path)
        return True
