#!/usr/bin/python
"""Ansible module: read a host's whole SGLang state at once and compute its plan (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_state
short_description: Read the host's SGLang state in one call and decide what a rollout must change and restart
description:
  - Read-only. Compares every managed file with its desired digest, merges the managed sampling defaults into
    generation_config.json in memory, reads the units from systemd and each service's start record under
    C(record_dir), and returns the host's plan (see module_utils/sglang_plan.py for the rules).
  - When the plan is otherwise empty and C(proof) is set, runs the light proof. Each server answers
    C(/health), its C(/server_info) says C(sampling_defaults=model), and the journal of its current invocation
    holds SGLang's startup line with the expected defaults; the router answers C(/readiness).
  - Reports the rollout lock's holder, age and lease.
options:
  files:
    description: Managed files, each C(path), C(sha256) (null when the file must not exist), C(mode), C(role)
      (the role that writes it), and optionally C(content) for a diff (never for secrets or env files). A key
      file's C(sha256) is C(hmac-sha256:HEX), an HMAC under O(digest_key).
    type: list
    elements: dict
    required: true
  digest_key:
    description: The run's own key of the key files' HMAC digests (never logged).
    type: str
    default: ""
  generation_config:
    description: C(path) of generation_config.json and the managed C(sampling) values.
    type: dict
    required: true
  units:
    description: Services, each C(name), C(group) (servers or router), C(inputs) (paths it starts from),
      C(health_url).
    type: list
    elements: dict
    required: true
  releases:
    description: The runtime releases the units will run, each C(group), C(id), C(path), C(pins), C(describe)
      and C(size_mb) (room a build needs). Each is read on the host (built, changed by hand since its build,
      which the services of its group run now); the plan lists those to build in C(plan.build), and drift, an
      unsafe releases folder or too little room are C(check_errors).
    type: list
    elements: dict
    default: []
  users:
    description: Users that must exist.
    type: list
    elements: str
    default: []
  record_dir:
    description: Where the services record what they started from.
    type: path
    required: true
  lock_path:
    description: The rollout lock folder.
    type: path
    required: true
  drain_state:
    description: Where a drain keeps the router's workers it removed; when it exists, an earlier run's drain is
      pending and the plan puts the workers back (C(plan.undrain)).
    type: path
  against:
    description:
      - C(desired) (the plan, and the apply's read under the lock) compares each service's start record with the
        digest its inputs will have once this run's files are written.
      - C(disk) (after the writes, and after a rollback put the snapshot back) compares it with the files on
        disk now, so what restarts is decided from the content that is really there.
    type: str
    choices: [desired, disk]
    default: desired
  apply_roles:
    description: The roles this run applies (C(runtime), C(genconfig), C(services)), or null for all. Files of
      the other roles keep their content on disk in the plan; they are reported in C(plan.held), and a restart
      whose service has such an input is reported in C(plan.held_conflicts).
    type: list
    elements: str
  proof:
    description: Run the light proof when the plan is otherwise empty.
    type: bool
    default: true
  proof_failures:
    description: Light-proof failures found by the plan, per group; they still ask for a restart of that group.
    type: dict
    default: {}
  expected_defaults:
    description: Sampling defaults each server must have logged at its current start (null values unchecked).
    type: dict
    default: {}
  checks:
    description: Host-side preconditions, reported in C(check_errors) with the variable to fix. C(model_path)
      and C(model_files) (present), C(writers) (the
      accounts besides root that may write the model directory and generation_config.json), C(gpus)
      (nvidia-smi lists exactly that many; 0 skips the check). Every command is bounded in time.
    type: dict
    default: {}
  report_changes:
    description: Report a non-empty plan as changed (for C(--check), where changed means "would change", and
      C(--diff) then shows the file diffs). The module itself never changes anything.
    type: bool
    default: false
  api_key:
    description: Client API key for the servers' C(/server_info) (never logged).
    type: str
    default: ''
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Plan this host
  dsv4.sglang.sglang_host_state:
    files: [{path: /etc/sglang-dsv4/prefill.env, sha256: "{{ content | hash('sha256') }}", mode: "0644"}]
    generation_config: {path: /srv/models/DeepSeek-V4-Flash/generation_config.json, sampling: {temperature: 0.6}}
    units: [{name: sglang-dsv4-prefill, group: servers, inputs: [], health_url: "http://127.0.0.1:30000/health"}]
    record_dir: /run/sglang-dsv4
    lock_path: /run/sglang-dsv4-deploy
"""

RETURN = r"""
plan:
  description: C(files) to change, C(missing_users), C(disabled_units), C(other) (the same as sentences, for
    the table), C(held) and C(held_conflicts) (see C(apply_roles)), C(build) and C(releases) (see
    C(releases)), C(releases_found) (finished releases in their folders), C(restart) reasons per group,
    C(restart_servers) and C(restart_router) (booleans), C(empty).
  returned: always
  type: dict
units:
  description: Per service its systemd state, record and evidence (C(status)).
  returned: always
  type: dict
proof:
  description: Whether the light proof ran and what failed, per group.
  returned: always
  type: dict
check_errors:
  description: Unmet preconditions, each naming the variable to fix.
  returned: always
  type: list
lock:
  description: The lock's holder (C(owner), C(run_id), C(age), C(expired), C(unreadable)), or null.
  returned: always
  type: dict
generation_config_sampling:
  description: The sampling keys generation_config.json holds on disk now.
  returned: always
  type: dict
"""

import hashlib
import json
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import (
    KEYED,
    UnsafeFileError,
    file_digest,
    keyed_digest,
    load,
    read_regular,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_http import call
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_plan import decide, unit_status
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import (
    DISTRIBUTIONS,
    distributions,
    input_digest,
    inputs_digest,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_release import (
    describe,
    drift,
    free_bytes,
    installed,
    read_manifest,
    releases_in,
    unsafe_dir,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    defaults_missing,
    merge,
    render,
    sampling_of,
    startup_defaults,
)

PROPERTIES = (
    "Id",
    "ActiveState",
    "SubState",
    "InvocationID",
    "MainPID",
    "NeedDaemonReload",
    "UnitFileState",
    "LoadState",
)


# Every host command of the plan is bounded: one wedged host fails its own plan in seconds, naming the command,
# instead of stalling the fleet's plan.
COMMAND_TIMEOUT = 15


def bounded(module: AnsibleModule, argv: list[str], seconds: int | None = None) -> tuple[int, str, str]:
    """run_command under coreutils' timeout; rc 124 means the command did not answer in time."""
    seconds = seconds or COMMAND_TIMEOUT
    rc, out, err = module.run_command(["timeout", "--kill-after=2", str(seconds), *argv])
    if rc in (124, 137):
        err = f"{argv[0]} did not answer within {seconds} s"
    return rc, out, err


def systemd_units(module: AnsibleModule, names: list[str]) -> dict[str, dict[str, str]]:
    """One `systemctl show` for every unit."""
    argv = ["systemctl", "show", *names, *(f"--property={p}" for p in PROPERTIES)]
    rc, out, err = bounded(module, argv)
    if rc != 0:
        module.fail_json(msg=f"systemctl show failed: {err.strip()}")
    units: dict[str, dict[str, str]] = {}
    for block in out.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        units[props.get("Id", "")] = props
    return units


def file_changes(module: AnsibleModule, files: list[dict], diffs: list[dict]) -> tuple[list[str], dict[str, str]]:
    changes, desired = [], {}
    for item in files:
        path, want = item["path"], item.get("sha256")
        # A link or a FIFO at a managed path is never followed: it differs from the desired file and is replaced.
        have = file_digest(path, follow=False)
        if want is not None and want.startswith(KEYED) and have is not None:
            # A key file, compared by its HMAC; where it matches, its inputs' digest is the file's own.
            raw = read_regular(path)
            want = have if raw is not None and keyed_digest(raw, module.params["digest_key"]) == want else want
        desired[path] = want
        mode_differs = bool(
            want is not None
            and have is not None
            and item.get("mode")
            and os.lstat(path).st_mode & 0o7777 != int(str(item["mode"]), 8)
        )
        if have != want or mode_differs:
            changes.append(path)
            if module._diff and item.get("content") is not None:
                before = ""
                if have is not None and len(have) == 64:
                    raw = read_regular(path, limit=65536) if os.lstat(path).st_size < 65536 else None
                    before = (raw or b"").decode("utf-8", errors="replace")
                diffs.append({"before": before, "after": item["content"], "before_header": path, "after_header": path})
    return changes, desired


def generation_config_change(
    module: AnsibleModule, spec: dict, loaded: tuple, diffs: list[dict]
) -> tuple[bool, str | None]:
    """Whether merging the managed defaults changes the file, and the digest it will have; loaded is
    (config, text, error) as read once by main()."""
    path = spec["path"]
    config, before, error = loaded
    if isinstance(error, UnsafeFileError):
        module.fail_json(msg=f"{error}: replace it with a regular file (sglang_common_model_path)")
    if error is not None:
        module.fail_json(msg=f"{path} is not valid JSON: {error}")
    after = render(merge(config or {}, spec["sampling"]))
    if after != before and module._diff:
        diffs.append({"before": before or "", "after": after, "before_header": path, "after_header": path})
    return after != before, hashlib.sha256(after.encode()).hexdigest()


def light_proof(module: AnsibleModule, units: list[dict], state: dict, expected: dict, api_key: str) -> dict:
    failures: dict[str, list[str]] = {"servers": [], "router": []}
    for unit in units:
        name, group = unit["name"], unit["group"]
        status, _message, _body = call(unit["health_url"], timeout=5)
        if status != 200:
            failures[group].append(f"{name}: {unit['health_url']} answered {status or 'nothing'}")
            continue
        if group != "servers":
            continue
        status, _message, body = call(unit["health_url"].rsplit("/", 1)[0] + "/server_info", key=api_key, timeout=5)
        mode = json.loads(body or b"{}").get("sampling_defaults") if status == 200 else None
        if mode != "model":
            failures[group].append(f"{name}: /server_info says sampling_defaults={mode} (status {status})")
            continue
        invocation = state[name].get("invocation")
        rc, journal, _unused = bounded(
            module, ["journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}"]
        )
        logged = startup_defaults(journal) if rc == 0 and invocation else None
        missing = defaults_missing(expected, logged)
        if logged is None or missing:
            failures[group].append(f"{name}: its current start logged {logged}, expected {expected}")
    return failures


def check_errors(module: AnsibleModule, checks: dict) -> list[str]:
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
        rc, out, err = bounded(module, ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"])
        found = len(out.split()) if rc == 0 else 0
        if rc in (124, 137):
            errors.append(f"{err} (sglang_services_check_gpu_count): the driver is wedged or the GPUs are hung")
        elif found != gpus:
            errors.append(
                f"sglang_services_topology uses {gpus} GPUs but nvidia-smi reports {found} (rc {rc});"
                " set sglang_services_check_gpu_count=false only for a host without NVIDIA tools"
            )
    return errors


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


def run_record(path: str) -> dict | None:
    """A service's start record (root-only, under /run), or None when absent or not a small regular file."""
    try:
        raw = read_regular(path, limit=1 << 20)
        entry = json.loads(raw) if raw else None
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


# How many changed distributions a restart reason names before it says "and N more".
MOVED_SHOWN = 6


def changed_since_start(unit: dict, record: dict | None, current: dict) -> list[str]:
    """The inputs whose content differs from the service's start record; for a runtime, which distributions."""
    if not record:
        return []
    started = record.get("inputs") or {}
    changed = []
    for path in unit["inputs"]:
        if started.get(path, "absent") == current[path]:
            continue
        if path.startswith(DISTRIBUTIONS):
            venv = path[len(DISTRIBUTIONS) :]
            runtimes = record.get("runtime") or {}
            # Another release in place of the one it started from: compare the two.
            was = venv if venv in runtimes or len(runtimes) != 1 else next(iter(runtimes))
            before = runtimes.get(was) or {}
            now = distributions(venv)
            moved = [
                f"{name} {before.get(name, '-')} -> {now.get(name, '-')}"
                for name in sorted(set(before) | set(now))
                if before.get(name) != now.get(name)
            ]
            if len(moved) > MOVED_SHOWN:
                moved = [*moved[:MOVED_SHOWN], f"and {len(moved) - MOVED_SHOWN} more"]
            if was == venv:
                changed.append(f"runtime {venv} ({', '.join(moved) or 'changed'})")
            else:
                what = ", ".join(moved) if now else "not built yet"
                changed.append(f"runtime release {os.path.basename(was)} -> {os.path.basename(venv)} ({what})")
        else:
            changed.append(path)
    return changed


def releases_found(releases: list[dict]) -> int:
    """How many finished releases the folders of the desired ones hold: at most sglang_runtime_releases_keep
    leaves the prune nothing to remove (module_utils/sglang_release.py, prunable)."""
    folders = {os.path.dirname(release["path"]) for release in releases}
    return len({os.path.join(folder, rid) for folder in folders for rid in releases_in(folder)})


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True},
            "generation_config": {"type": "dict", "required": True},
            "units": {"type": "list", "elements": "dict", "required": True},
            "users": {"type": "list", "elements": "str", "default": []},
            "releases": {"type": "list", "elements": "dict", "default": []},
            "record_dir": {"type": "path", "required": True},
            "lock_path": {"type": "path", "required": True},
            "drain_state": {"type": "path", "default": None},
            "against": {"type": "str", "choices": ["desired", "disk"], "default": "desired"},
            "apply_roles": {"type": "list", "elements": "str", "default": None},
            "proof": {"type": "bool", "default": True},
            "proof_failures": {"type": "dict", "default": {}},
            "expected_defaults": {"type": "dict", "default": {}},
            "checks": {"type": "dict", "default": {}},
            "report_changes": {"type": "bool", "default": False},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "digest_key": {"type": "str", "default": "", "no_log": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    diffs: list[dict] = []
    changes: list[str] = []
    desired: dict[str, str | None] = {}
    held: list[str] = []
    genconfig_path = params["generation_config"]["path"]
    # Read once: what the file holds now (reported, and expected of the servers by a run that leaves it alone),
    # and the base of the merge the plan compares it with.
    try:
        loaded = (*load(genconfig_path), None)
    except ValueError as error:
        loaded = (None, None, error)
    on_disk_sampling = sampling_of(loaded[0])
    if params["against"] == "desired":
        # What this run will write: every file of the roles it applies (all of them unless --tags limits it).
        # A file of another role keeps its content on disk, so a tagged run never restarts for it; it is held.
        roles = params["apply_roles"]
        applied = [f for f in params["files"] if roles is None or f.get("role") in roles]
        changes, desired = file_changes(module, applied, diffs)
        others, _unused = file_changes(module, [f for f in params["files"] if f not in applied], [])
        held += others
        genconfig_changes, genconfig_sha = generation_config_change(
            module, params["generation_config"], loaded, diffs if roles is None or "genconfig" in roles else []
        )
        if genconfig_changes and (roles is None or "genconfig" in roles):
            changes.append(genconfig_path)
            desired[genconfig_path] = genconfig_sha
        elif genconfig_changes:
            held.append(genconfig_path)

    missing_users = []
    for user in params["users"]:
        try:
            pwd.getpwnam(user)
        except KeyError:
            missing_users.append(user)

    systemd = systemd_units(module, [f"{u['name']}.service" for u in params["units"]])
    state, statuses, groups, disabled, records = {}, {}, {}, [], {}
    for unit in params["units"]:
        name = unit["name"]
        props = systemd.get(f"{name}.service", {})
        if props.get("UnitFileState") not in ("enabled", "static"):
            disabled.append(name)
        record = run_record(os.path.join(params["record_dir"], f"{name}.json"))
        records[name] = record
        inputs = list(unit["inputs"])
        if params["against"] == "disk" and record and isinstance(record.get("inputs"), dict):
            # Does it run from the files on disk: the inputs its start recorded (a restored unit may name
            # another set than this run's), each as it is on disk now.
            inputs = sorted(record["inputs"])
        current = {path: input_digest(path) for path in inputs}
        wanted = {path: desired.get(path, current[path]) for path in inputs}
        entry = {
            "active": props.get("ActiveState", "unknown"),
            "sub": props.get("SubState", ""),
            "invocation": props.get("InvocationID", ""),
            "pid": int(props.get("MainPID") or 0),
            "need_reload": props.get("NeedDaemonReload") == "yes",
            # No unit file at all (never installed, or removed by a rollback of a first deploy).
            "installed": props.get("LoadState", "not-found") != "not-found",
            "record": {"digest": record.get("digest"), "invocation": record.get("invocation")} if record else None,
        }
        entry["status"] = unit_status(entry, record, inputs_digest(wanted), inputs_digest(current))
        entry["changed_inputs"] = sorted(p for p in inputs if wanted[p] != current[p])
        entry["changed_since_start"] = changed_since_start({"inputs": inputs}, record, current)
        entry["held_inputs"] = sorted(p for p in inputs if p in held)
        state[name], statuses[name], groups[name] = entry, entry["status"], unit["group"]

    releases, release_errors = read_releases(params["releases"], records, groups)
    facts = {
        "missing_users": missing_users,
        "disabled_units": disabled,
        "held": sorted(held),
        "build": [r["id"] for r in releases if not r["ready"]],
        # A drain that an earlier run began and did not end: the host is out of rotation.
        "undrain": bool(params["drain_state"]) and os.path.lexists(params["drain_state"]),
    }
    # The plan's light proof, carried into the apply's reads under the lock, still asks for its repair.
    carried = {group: list(params["proof_failures"].get(group) or []) for group in ("servers", "router")}
    plan = decide(changes, statuses, groups, carried, facts=facts, details=state)
    proof = {"ran": False, "failures": carried}
    if plan["empty"] and params["proof"] and params["against"] == "desired":
        expected = params["expected_defaults"]
        if params["apply_roles"] is not None and "genconfig" not in params["apply_roles"]:
            # This run leaves generation_config.json alone: the servers must have started from what it holds.
            expected = {key: on_disk_sampling.get(key) for key in expected}
        failures = light_proof(module, params["units"], state, expected, params["api_key"])
        proof = {"ran": True, "failures": failures}
        plan = decide(changes, statuses, groups, failures, facts=facts, details=state)

    errors = check_errors(module, params["checks"]) + release_errors
    plan["releases"] = releases
    plan["releases_found"] = releases_found(params["releases"])
    result = {
        # Read-only: "changed" only for --check, where it means "would change" (and lets --diff show the diffs).
        "changed": params["report_changes"] and not plan["empty"],
        "plan": plan,
        "units": state,
        "proof": proof,
        "lock": sglang_lock.inspect(params["lock_path"]),
        "check_errors": errors,
        "generation_config_sampling": on_disk_sampling,
    }
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
