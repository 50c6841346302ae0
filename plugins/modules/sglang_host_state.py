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
    description: Managed files, each C(path), C(sha256) (null when the file must not exist), C(mode), and
      optionally C(content) for a diff (never for secrets).
    type: list
    elements: dict
    required: true
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
  proof:
    description: Run the light proof when the plan is otherwise empty.
    type: bool
    default: true
  expected_defaults:
    description: Sampling defaults each server must have logged at its current start (null values unchecked).
    type: dict
    default: {}
  checks:
    description: Host-side preconditions, reported in C(check_errors) with the variable to fix. C(python) and
      C(modules) (the runtime's Python finds them), C(model_path) and C(model_files) (present), C(gpus)
      (nvidia-smi lists exactly that many; 0 skips the check).
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
    lock_path: /run/lock/sglang-dsv4-deploy
"""

RETURN = r"""
plan:
  description: C(files) to change, C(other) things to create, C(restart) reasons per group, C(empty).
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
  description: The lock's holder (C(owner), C(run_id), C(age), C(expired)), or null.
  returned: always
  type: dict
"""

import hashlib
import json
import os
import pwd
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_plan import decide, unit_status
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    defaults_missing,
    file_digest,
    inputs_digest,
    load,
    merge,
    render,
    startup_defaults,
)

PROPERTIES = ("Id", "ActiveState", "SubState", "InvocationID", "MainPID", "NeedDaemonReload", "UnitFileState")


def systemd_units(module: AnsibleModule, names: list[str]) -> dict[str, dict[str, str]]:
    """One `systemctl show` for every unit."""
    argv = ["systemctl", "show", *names, *(f"--property={p}" for p in PROPERTIES)]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"systemctl show failed: {err.strip()}")
    units: dict[str, dict[str, str]] = {}
    for block in out.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        units[props.get("Id", "")] = props
    return units


def http_get(url: str, api_key: str = "") -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with open_url(url, headers=headers, timeout=5, validate_certs=False, use_proxy=False) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except (urllib.error.URLError, OSError, UrlConnectionError):
        return 0, b""


def file_changes(module: AnsibleModule, files: list[dict], diffs: list[dict]) -> tuple[list[str], dict[str, str]]:
    changes, desired = [], {}
    for item in files:
        path, want = item["path"], item.get("sha256")
        have = file_digest(path)
        desired[path] = want
        mode_differs = bool(
            want is not None
            and have is not None
            and item.get("mode")
            and os.stat(path).st_mode & 0o7777 != int(str(item["mode"]), 8)
        )
        if have != want or mode_differs:
            changes.append(path)
            if module._diff and item.get("content") is not None:
                before = ""
                if have is not None and os.path.getsize(path) < 65536:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        before = handle.read()
                diffs.append({"before": before, "after": item["content"], "before_header": path, "after_header": path})
    return changes, desired


def generation_config_change(module: AnsibleModule, spec: dict, diffs: list[dict]) -> tuple[bool, str | None]:
    path = spec["path"]
    try:
        config, before = load(path)
    except ValueError as error:
        module.fail_json(msg=f"{path} is not valid JSON: {error}")
    after = render(merge(config or {}, spec["sampling"]))
    if after != before and module._diff:
        diffs.append({"before": before or "", "after": after, "before_header": path, "after_header": path})
    return after != before, hashlib.sha256(after.encode()).hexdigest()


def light_proof(module: AnsibleModule, units: list[dict], state: dict, expected: dict, api_key: str) -> dict:
    failures: dict[str, list[str]] = {"servers": [], "router": []}
    for unit in units:
        name, group = unit["name"], unit["group"]
        status, _unused = http_get(unit["health_url"])
        if status != 200:
            failures[group].append(f"{name}: {unit['health_url']} answered {status or 'nothing'}")
            continue
        if group != "servers":
            continue
        status, body = http_get(unit["health_url"].rsplit("/", 1)[0] + "/server_info", api_key)
        mode = json.loads(body or b"{}").get("sampling_defaults") if status == 200 else None
        if mode != "model":
            failures[group].append(f"{name}: /server_info says sampling_defaults={mode} (status {status})")
            continue
        invocation = state[name].get("invocation")
        rc, journal, _unused = module.run_command(
            ["journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}"]
        )
        logged = startup_defaults(journal) if rc == 0 and invocation else None
        missing = defaults_missing(expected, logged)
        if logged is None or missing:
            failures[group].append(f"{name}: its current start logged {logged}, expected {expected}")
    if failures["servers"]:
        # The router's readiness follows its workers; restarting the servers is the repair.
        failures["router"] = []
    return failures


FIND_MODULES = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"


def check_errors(module: AnsibleModule, checks: dict) -> list[str]:
    errors = []
    python, modules = checks.get("python"), checks.get("modules") or []
    if python and modules:
        if not os.access(python, os.X_OK):
            rc, out, err = 127, "", "no such program"
        else:
            rc, out, err = module.run_command([python, "-c", FIND_MODULES, *modules])
        if rc != 0 or out.strip():
            missing = out.strip() or ", ".join(modules)
            why = f": {err.strip()[-200:]}" if rc != 0 else ""
            errors.append(f"sglang_runtime_python={python} cannot import {missing}{why}")
    model_path = checks.get("model_path")
    for name in checks.get("model_files") or []:
        if model_path and not os.path.isfile(os.path.join(model_path, name)):
            errors.append(f"sglang_common_model_path={model_path} does not hold {name}: put the model there first")
    gpus = int(checks.get("gpus") or 0)
    if gpus:
        rc, out, _unused = module.run_command(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"])
        found = len(out.split()) if rc == 0 else 0
        if found != gpus:
            errors.append(
                f"sglang_services_topology uses {gpus} GPUs but nvidia-smi reports {found} (rc {rc});"
                " set sglang_services_check_gpu_count=false only for a host without NVIDIA tools"
            )
    return errors


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True},
            "generation_config": {"type": "dict", "required": True},
            "units": {"type": "list", "elements": "dict", "required": True},
            "users": {"type": "list", "elements": "str", "default": []},
            "record_dir": {"type": "path", "required": True},
            "lock_path": {"type": "path", "required": True},
            "proof": {"type": "bool", "default": True},
            "expected_defaults": {"type": "dict", "default": {}},
            "checks": {"type": "dict", "default": {}},
            "report_changes": {"type": "bool", "default": False},
            "api_key": {"type": "str", "default": "", "no_log": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    diffs: list[dict] = []
    changes, desired = file_changes(module, params["files"], diffs)
    genconfig_path = params["generation_config"]["path"]
    genconfig_changes, genconfig_sha = generation_config_change(module, params["generation_config"], diffs)
    if genconfig_changes:
        changes.append(genconfig_path)
    desired[genconfig_path] = genconfig_sha

    unmet = []
    for user in params["users"]:
        try:
            pwd.getpwnam(user)
        except KeyError:
            unmet.append(f"create user {user}")

    systemd = systemd_units(module, [f"{u['name']}.service" for u in params["units"]])
    state, statuses, groups = {}, {}, {}
    for unit in params["units"]:
        name = unit["name"]
        props = systemd.get(f"{name}.service", {})
        if props.get("UnitFileState") not in ("enabled", "static") and f"enable {name}" not in unmet:
            unmet.append(f"enable {name}")
        record_path = os.path.join(params["record_dir"], f"{name}.json")
        try:
            with open(record_path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            record = None
        current = {path: file_digest(path) for path in unit["inputs"]}
        wanted = {path: desired.get(path, current[path]) for path in unit["inputs"]}
        entry = {
            "active": props.get("ActiveState", "unknown"),
            "sub": props.get("SubState", ""),
            "invocation": props.get("InvocationID", ""),
            "pid": int(props.get("MainPID") or 0),
            "need_reload": props.get("NeedDaemonReload") == "yes",
            "record": {"digest": record.get("digest"), "invocation": record.get("invocation")} if record else None,
        }
        entry["status"] = unit_status(entry, record, inputs_digest(wanted), inputs_digest(current))
        entry["changed_inputs"] = sorted(p for p in unit["inputs"] if wanted[p] != current[p])
        state[name], statuses[name], groups[name] = entry, entry["status"], unit["group"]

    plan = decide(changes, statuses, groups, unmet=unmet)
    proof = {"ran": False, "failures": {"servers": [], "router": []}}
    if plan["empty"] and params["proof"]:
        failures = light_proof(module, params["units"], state, params["expected_defaults"], params["api_key"])
        proof = {"ran": True, "failures": failures}
        plan = decide(changes, statuses, groups, failures, unmet)

    result = {
        # Read-only: "changed" only for --check, where it means "would change" (and lets --diff show the diffs).
        "changed": params["report_changes"] and not plan["empty"],
        "plan": plan,
        "units": state,
        "proof": proof,
        "lock": sglang_lock.inspect(params["lock_path"]),
        "check_errors": check_errors(module, params["checks"]),
    }
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
