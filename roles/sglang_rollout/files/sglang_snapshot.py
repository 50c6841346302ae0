"""Snapshot managed files before a rollout and put them back on rollback.

    sglang_snapshot.py save SNAPSHOT_DIR [--keep N] FILE...   copy each FILE (noting the ones that do not exist);
                                                             keep the N newest snapshots beside it
    sglang_snapshot.py restore SNAPSHOT_DIR                    put them back; files that did not exist are removed

Each run saves into its own SNAPSHOT_DIR (named after the run), so a rollback only ever restores the
snapshot of the run that rolls back, never another run's. Snapshots hold credentials: folders are 0700.

Prints one JSON object: {"restored": [...], "removed": [...]} (restore) or {"saved": [...], "missing": [...]}.
Run on the host by Ansible's script module; standard library only.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import sys
from pathlib import Path

MANIFEST = "manifest.json"


def save(snapshot: Path, files: list[str]) -> dict[str, list[str]]:
    staging = snapshot.with_name(snapshot.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    staging.mkdir(mode=0o700)
    saved, missing = [], []
    for name in files:
        source = Path(name)
        if source.is_file():
            target = staging / "files" / source.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            os.chown(target, source.stat().st_uid, source.stat().st_gid)
            saved.append(name)
        else:
            missing.append(name)
    (staging / MANIFEST).write_text(json.dumps({"saved": saved, "missing": missing}, indent=2))
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
    manifest = json.loads((snapshot / MANIFEST).read_text())
    restored, removed = [], []
    for name in manifest["saved"]:
        kept = snapshot / "files" / Path(name).relative_to("/")
        current = Path(name)
        if current.is_file() and filecmp.cmp(kept, current, shallow=False):
            continue
        current.parent.mkdir(parents=True, exist_ok=True)
        temporary = current.with_name(f".{current.name}.rollback")
        shutil.copy2(kept, temporary)
        os.chown(temporary, kept.stat().st_uid, kept.stat().st_gid)
        os.replace(temporary, current)
        restored.append(name)
    for name in manifest["missing"]:
        if Path(name).exists():
            Path(name).unlink()
            removed.append(name)
    return {"restored": restored, "removed": removed}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "save":
        keep, files = 5, argv[2:]
        if files[:1] == ["--keep"]:
            keep, files = int(files[1]), files[2:]
        result = save(Path(argv[1]), files)
        result["pruned"] = prune(Path(argv[1]), keep)
    elif len(argv) == 2 and argv[0] == "restore":
        result = restore(Path(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
