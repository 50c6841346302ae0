"""One desired-state document per host, computed by one function from the roles' settings.

The plan (sglang_rollout's host read) compares the host with this document, and each role writes exactly its part
of it: every file the collection manages (with the role that writes it), the sampling defaults merged into the
model's generation_config.json, the units the rollout restarts, the releases they run, and the host-side checks.
The action plugin sglang_desired_state calls `desired_state` with the settings the roles name and a `render`
function for the unit, env file and target templates (host/templates, one per kind of file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_flags import preferred_sampling_env
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_programs import helper_module_paths, host_program
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_units import router_url, sglang_unit_specs

ROLES = ("runtime", "genconfig", "services")
# What the rollout needs to know of each service: its group, what it starts from, where it says it is up.
UNIT_KEYS = ("name", "group", "mode", "port", "metrics_host", "metrics_port", "inputs", "health_url")
# Files of the model directory the plan checks are there: the router loads its tokenizer from there, not the Hub.
MODEL_FILES = ["config.json", "tokenizer.json"]

Render = Callable[[str, dict[str, Any]], str]


def _file(role: str, path: str, mode: str, content: str | None, **extra: Any) -> dict[str, Any]:
    return {"path": path, "mode": mode, "content": content, "role": role, **extra}


def _runtime(layout: dict[str, Any], settings: dict[str, Any], program: Callable[[str], str]) -> dict[str, Any]:
    releases = settings["releases"]
    sizes = settings["release_size_mb"]
    return {
        "files": [_file("runtime", layout["secret_launcher"], "0755", program("sglang_with_secret.py"))],
        # The plan reads each release on the host (built, untouched since, room for it) before anything changes.
        # It needs no lock text (the production lock alone is 400 kB): the build takes it from the fact.
        # Only the parts the host runs (an xPyD pool's router-only host needs no servers' release).
        "releases": [
            {**{k: v for k, v in releases[kind].items() if k != "lock"}, "size_mb": int(sizes[kind])}
            for kind in ("servers", "router")
            if kind in settings["parts"]
        ],
        # Who may own what the services run from (a release written by another account is drift).
        "checks": {"writers": [settings["user"]]},
    }


def _genconfig(layout: dict[str, Any], settings: dict[str, Any], program: Callable[[str], str]) -> dict[str, Any]:
    sampling = dict(settings["sampling"])
    managed = json.dumps(sampling, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
    return {
        "generation_config": {"path": layout["generation_config"], "sampling": sampling},
        "files": [
            _file("genconfig", layout["managed_defaults"], "0644", managed),
            # The same defaults for native /generate (--preferred-sampling-params, expanded by systemd).
            _file("genconfig", layout["sampling_env"], "0644", preferred_sampling_env(sampling)),
            # The helper set: its command line, and the modules it runs beside it.
            _file("genconfig", layout["helper"], "0755", program("sglang_helper.py")),
            *(
                _file("genconfig", path, "0644", program(path.rsplit("/", 1)[-1]))
                for path in helper_module_paths(layout["libexec_dir"])
            ),
        ],
        "checks": {"model_path": settings["model_path"], "model_files": list(MODEL_FILES)},
    }


def _credentials(layout: dict[str, Any], units: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Root-only key files, compared by digest and never shown; content None means the file must not exist."""
    key, files = settings["api_key"], []
    for unit in units:
        base = f"{layout['credentials_dir']}/{unit['key']}"
        if unit["group"] == "servers":
            content = json.dumps({"api-key": key}) if key else None
            files.append(_file("services", base, "0600", content, secret=True))
        else:
            files.append(_file("services", base, "0600", key or None, secret=True))
            # The admin key in the form --control-plane-api-keys takes: id:name:role:key.
            admin = f"dsv4-admin:operators:admin:{settings['admin_key']}"
            files.append(_file("services", f"{base}-admin", "0600", admin, secret=True))
    return files


def _services(
    layout: dict[str, Any], settings: dict[str, Any], program: Callable[[str], str], render: Render
) -> dict[str, Any]:
    units = sglang_unit_specs(settings["topology"], settings["unit_settings"])
    files = [_file("services", layout["wait_healthy"], "0755", program("sglang_wait_healthy.py"))]
    files += _credentials(layout, units, settings)
    for unit in units:
        env = render("sglang-dsv4.env.j2", {"unit": unit, "units": units})
        files.append(_file("services", f"{layout['conf_dir']}/{unit['key']}.env", "0600", env, private=True))
        service = f"{unit['name']}.service"
        text = render("sglang-dsv4.service.j2", {"unit": unit, "units": units})
        files.append(_file("services", f"{layout['unit_dir']}/{service}", "0644", text, unit=service))
    target = layout["target"]
    text = render("sglang-dsv4.target.j2", {"units": units})
    files.append(_file("services", f"{layout['unit_dir']}/{target}", "0644", text, unit=target))
    # A host of a pool across hosts may run no router (prefill-only, decode-only): it has no router URL.
    router = next((svc for svc in settings["topology"].values() if svc["mode"] == "router"), None)
    # Host-side checks the plan makes: as many GPUs as the topology uses (real hosts only).
    gpus = sum(len(unit["gpu_ids"]) for unit in units) if settings["check_gpus"] else 0
    pool = settings["unit_settings"].get("pool_members") or []
    extra = (
        # xPyD: the router host of a PD pool across hosts proves that its requests cross from the pool's prefills to
        # its decodes (their KV transfers, counted on each prefill's /metrics).
        {
            "pool_prefills": [
                {"name": f"{m['host']}:{m['service']}", "metrics_url": f"{m['url']}/metrics"}
                for m in pool
                if m["mode"] == "prefill"
            ]
        }
        if pool and router
        else {}
    )
    return {
        **extra,
        "files": files,
        "units": [{key: unit[key] for key in UNIT_KEYS} for unit in units],
        "target": target,
        "served_model_name": settings["served_model_name"],
        # Where clients reach the router from this host (the address it really listens on).
        "router_url": router_url(router, settings["router_tls"]) if router else None,
        "checks": {"gpus": gpus, "gpus_variable": "sglang_services_topology"},
    }


def desired_state(
    layout: dict[str, Any],
    settings: dict[str, dict[str, Any] | None],
    render: Render,
    base: dict[str, Any] | None = None,
    program: Callable[[str], str] = host_program,
) -> dict[str, Any]:
    """The host's desired state from the settings of the roles given (runtime, genconfig, services).

    A role used on its own computes only its part: `base` is the document so far, whose parts of the other roles
    are kept. `roles` names the parts the document holds.
    """
    given = [role for role in ROLES if settings.get(role) is not None]
    document: dict[str, Any] = dict(base or {"roles": [], "files": [], "checks": {}})
    document["files"] = [f for f in document.get("files", []) if f["role"] not in given]
    checks = dict(document.get("checks", {}))
    for role in given:
        if role == "services":
            part = _services(layout, settings[role], program, render)
        else:
            part = (_runtime if role == "runtime" else _genconfig)(layout, settings[role], program)
        document["files"] = document["files"] + part.pop("files")
        checks.update(part.pop("checks"))
        document.update(part)
    document["checks"] = checks
    document["roles"] = [role for role in ROLES if role in given or role in document.get("roles", [])]
    # The files in one order whatever order the roles ran in: the runtime's, the generation config's, the services'.
    document["files"] = sorted(document["files"], key=lambda f: ROLES.index(f["role"]))
    return document
