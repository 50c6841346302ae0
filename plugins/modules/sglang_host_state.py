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
import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock, sglang_probe
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_commands import CommandError, systemd_units
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import (
    KEYED,
    UnsafeFileError,
    file_digest,
    keyed_digest,
    load,
    read_regular,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_host_checks import check_errors
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_http import call
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_plan import decide, unit_status
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import input_digest, inputs_digest
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_release import read_releases, releases_found
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    defaults_errors,
    merge,
    render,
    sampling_of,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_started import changed_since_start, run_record


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


def light_proof(
    module: AnsibleModule, units: list[dict], state: dict, expected: dict, api_key: str, on_disk: dict | None = None
) -> dict:
    """Each group's failures of the light proof: every unit answers its health URL; each server says it runs with
    the model's sampling defaults and its current start logged the expected ones (module_utils/sglang_probe.py)."""
    failures: dict[str, list[str]] = {"servers": [], "router": []}
    for unit in units:
        name, group = unit["name"], unit["group"]
        status, _message, _body = call(unit["health_url"], timeout=sglang_probe.PROBE_TIMEOUT)
        if status != 200:
            failures[group].append(f"{name}: {unit['health_url']} answered {status or 'nothing'}")
            continue
        if group != "servers":
            continue
        mode, why = sglang_probe.sampling_mode(unit["health_url"], api_key)
        if mode != "model":
            failures[group].append(f"{name}: /server_info says sampling_defaults={mode}" + (f" ({why})" if why else ""))
            continue
        logged = sglang_probe.logged_defaults(module.run_command, state[name].get("invocation"))
        wrong = defaults_errors(expected, logged, on_disk)
        if wrong:
            failures[group].append(
                f"{name}: its current start logged {logged}, expected {expected}: {'; '.join(wrong)}"
            )
    return failures


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

    try:
        systemd = systemd_units(module.run_command, [f"{u['name']}.service" for u in params["units"]])
    except CommandError as error:
        module.fail_json(msg=str(error))
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
            "started_usec": int(props.get("ExecMainStartTimestampMonotonic") or 0),
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
        failures = light_proof(module, params["units"], state, expected, params["api_key"], on_disk_sampling)
        proof = {"ran": True, "failures": failures}
        plan = decide(changes, statuses, groups, failures, facts=facts, details=state)

    errors = check_errors(module.run_command, params["checks"]) + release_errors
    if params["against"] == "desired":
        # How long this host's servers took to load at their last start (the plan's estimate of a restart).
        loads = [
            sglang_probe.ready_seconds(
                module.run_command, state[u["name"]]["invocation"], state[u["name"]]["started_usec"]
            )
            for u in params["units"]
            if u["group"] == "servers" and state[u["name"]]["active"] == "active"
        ]
        plan["restart_seconds"] = max(loads) if loads and None not in loads else None
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
