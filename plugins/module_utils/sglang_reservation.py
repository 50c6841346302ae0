"""The fleet's step reservations: which hosts each run has chosen for its step, on one host every run reaches.

The capacity guard counts the hosts out of rotation before each step; two runs on different --limits would each
count the other's chosen hosts as serving until their drain. So a run writes the hosts it chose into one file on the
reservation host (sglang_rollout_reservation_host) the moment it chooses them, and every run's count adds the other
runs' reserved hosts to the hosts out of rotation. The write is a compare-and-set: a run reserves only if the file's
version is still the one its choice read, so two runs can never both choose on the same view (the second reads
again, with the first's hosts in it). Each host of a step gives its place back when its step ends there (back in
rotation, or rolled back); a run killed before that holds its hosts until the reservation's lease ends, as the
hosts' own locks do.

The file is a regular file directly under /run (only root can create anything there), written atomically under
the exclusive flock of a root-only guard file beside it, never read or written through a link. An unreadable file
fails every call that needs it, naming the path: the unknown is never "no reservation". Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import (
    UnsafeFileError,
    read_regular,
    unsafe_folder,
    write_atomic,
)

MAX_BYTES = 1 << 22
FIELDS = {"run": str, "owner": str, "step": int, "hosts": list, "taken": (int, float), "until": (int, float)}


class ReservationError(ValueError):
    """The reservations cannot be read or written safely: the message names the path and why."""


def _unsafe(path: str) -> str | None:
    if not os.path.isabs(path) or os.path.normpath(path) != path:
        return f"{path} is not a normalized absolute path"
    return unsafe_folder(os.path.dirname(path))


@contextlib.contextmanager
def serialized(path: str) -> Iterator[None]:
    """Hold the exclusive flock of PATH.guard (a root-only regular file, never opened through a link) while the
    reservations are read and changed. The kernel drops it when the holder dies."""
    why = _unsafe(path)
    if why:
        raise ReservationError(f"the step reservations {path}: {why}")
    guard = path + ".guard"
    try:
        handle = os.open(guard, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise ReservationError(f"the step reservations' guard {guard}: {error.strerror}") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise ReservationError(f"the step reservations' guard {guard} is not a regular file of this account")
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _entry_errors(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return [f"an entry is not a mapping: {entry!r}"]
    errors = [
        f"entry field {name!r} is missing or not {kind}"
        for name, kind in FIELDS.items()
        if not isinstance(entry.get(name), kind) or isinstance(entry.get(name), bool)
    ]
    if not errors and not all(isinstance(host, str) and host for host in entry["hosts"]):
        errors.append(f"entry hosts {entry['hosts']!r} are not host names")
    return errors


def load(path: str) -> dict[str, Any]:
    """{'version': n, 'entries': [...]}; an absent file is version 0 with no entries. Anything else unreadable
    raises ReservationError naming the path (never counted as no reservation)."""
    try:
        raw = read_regular(path, limit=MAX_BYTES)
    except (UnsafeFileError, OSError) as error:
        raise ReservationError(f"the step reservations {path} cannot be read: {error}") from None
    if raw is None:
        return {"version": 0, "entries": []}
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise ReservationError(f"the step reservations {path} is not JSON: {error}") from None
    errors = []
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        errors.append("not a mapping with a list of entries")
    elif not isinstance(data.get("version"), int) or isinstance(data["version"], bool) or data["version"] < 0:
        errors.append(f"version {data.get('version')!r} is not a count")
    else:
        for entry in data["entries"]:
            errors += _entry_errors(entry)
    if errors:
        raise ReservationError(
            f"the step reservations {path} cannot be read: {'; '.join(errors)}. Once no rollout is running,"
            " remove the file (it holds only the steps in flight)"
        )
    return data


def _save(path: str, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, sort_keys=True) + "\n", mode=0o600)


def live(data: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """The entries whose lease has not ended (a killed run's reservation ends with its lease)."""
    return [entry for entry in data["entries"] if entry["until"] > now]


def view(data: dict[str, Any], now: float) -> dict[str, Any]:
    """What a run's choice reads: the version, and each live entry with the seconds its lease has left."""
    entries = [{**entry, "left": round(entry["until"] - now)} for entry in live(data, now)]
    return {"version": data["version"], "entries": entries, "now": now}


def read(path: str, now: float | None = None) -> dict[str, Any]:
    """The reservations as they are now. No lock and no write (check mode too): every write replaces the file in one
    rename, so a read sees one version whole; the compare-and-set of reserve() decides under the lock."""
    why = _unsafe(path)
    if why:
        raise ReservationError(f"the step reservations {path}: {why}")
    return view(load(path), time.time() if now is None else now)


def reserve(
    path: str,
    run: str,
    owner: str,
    step: int,
    hosts: list[str],
    version: int,
    lease: int,
    now: float | None = None,
    dead_runs: tuple[str, ...] | list[str] = (),
) -> dict[str, Any]:
    """Add this run's entry for its step, only if the reservations are still at `version` (the one its choice
    read); otherwise change nothing. The entries of `dead_runs` (runs whose lock this run breaks, named dead by the
    operator) go in the same write. Returns the view after it, with `reserved`."""
    now = time.time() if now is None else now
    with serialized(path):
        data = load(path)
        if data["version"] != version:
            return {**view(data, now), "reserved": False}
        entry = {
            "run": run,
            "owner": owner,
            "step": int(step),
            "hosts": list(hosts),
            "taken": now,
            "until": now + lease,
        }
        kept = [e for e in live(data, now) if e["run"] not in dead_runs]
        data = {"version": version + 1, "entries": [*kept, entry]}
        _save(path, data)
        return {**view(data, now), "reserved": True}


def release(path: str, run: str, hosts: list[str] | None = None, now: float | None = None) -> dict[str, Any]:
    """Take `hosts` (all of them when None) out of this run's entries; an entry left without hosts goes, and so do
    entries whose lease ended. Returns the view after it, with `released` (the hosts it gave back)."""
    now = time.time() if now is None else now
    with serialized(path):
        data = load(path)
        released: list[str] = []
        entries = []
        for entry in data["entries"]:
            if entry["run"] == run:
                keep = [h for h in entry["hosts"] if hosts is not None and h not in hosts]
                released += [h for h in entry["hosts"] if h not in keep]
                entry = {**entry, "hosts": keep}
            if entry["hosts"] and entry["until"] > now:
                entries.append(entry)
        if entries != data["entries"]:
            data = {"version": data["version"] + 1, "entries": entries}
            _save(path, data)
        return {**view(data, now), "released": sorted(set(released))}


def reserved_by_others(
    entries: list[dict[str, Any]], run: str, dead_runs: tuple[str, ...] | list[str] = ()
) -> dict[str, str]:
    """host -> why it counts as out of rotation for this run: another run chose it for its step (a run named dead,
    whose lock this run breaks, holds nothing)."""
    out: dict[str, str] = {}
    for entry in entries:
        if entry["run"] == run or entry["run"] in dead_runs:
            continue
        for host in entry["hosts"]:
            out.setdefault(
                host,
                f"reserved by run {entry['run']} ({entry['owner'] or 'owner unknown'}) for its step {entry['step']},"
                f" its lease ends in {entry.get('left', '?')} s",
            )
    return out
