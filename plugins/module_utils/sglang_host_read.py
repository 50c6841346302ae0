"""The host's whole SGLang state in one read, and its plan (read-only): what modules sglang_host_state and
sglang_rollout_open return. Files against their desired digests, the sampling defaults merged into
generation_config.json in memory, the units from systemd, each service's start record, the releases, the lock, the
host-side checks, and the light proof when the plan is otherwise empty (module_utils/sglang_plan.py decides).
"""

from __future__ import annotations

import hashlib
import os
import pwd
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock, sglang_probe, sglang_verdict
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
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import (
    UnreadableWeightsError,
    inputs_digest,
    known_digest,
    weights_now,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_release import read_releases, releases_found
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    defaults_errors,
    merge,
    render,
    sampling_of,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_started import (
    changed_since_start,
    run_record,
    started_weight_version,
)


def file_changes(
    module: Any, files: list[dict], diffs: list[dict], digest_key: str
) -> tuple[list[str], dict[str, str]]:
    changes, desired = [], {}
    for item in files:
        path, want = item["path"], item.get("sha256")
        # A link or a FIFO at a managed path is never followed: it differs from the desired file and is replaced.
        have = file_digest(path, follow=False)
        if want is not None and want.startswith(KEYED) and have is not None:
            # A key file, compared by its HMAC; where it matches, its inputs' digest is the file's own.
            raw = read_regular(path)
            want = have if raw is not None and keyed_digest(raw, digest_key) == want else want
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


def generation_config_change(module: Any, spec: dict, loaded: tuple, diffs: list[dict]) -> tuple[bool, str | None]:
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
    module: Any, units: list[dict], state: dict, expected: dict, api_key: str, on_disk: dict | None = None
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
        served, why = sglang_probe.served_with(unit["health_url"], api_key)
        mode = (served or {}).get("sampling_defaults")
        if mode != "model":
            failures[group].append(f"{name}: /server_info says sampling_defaults={mode}" + (f" ({why})" if why else ""))
            continue
        # Native /generate: the same defaults, as --preferred-sampling-params (the verification holds them exactly).
        managed = {key: value for key, value in expected.items() if value is not None}
        preferred = served.get("preferred_sampling_params")
        if not sglang_verdict.preferred_matches(preferred, managed):
            failures[group].append(
                f"{name}: /server_info says preferred_sampling_params={preferred}, expected {managed}"
            )
            continue
        logged = sglang_probe.logged_defaults(state[name].get("invocation"))
        wrong = defaults_errors(expected, logged, on_disk)
        if wrong:
            failures[group].append(
                f"{name}: its current start logged {logged}, expected {expected}: {'; '.join(wrong)}"
            )
    return failures


# The read's options, as both modules take them (doc fragment dsv4.sglang.host_read documents them).
READ_SPEC: dict[str, dict[str, Any]] = {
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
    "pool_restart": {"type": "list", "elements": "str", "default": []},
    "expected_defaults": {"type": "dict", "default": {}},
    "checks": {"type": "dict", "default": {}},
    "report_changes": {"type": "bool", "default": False},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "digest_key": {"type": "str", "default": "", "no_log": True},
}


def read(module: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The host's state and plan; `module` runs commands and fails the call, `params` are the read's options."""
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
        changes, desired = file_changes(module, applied, diffs, params["digest_key"])
        others, _unused = file_changes(
            module, [f for f in params["files"] if f not in applied], [], params["digest_key"]
        )
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
        systemd = systemd_units([f"{u['name']}.service" for u in params["units"]])
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
        current = {path: known_digest(path) for path in inputs}
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
            # The --weight-version of its current start (a server's), from its record.
            "weight_version": started_weight_version(record),
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
    plan = decide(changes, statuses, groups, carried, facts=facts, details=state, pool=params["pool_restart"])
    proof = {"ran": False, "failures": carried}
    if plan["empty"] and params["proof"] and params["against"] == "desired":
        expected = params["expected_defaults"]
        if params["apply_roles"] is not None and "genconfig" not in params["apply_roles"]:
            # This run leaves generation_config.json alone: the servers must have started from what it holds.
            expected = {key: on_disk_sampling.get(key) for key in expected}
        failures = light_proof(module, params["units"], state, expected, params["api_key"], on_disk_sampling)
        proof = {"ran": True, "failures": failures}
        plan = decide(changes, statuses, groups, failures, facts=facts, details=state, pool=params["pool_restart"])

    weights = plan_weights(params["checks"].get("model_path"), state, groups)
    errors = check_errors(params["checks"]) + release_errors + unreadable_weights(weights)
    if params["against"] == "desired":
        # How long this host's servers took to load at their last start (the plan's estimate of a restart).
        loads = [
            sglang_probe.ready_seconds(state[u["name"]]["invocation"], state[u["name"]]["started_usec"])
            for u in params["units"]
            if u["group"] == "servers" and state[u["name"]]["active"] == "active"
        ]
        plan["restart_seconds"] = max(loads) if loads and None not in loads else None
    plan["releases"] = releases
    plan["releases_found"] = releases_found(params["releases"])
    plan["weights"] = weights
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
    return result


def unreadable_weights(weights: dict[str, Any] | None) -> list[str]:
    """The read's check error of weights that cannot be read whole (plan_weights), or none."""
    return [weights["unreadable"]] if weights and weights.get("unreadable") else []


def plan_weights(model_path: str | None, state: dict[str, Any], groups: dict[str, str]) -> dict[str, Any] | None:
    """The weight version of the model directory's weights manifest now (what the servers' next start gets,
    module_utils/sglang_records.py), how many weight files it names, and the version each server's current start
    got (None: no record of one). A host that runs no server (an xPyD pool's router host) loads no weights: it has
    no weight version, and its model directory may hold none. Weights that cannot be read whole have no version
    (None) and say why in `unreadable`, a check error of the read: the run stops before anything changes."""
    if not model_path or "servers" not in groups.values():
        return None
    running = {name: state[name]["weight_version"] for name, group in groups.items() if group == "servers"}
    try:
        return {**weights_now(model_path), "running": running, "unreadable": ""}
    except UnreadableWeightsError as error:
        return {
            "version": None,
            "files": 0,
            "running": running,
            "unreadable": (
                f"sglang_common_model_path={model_path}: {error}: the weights' version is unknown, so this host's"
                " plan cannot say whether its servers must restart (a model reload) nor prove what they run. Mount"
                " the share or fix its permissions, then run again"
            ),
        }


def runs_astray(units: dict[str, dict[str, Any]]) -> list[str]:
    """The services of a read against disk that do not run from exactly the files on disk, each named: an installed
    one whose status is not current, and one whose unit file is gone that still runs (a rolled-back first deploy)."""
    return [
        name if entry["installed"] else f"{name} (no unit file, still running)"
        for name, entry in sorted(units.items())
        if (entry["installed"] and entry["status"] != "current")
        or (not entry["installed"] and entry["active"] != "inactive")
    ]
