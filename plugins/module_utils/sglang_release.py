"""Runtime releases: one virtual environment per pinned package list, named by the list's digest.

A release is built from a lock file (`name==version --hash=sha256:...` per package, as `uv pip compile
--generate-hashes` or `pip-compile --generate-hashes` write it) into RELEASES_DIR/ID, where ID is the digest of
the lock's requirements and build options. Its manifest (sglang-release.json) is written last: a directory
without one is an unfinished build. The units run RELEASE/bin/python, so a new release is a new unit, and a
rollback that restores the unit runs the old release again, which pruning always keeps.

Shared by the controller (the lock's checks and the release id, filter sglang_release) and the hosts (the
build and pruning, module sglang_release; the plan's read of the releases and of the room for a new one,
`read_releases` and `releases_found`, module sglang_host_state).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import DISTRIBUTIONS, distributions

MANIFEST = "sglang-release.json"
LOCK = "sglang-release.lock"
# What `python -m venv` puts into every environment: not part of any lock, never drift.
SEEDED = frozenset({"pip", "setuptools", "wheel"})
# The packages a release is named by in the plan, when it holds them.
HEADLINE = ("sglang", "sglang-router", "smg")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._ -]+\])?==([A-Za-z0-9.+!_-]+)$")
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares it (Foo_Bar, foo-bar and foo.bar are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str, variable: str = "lock") -> tuple[dict[str, str], list[str], list[str]]:
    """The lock's pins (canonical name -> version), what is wrong with it (each naming variable and line), and
    its requirements one per line, whitespace and comments aside (what the release id digests)."""
    pins: dict[str, str] = {}
    errors: list[str] = []
    logical: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            logical.append((start, pending.strip()))
        pending = ""
    for number, line in logical:
        if any(ord(c) < 32 or ord(c) == 127 for c in line):
            errors.append(f"{variable}: line {number} holds a control character")
            continue
        requirement, _sep, marker = line.partition(";")
        words = requirement.split()
        if words and words[0].startswith("-"):
            errors.append(
                f"{variable}: line {number} is a pip option ({words[0]}); the index and the wheelhouse are set by"
                " sglang_runtime_pip_index_url and sglang_runtime_wheelhouse, not in the lock"
            )
            continue
        hashes = [w for w in words[1:] + marker.split() if w.startswith("--hash")]
        rest = [w for w in words[1:] if not w.startswith("--hash")]
        match = _PIN.match(words[0]) if words else None
        if not match or rest:
            errors.append(f"{variable}: line {number} ({line[:80]!r}) is not an exact pin NAME==VERSION")
            continue
        if not hashes or not all(_HASH.match(h) for h in hashes):
            errors.append(f"{variable}: line {number} ({match.group(1)}) has no --hash=sha256:<64 hex digits>")
            continue
        name = canonical(match.group(1))
        if name in pins and pins[name] != match.group(3):
            errors.append(f"{variable}: {name} is pinned twice ({pins[name]} and {match.group(3)})")
        pins[name] = match.group(3)
    if not logical:
        errors.append(f"{variable}: the lock file pins no package")
    return dict(sorted(pins.items())), errors, sorted(" ".join(line.split()) for _number, line in logical)


def release_options(no_deps: bool, no_compile: bool = False) -> dict[str, bool]:
    """The build options a release is named by. The lab's no_compile is named only where it is set, so that every
    release built before it existed keeps its name (and is not built again)."""
    return {"no_deps": bool(no_deps), **({"no_compile": True} if no_compile else {})}


def release_id(requirements: list[str], options: dict[str, Any]) -> str:
    """The release's name: the digest of its requirements (order aside) and of its build options."""
    body = "\n".join(sorted(requirements)) + "\n" + json.dumps(options, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def describe(packages: dict[str, str]) -> str:
    """A release in a plan line: its headline packages, or how many it pins."""
    named = [f"{name} {packages[name]}" for name in HEADLINE if name in packages]
    return ", ".join(named) or f"{len(packages)} packages"


def installed(prefix: str) -> dict[str, str]:
    """canonical name -> version of every distribution in a venv (from its .dist-info folders), seeded ones aside."""
    found = {canonical(dist): version for dist, version in distributions(prefix).items()}
    return dict(sorted((name, version) for name, version in found.items() if name not in SEEDED))


def drift(pins: dict[str, str], found: dict[str, str]) -> list[str]:
    """How a release's installed distributions differ from its lock: changed by hand after the build."""
    return [
        f"{name} {pins.get(name, '-')} in the lock, {found.get(name, '-')} installed"
        for name in sorted(set(pins) | set(found))
        if pins.get(name) != found.get(name)
    ]


def read_manifest(path: str) -> dict[str, Any] | None:
    """A release's manifest, or None: absent, unfinished, or not a root-owned regular file."""
    manifest = os.path.join(path, MANIFEST)
    try:
        info = os.lstat(manifest)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != 0 or info.st_size > 1 << 20:
            return None
        with open(manifest, encoding="utf-8") as handle:
            entry = json.load(handle)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("id") == os.path.basename(path) else None


def unsafe_dir(path: str) -> str | None:
    """Why root must not build or remove releases under path (a link, not root's, writable by others), or None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != 0:
        return f"is owned by uid {info.st_uid}, not root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by accounts other than root"
    return None


def free_bytes(path: str) -> int:
    """Free space for root at path, or at its nearest existing parent."""
    while not os.path.exists(path) and path not in ("", "/"):
        path = os.path.dirname(path)
    info = os.statvfs(path or "/")
    return info.f_bavail * info.f_frsize


def releases_in(directory: str) -> dict[str, dict[str, Any]]:
    """id -> manifest of every finished release under directory."""
    found = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        manifest = read_manifest(os.path.join(directory, name))
        if manifest:
            found[name] = manifest
    return found


def prunable(releases: dict[str, dict[str, Any]], keep: int, protected: set[str]) -> list[str]:
    """The releases to remove: the oldest beyond `keep`, never a protected one (running, desired, rollback's)."""
    newest_first = sorted(releases, key=lambda rid: (releases[rid].get("built_at") or 0, rid), reverse=True)
    kept = [rid for rid in newest_first if rid in protected]
    others = [rid for rid in newest_first if rid not in protected]
    room = max(keep - len(kept), 0)
    return sorted(others[room:])


# What the plan reads of the releases on a host (module sglang_host_state).
def read_releases(
    releases: list[dict], records: dict[str, dict | None], groups: dict[str, str]
) -> tuple[list[dict], list[str]]:
    """Each desired release as the host has it (built, changed by hand since, what each group runs now), and
    the errors that stop the plan: drift, an unsafe releases folder, no room for the releases to build."""
    out, errors, need = [], [], 0
    for release in releases:
        path, group = release["path"], release["group"]
        directory = os.path.dirname(path)
        for folder in (os.path.dirname(directory), directory):
            why = unsafe_dir(folder)
            if why and f"{folder} {why}" not in " ".join(errors):
                errors.append(
                    f"sglang_runtime_releases_dir: {folder} {why}; root builds releases only in a folder that is"
                    " root's alone"
                )
        manifest = read_manifest(path)
        if manifest:
            moved = drift(manifest.get("packages") or {}, installed(path))
            if moved:
                errors.append(
                    f"release {path} ({group}) was changed by hand after its build: {'; '.join(moved)}. The plan stops:"
                    f" put it back (pip install --require-hashes -r {path}/sglang-release.lock) or remove the folder"
                    " once nothing runs from it, and run again"
                )
        else:
            need += int(release.get("size_mb") or 0) << 20
        running = sorted(
            {
                os.path.basename(spec[len(DISTRIBUTIONS) :].rstrip("/"))
                for name, record in records.items()
                if record and groups.get(name) == group
                for spec in record.get("inputs") or {}
                if spec.startswith(DISTRIBUTIONS)
                and os.path.dirname(spec[len(DISTRIBUTIONS) :].rstrip("/")) == directory
            }
        )
        out.append(
            {
                "group": group,
                "id": release["id"],
                "describe": release.get("describe") or describe(release.get("pins") or {}),
                "ready": manifest is not None,
                "running": running,
                "running_describe": [
                    describe((read_manifest(os.path.join(directory, rid)) or {}).get("packages") or {})
                    for rid in running
                ],
            }
        )
    if need and releases:
        free = free_bytes(os.path.dirname(releases[0]["path"]))
        if free < need:
            errors.append(
                f"sglang_runtime_releases_dir: {os.path.dirname(releases[0]['path'])} has {free >> 20} MB free, the"
                f" releases to build need {need >> 20} MB (sglang_runtime_release_size_mb): free room or prune by hand"
            )
    return out, errors


def releases_found(releases: list[dict]) -> int:
    """How many finished releases the folders of the desired ones hold: at most sglang_runtime_releases_keep
    leaves the prune nothing to remove (module_utils/sglang_release.py, prunable)."""
    folders = {os.path.dirname(release["path"]) for release in releases}
    return len({os.path.join(folder, rid) for folder in folders for rid in releases_in(folder)})
