"""Snapshot managed files before a rollout and put them back on rollback (module sglang_snapshot).

`save(SNAPSHOT_DIR, FILES)` copies each file (noting the ones that do not exist), `prune` keeps the newest
snapshots beside it, `restore(SNAPSHOT_DIR)` puts them back and removes the files that did not exist.

Each run saves into its own SNAPSHOT_DIR (named after the run), so a rollback only ever restores the
snapshot of the run that rolls back, never another run's. Snapshots hold credentials: folders are 0700.
Files are read without following links or blocking on FIFOs, and put back through a random name created with
O_EXCL in the same folder, then renamed: root never writes through a link someone planted. After a restore
every file is compared with the snapshot byte for byte, and by mode, owner and group; a difference left makes the
restore fail (SnapshotError). Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"


class SnapshotError(Exception):
    """A file that cannot be saved or put back safely, or a restore that left a difference."""


def _read(path: Path) -> tuple[bytes, os.stat_result] | None:
    """A managed file's bytes and status, without following a link or blocking on a FIFO; None when absent."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise SnapshotError(f"{path} is a symbolic link; refusing to snapshot through it") from None
        raise
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise SnapshotError(f"{path} is not a regular file ({stat.filemode(info.st_mode)})")
        chunks = []
        while chunk := os.read(handle, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), info
    finally:
        os.close(handle)


def _write(path: Path, data: bytes, info: os.stat_result) -> None:
    """Put data at path: a random name made with O_EXCL in the same folder, owner and mode set, then a rename."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            os.fchown(out.fileno(), info.st_uid, info.st_gid)
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def _same_status(now: os.stat_result, kept: os.stat_result) -> bool:
    """Mode, owner and group as the snapshot kept them (a chmod or a chown since is undone too)."""
    return (stat.S_IMODE(now.st_mode), now.st_uid, now.st_gid) == (stat.S_IMODE(kept.st_mode), kept.st_uid, kept.st_gid)


def save(snapshot: Path, files: list[str]) -> dict[str, list[str]]:
    staging = snapshot.with_name(snapshot.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    staging.mkdir(mode=0o700)
    saved, missing, digests = [], [], {}
    for name in files:
        found = _read(Path(name))
        if found is None:
            missing.append(name)
            continue
        data, info = found
        target = staging / "files" / Path(name).relative_to("/")
        target.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        target.write_bytes(data)
        os.chown(target, info.st_uid, info.st_gid)
        os.chmod(target, stat.S_IMODE(info.st_mode))
        saved.append(name)
        digests[name] = hashlib.sha256(data).hexdigest()
    (staging / MANIFEST).write_text(json.dumps({"saved": saved, "missing": missing, "sha256": digests}, indent=2))
    shutil.rmtree(snapshot, ignore_errors=True)
    staging.rename(snapshot)
    return {"saved": saved, "missing": missing}


def prune(snapshot: Path, keep: int) -> list[str]:
    """Remove all but the `keep` newest snapshots in the snapshot's folder (never the given one)."""
    others = [p for p in snapshot.parent.iterdir() if p.is_dir() and (p / MANIFEST).is_file() and p != snapshot]
    others.sort(key=lambda p: (p / MANIFEST).stat().st_mtime, reverse=True)
    removed = others[max(keep - 1, 0) :]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return [str(p) for p in removed]


def restore(snapshot: Path) -> dict[str, list[str]]:
    """Put the snapshot back, then check every file byte for byte; a difference left is an error, never "restored"."""
    manifest = json.loads((snapshot / MANIFEST).read_text())
    restored, removed = [], []
    for name in manifest["saved"]:
        kept = snapshot / "files" / Path(name).relative_to("/")
        data, current = kept.read_bytes(), Path(name)
        try:
            now = _read(current)
        except SnapshotError:
            now = None  # a link or a FIFO planted at the path: replaced by the rename, never written through
        info = kept.stat()
        if now is not None and now[0] == data and _same_status(now[1], info):
            continue
        current.parent.mkdir(parents=True, exist_ok=True)
        _write(current, data, info)
        restored.append(name)
    for name in manifest["missing"]:
        if os.path.lexists(name):
            Path(name).unlink()
            removed.append(name)
    differ = []
    for n in manifest["saved"]:
        kept = snapshot / "files" / Path(n).relative_to("/")
        now = _read(Path(n))
        if now is None or now[0] != kept.read_bytes() or not _same_status(now[1], kept.stat()):
            differ.append(n)
    differ += [n for n in manifest["missing"] if os.path.lexists(n)]
    if differ:
        raise SnapshotError(f"after the restore these still differ from the snapshot: {', '.join(differ)}")
    return {"restored": restored, "removed": removed}
