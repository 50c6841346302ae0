"""A runtime release as the controller computes it from its lock file: id, path, pins and the lock's errors."""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_release import (
    describe,
    parse_lock,
    release_id,
    release_options,
)


def sglang_release(
    lock: str,
    group: str,
    releases_dir: str,
    variable: str,
    no_deps: bool = False,
    modules: list[str] | None = None,
    no_compile: bool = False,
) -> dict[str, Any]:
    """The release a lock file makes: named by the digest of its requirements and build options."""
    pins, errors, requirements = parse_lock(lock, variable)
    rid = release_id(requirements, release_options(no_deps, no_compile))
    path = os.path.join(releases_dir, rid)
    return {
        "group": group,
        "id": rid,
        "path": path,
        "python": os.path.join(path, "bin", "python"),
        "pins": pins,
        "describe": describe(pins),
        "lock": lock if lock.endswith("\n") else lock + "\n",
        "no_deps": bool(no_deps),
        "no_compile": bool(no_compile),
        "modules": list(modules or []),
        "errors": errors,
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_release": sglang_release}
