#!/usr/bin/python
"""Build one runtime release (a virtual environment from a lock file with hashes), or prune old releases."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_release
short_description: Build a runtime release of SGLang (or its router) from a hashed lock file, or prune releases
version_added: 0.5.0
description:
  - C(state=present) builds RELEASES_DIR/ID as its own virtual environment with
    C(pip install --require-hashes --only-binary :all:) from the lock (wheels only), from an index or a
    wheelhouse, then checks that exactly the pinned distributions are installed, that the named modules import,
    makes it read-only to every account but root and writes its manifest last. A finished release is never
    touched again; an unfinished one (no manifest) is removed and built again. A release changed by hand after
    its build fails here, named.
  - C(state=pruned) removes the oldest finished releases beyond O(keep), never one listed in O(protect).
  - The releases folder must be root's, not writable by others and not a link.
extends_documentation_fragment:
  - dsv4.sglang.fence
options:
  state:
    description: C(present) or C(pruned).
    type: str
    choices: [present, pruned]
    default: present
  releases_dir:
    description: Folder of the releases.
    type: path
    required: true
  id:
    description: The release's id (the digest of its lock and options), for C(state=present).
    type: str
  group:
    description: What the release runs, C(servers) or C(router); recorded in its manifest.
    type: str
  lock:
    description: The lock file's text (C(name==version --hash=sha256:...) per package).
    type: str
  pins:
    description: Name and version of every package the lock pins (canonical names).
    type: dict
    default: {}
  python:
    description: The Python the virtual environment is made from.
    type: path
    default: /usr/bin/python3
  no_deps:
    description: LAB ONLY. Install the pinned packages without their dependencies.
    type: bool
    default: false
  no_compile:
    description:
      - LAB ONLY. Install without byte-compiling (C(pip install --no-compile)). The service user cannot write
        C(__pycache__) into a release, so every start then compiles in memory whatever it imports.
    type: bool
    default: false
  index_url:
    description: Package index to install from (pip's own configuration when unset).
    type: str
  wheelhouse:
    description: A folder of wheels on the host; when set, pip installs from it alone.
    type: path
  timeout:
    description: Seconds the whole build may take.
    type: int
    default: 1800
  modules:
    description: Modules the release must import (its entry points).
    type: list
    elements: str
    default: []
  keep:
    description: How many finished releases pruning keeps (protected ones count).
    type: int
    default: 3
  protect:
    description: Release ids pruning never removes.
    type: list
    elements: str
    default: []
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Build the servers' release
  dsv4.sglang.sglang_release:
    releases_dir: /opt/sglang/releases
    id: "{{ release.id }}"
    lock: "{{ release.lock }}"
    pins: "{{ release.pins }}"
"""

RETURN = r"""
path: {description: The release's folder., returned: state=present, type: str}
seconds: {description: How long the build took (0 when the release existed)., returned: state=present, type: float}
removed: {description: The ids pruning removed., returned: state=pruned, type: list}
"""

import json
import os
import shutil
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import write_atomic
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_release import (
    LOCK,
    MANIFEST,
    drift,
    installed,
    prunable,
    read_manifest,
    release_options,
    releases_in,
    unsafe_dir,
)

FIND_MODULES = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"


def ensure_dir(module: AnsibleModule, directory: str) -> None:
    for path in (os.path.dirname(directory), directory):
        why = unsafe_dir(path)
        if why:
            module.fail_json(
                msg=f"sglang_runtime_releases_dir: {path} {why}; root builds releases only in a folder that is"
                " root's alone"
            )
    os.makedirs(directory, mode=0o755, exist_ok=True)


def remove_release(module: AnsibleModule, directory: str, rid: str) -> None:
    path = os.path.join(directory, rid)
    if os.path.dirname(path) != directory or stat.S_ISLNK(os.lstat(path).st_mode):
        module.fail_json(msg=f"refusing to remove {path}: not a folder directly under {directory}")
    shutil.rmtree(path)


def run(module: AnsibleModule, argv: list[str], deadline: float, what: str, path: str) -> str:
    left = int(deadline - time.monotonic())
    if left <= 0:
        shutil.rmtree(path, ignore_errors=True)
        module.fail_json(msg=f"building release {path} took longer than sglang_runtime_build_timeout ({what} not run)")
    rc, out, err = module.run_command(["timeout", "--kill-after=5", str(left), *argv])
    if rc != 0:
        shutil.rmtree(path, ignore_errors=True)
        why = "did not finish within sglang_runtime_build_timeout" if rc in (124, 137) else (err or out).strip()[-1500:]
        module.fail_json(msg=f"building release {path}: {what} failed (rc {rc}): {why}; nothing that runs was touched")
    return out


def build(module: AnsibleModule) -> None:
    p = module.params
    directory, rid = p["releases_dir"], p["id"]
    path = os.path.join(directory, rid)
    ensure_dir(module, directory)
    manifest = read_manifest(path)
    if manifest:
        moved = drift(manifest.get("packages") or {}, installed(path))
        if moved:
            module.fail_json(msg=f"release {path} was changed by hand after its build: {'; '.join(moved)}")
        module.exit_json(changed=False, path=path, seconds=0.0)
    if module.check_mode:
        module.exit_json(changed=True, path=path, seconds=0.0)
    sglang_lock.fenced(module)
    if os.path.lexists(path):
        remove_release(module, directory, rid)
    started = time.monotonic()
    deadline = started + p["timeout"]
    run(module, [p["python"], "-m", "venv", path], deadline, "python -m venv", path)
    write_atomic(os.path.join(path, LOCK), p["lock"], mode=0o644)
    pip = [os.path.join(path, "bin", "python"), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    source = ["--no-index", "--find-links", p["wheelhouse"]] if p["wheelhouse"] else []
    source += ["--index-url", p["index_url"]] if p["index_url"] and not p["wheelhouse"] else []
    # The lab's build options (LAB ONLY, refused in production).
    lab = ["--no-deps"] if p["no_deps"] else []
    lab += ["--no-compile"] if p["no_compile"] else []
    # Wheels only: a source distribution would run its setup code as root and fetch its build dependencies
    # without a hash; a lock that names one fails here, naming the package, before anything that runs is touched.
    run(
        module,
        [*pip, "install", "--require-hashes", "--only-binary", ":all:", *lab, *source, "-r", os.path.join(path, LOCK)],
        deadline,
        "pip install",
        path,
    )
    if not p["no_deps"]:
        run(module, [*pip, "check"], deadline, "pip check", path)
    moved = drift(p["pins"], installed(path))
    if moved:
        shutil.rmtree(path, ignore_errors=True)
        module.fail_json(msg=f"building release {path}: what pip installed is not the lock: {'; '.join(moved)}")
    missing = run(module, [pip[0], "-c", FIND_MODULES, *p["modules"]], deadline, "the import check", path).strip()
    if missing:
        shutil.rmtree(path, ignore_errors=True)
        module.fail_json(msg=f"building release {path}: it cannot import {missing}")
    # Read-only to the service user (and everyone but root): nothing it runs can rewrite the code it runs.
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = os.path.join(root, name)
            info = os.lstat(entry)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                os.chmod(entry, stat.S_IMODE(info.st_mode) & ~0o022)
    os.chmod(path, 0o755)  # noqa: S103 - readable and runnable by the service user, writable by root alone
    # The manifest makes the release one that units may run: written only while this run still holds the lock.
    sglang_lock.fenced(module)
    entry = {
        "id": rid,
        "group": p["group"],
        "packages": p["pins"],
        "options": release_options(p["no_deps"], p["no_compile"]),
        "built_at": time.time(),
    }
    write_atomic(os.path.join(path, MANIFEST), json.dumps(entry, indent=2, sort_keys=True) + "\n", mode=0o644)
    module.exit_json(changed=True, path=path, seconds=round(time.monotonic() - started, 1))


def prune(module: AnsibleModule) -> None:
    p = module.params
    directory = p["releases_dir"]
    why = unsafe_dir(directory)
    if why:
        module.fail_json(msg=f"sglang_runtime_releases_dir: {directory} {why}")
    remove = prunable(releases_in(directory), p["keep"], set(p["protect"]))
    if not module.check_mode:
        sglang_lock.fenced(module)
        for rid in remove:
            remove_release(module, directory, rid)
    module.exit_json(changed=bool(remove), removed=remove)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "pruned"], "default": "present"},
            "releases_dir": {"type": "path", "required": True},
            "id": {"type": "str"},
            "group": {"type": "str"},
            "lock": {"type": "str"},
            "pins": {"type": "dict", "default": {}},
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "no_deps": {"type": "bool", "default": False},
            "no_compile": {"type": "bool", "default": False},
            "index_url": {"type": "str"},
            "wheelhouse": {"type": "path"},
            "timeout": {"type": "int", "default": 1800},
            "modules": {"type": "list", "elements": "str", "default": []},
            "keep": {"type": "int", "default": 3},
            "protect": {"type": "list", "elements": "str", "default": []},
            "fence": {"type": "dict"},
        },
        required_if=[("state", "present", ("id", "lock", "group"))],
        supports_check_mode=True,
    )
    if module.params["state"] == "present":
        build(module)
    prune(module)


if __name__ == "__main__":
    main()
