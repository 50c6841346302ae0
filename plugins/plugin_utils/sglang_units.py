"""The one topology variable turned into unit specifications (the filters of plugins/filter/sglang_services.py).

`sglang_topology_errors` lists what is wrong with a topology (each message names the variable);
`sglang_unit_specs` builds, per service, the command line, environment and placement that the single
unit template renders, its command lines from the one table of managed flags (module_utils/sglang_flags.py).
Plain functions, tested in tests/unit/test_plugin_utils_units.py.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_flags import (
    PREFERRED_WORD,
    ROUTER_FLAGS,
    SERVER_FLAGS,
    WEIGHT_WORD,
    choice_errors,
    render,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_inputs import LOCAL_HOST, is_address
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import WEIGHTS
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_programs import helper_module_paths

VAR = "sglang_services_topology"
SERVER_MODES = ("prefill", "decode")
MODES = (*SERVER_MODES, "router")
PORT_KEYS = ("port", "bootstrap_port", "metrics_port")
UNIT_PREFIX = "sglang-dsv4-"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Options prefill and decode must agree on, since the KV cache crosses between them (its page size, its dtype, which
# the model's dtype sets when --kv-cache-dtype is auto, and the weights it was computed from). The collection's own
# flags (model path, KV-cache dtype, transfer backend) are rendered alike on both and refused in extra_flags; these
# may come from sglang_services_server_flags (both sides) and each side's extra_flags.
PD_EQUAL = ("--page-size", "--dtype", "--kv-cache-dtype", "--quantization", "--revision", "--load-format")


def _last_value(flags: list[Any], option: str) -> tuple[bool, str | None]:
    """(whether these flags set the option, its value as argparse keeps it: the last one), abbreviations too."""
    found, value = False, None
    words = [str(flag) for flag in flags]
    for index, word in enumerate(words):
        name, equals, given = word.partition("=")
        if not name.startswith("--") or len(name) < 4 or not option.startswith(name):
            continue
        found = True
        value = given if equals else (words[index + 1] if index + 1 < len(words) else None)
    return found, value


def _said(value: str | None) -> str:
    return "SGLang's default" if value is None else repr(value)


def pd_values(svc: dict[str, Any], server_flags: list[Any]) -> dict[str, str | None]:
    """The value a server runs with of each PD_EQUAL option (None: SGLang's default), after the flags of every
    server and its own extra_flags."""
    extra = svc.get("extra_flags") if isinstance(svc.get("extra_flags"), list) else []
    values = {}
    for option in PD_EQUAL:
        found, value = _last_value([*server_flags, *extra], option)
        values[option] = value if found else None
    return values


def pd_skew_errors(topology: dict[str, Any], server_flags: list[Any]) -> list[str]:
    """The options prefill and decode would run with different values of, after the flags of both and each one's
    extra_flags, naming both values."""
    sides = {svc.get("mode"): (name, svc) for name, svc in topology.items() if isinstance(svc, dict)}
    if not all(mode in sides for mode in SERVER_MODES):
        return []
    (p_name, prefill), (d_name, decode) = sides["prefill"], sides["decode"]
    p_values, d_values = pd_values(prefill, server_flags), pd_values(decode, server_flags)
    return [
        f"{VAR}: prefill ({p_name}) would run with {option} {_said(p_values[option])} and decode ({d_name}) with"
        f" {_said(d_values[option])}: the two must agree (the KV cache crosses between them); set it alike in both"
        " extra_flags, or once in sglang_services_server_flags"
        for option in PD_EQUAL
        if p_values[option] != d_values[option]
    ]


def sglang_topology_errors(
    topology: Any, transfer_backend: str = "mooncake", server_flags: Any = None, spanning: bool = False
) -> list[str]:
    """Everything wrong with a topology, as messages that name the variable and the value; with the server flags of
    both sides, the options prefill and decode would run with different values of. A host of its own runs exactly
    one prefill, one decode and one router; a host of a pool that spans hosts (`spanning`) runs its own part of the
    pool: any prefills and decodes, at most one router (the pool's checks, plugin_utils/sglang_pools.py, count the
    whole pool)."""
    if not isinstance(topology, dict) or not topology:
        return [f"{VAR} must be a mapping of service name to settings, got {topology!r}"]
    errors: list[str] = []
    errors += choice_errors({"sglang_services_transfer_backend": transfer_backend})
    modes = [svc.get("mode") if isinstance(svc, dict) else None for svc in topology.values()]
    for mode in MODES:
        if not spanning and modes.count(mode) != 1:
            errors.append(f"{VAR} must have exactly one service with mode {mode}, found {modes.count(mode)}")
        elif spanning and mode == "router" and modes.count(mode) > 1:
            errors.append(f"{VAR} may have at most one service with mode router, found {modes.count(mode)}")
    gpu_owner: dict[int, str] = {}
    port_owner: dict[int, str] = {}
    for name, svc in topology.items():
        where = f"{VAR}.{name}"
        if not isinstance(name, str) or not name.replace("-", "").isalnum() or not name.islower():
            errors.append(f"{VAR} service name {name!r} must be lower-case letters, digits and dashes")
        if not isinstance(svc, dict):
            errors.append(f"{where} must be a mapping, got {svc!r}")
            continue
        mode = svc.get("mode")
        if mode not in MODES:
            errors.append(f"{where}.mode={mode!r} is not one of {', '.join(MODES)}")
        for key in PORT_KEYS:
            port = svc.get(key)
            if port is None:
                if (
                    key == "port"
                    or (key == "bootstrap_port" and mode == "prefill")
                    or (key == "metrics_port" and mode == "router")
                ):
                    errors.append(f"{where}.{key} is required")
                continue
            if not _is_int(port) or not 1 <= port <= 65535:
                errors.append(f"{where}.{key}={port!r} must be a port number (1-65535)")
            elif port in port_owner:
                errors.append(f"{where}.{key}={port} is already used by {port_owner[port]}")
            else:
                port_owner[port] = f"{where}.{key}"
        for key in ("host", "metrics_host"):
            if key in svc and (not isinstance(svc[key], str) or not is_address(svc[key])):
                errors.append(f"{where}.{key}={svc[key]!r} must be an IP address (or localhost)")
        flags = svc.get("extra_flags", [])
        if not isinstance(flags, list) or not all(isinstance(flag, (str, int, float)) for flag in flags):
            errors.append(f"{where}.extra_flags={flags!r} must be a list of strings")
        if mode not in SERVER_MODES:
            continue
        gpu_ids = svc.get("gpu_ids")
        if not isinstance(gpu_ids, list) or not gpu_ids or not all(_is_int(g) and g >= 0 for g in gpu_ids):
            errors.append(f"{where}.gpu_ids={gpu_ids!r} must be a non-empty list of GPU indices")
        else:
            for gpu in gpu_ids:
                if gpu in gpu_owner:
                    errors.append(f"{where}.gpu_ids: GPU {gpu} is already given to {gpu_owner[gpu]}")
                gpu_owner[gpu] = where
        numa = svc.get("numa_node")
        if numa is not None and (not _is_int(numa) or numa < 0):
            errors.append(f"{where}.numa_node={numa!r} must be a NUMA node number or null")
    if not errors:
        errors += pd_skew_errors(topology, server_flags if isinstance(server_flags, list) else [])
    return errors


def http_url(host: str, port: Any, scheme: str = "http") -> str:
    """A URL of an address and a port (an IPv6 address in brackets)."""
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def router_host(svc: dict[str, Any]) -> str:
    """The address the router listens on (its topology entry's host, loopback unless set)."""
    return str(svc.get("host", LOCAL_HOST))


def router_url(svc: dict[str, Any], tls: bool = False) -> str:
    """Where the router really listens, as a URL this host can reach (the wildcard becomes loopback)."""
    host = router_host(svc)
    host = {"0.0.0.0": LOCAL_HOST, "::": "::1"}.get(host, host)  # noqa: S104 - mapping the wildcard away
    return http_url(host, svc["port"], "https" if tls else "http")


def _server_argv(svc: dict[str, Any], settings: dict[str, Any]) -> list[Any]:
    managed = render(SERVER_FLAGS, svc, settings)
    return [*settings["launcher"]["server"], *managed, *settings.get("server_flags", []), *svc.get("extra_flags", [])]


def _router_argv(svc: dict[str, Any], topology: dict[str, Any], settings: dict[str, Any]) -> list[Any]:
    managed = render(ROUTER_FLAGS, svc, {**settings, "topology": topology})
    return [*settings["launcher"]["router"], *managed, *svc.get("extra_flags", [])]


# Files of the model directory each kind of service reads at start (SGLang's ModelConfig and tokenizer manager;
# the router's --tokenizer-path). The weights are an input by their manifest (module_utils/sglang_records.py,
# "weights:"), not by content: hashing hundreds of GB at every plan is no plan.
SERVER_MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
ROUTER_MODEL_FILES = ("tokenizer.json", "tokenizer_config.json")


def unit_inputs(unit: str, name: str, server: bool, credentials: dict[str, str], settings: dict[str, Any]) -> list[str]:
    """Everything a service starts from, as its start record names it (see module_utils/sglang_records.py):
    its unit and drop-ins, env file, credentials, the collection's programs it runs, the runtime's installed
    distributions, and the model files it reads."""
    layout, launcher = settings["layout"], settings["launcher"]
    inputs = [f"{layout['unit_dir']}/{unit}.service", f"{layout['unit_dir']}/{unit}.service.d/"]
    inputs += [f"{layout['conf_dir']}/{name}.env", *([layout["sampling_env"]] if server else []), *credentials.values()]
    inputs += [layout["helper"], *helper_module_paths(layout["libexec_dir"]), layout["wait_healthy"]]
    inputs += list(launcher["server_files" if server else "router_files"])
    runtime = launcher.get("server_runtime" if server else "router_runtime")
    if runtime:
        inputs.append(f"distributions:{runtime}")
    model_files = SERVER_MODEL_FILES if server else ROUTER_MODEL_FILES
    inputs += [f"{settings['model_path']}/{file}" for file in model_files]
    if server:
        # The weights by their manifest (names, sizes, times): new weights restart both servers, never the router.
        inputs.append(f"{WEIGHTS}{settings['model_path']}")
    return inputs


def sglang_unit_specs(topology: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One spec per service, servers first, in the shape the unit template reads.

    `credentials` maps each credential name the unit loads to its root-only file; `inputs` lists every file the
    service starts from (its record of them decides whether it must restart, see module_utils/sglang_plan.py).
    """
    layout = settings["layout"]
    specs = []
    for name, svc in sorted(topology.items(), key=lambda item: MODES.index(item[1]["mode"])):
        server = svc["mode"] in SERVER_MODES
        unit = f"{UNIT_PREFIX}{name}"
        environment = dict(settings.get("environment", {}))
        credentials: dict[str, str] = {}
        if server:
            environment["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in svc["gpu_ids"])
            if settings.get("api_key"):
                credentials["server-config.yaml"] = f"{layout['credentials_dir']}/{name}"
            # Where the server listens: loopback, or in a pool across hosts its host's advertised address.
            health_url = http_url(settings.get("listen_host") or LOCAL_HOST, svc["port"]) + "/health"
        else:
            if settings.get("api_key"):
                credentials["api-key"] = f"{layout['credentials_dir']}/{name}"
            credentials["admin-key"] = f"{layout['credentials_dir']}/{name}-admin"
            if settings.get("router_tls"):
                credentials["tls-cert"] = settings["router_tls"]["cert"]
                credentials["tls-key"] = settings["router_tls"]["key"]
            # /health answers 200 with no worker at all; /readiness only once the workers are healthy.
            health_url = router_url(svc, bool(settings.get("router_tls"))) + "/readiness"
        argv = _server_argv(svc, settings) if server else _router_argv(svc, topology, settings)
        inputs = unit_inputs(unit, name, server, credentials, settings)
        specs.append(
            {
                "key": name,
                "name": unit,
                "mode": svc["mode"],
                "group": "servers" if server else "router",
                "argv": [str(arg) for arg in argv],
                "environment": {key: str(value) for key, value in sorted(environment.items())},
                "credentials": credentials,
                # LoadCredential= entries: systemd expands %-specifiers in the path, so a % in it is doubled.
                "load_credentials": [f"{cred}:{path.replace('%', '%%')}" for cred, path in credentials.items()],
                "inputs": inputs,
                "gpu_ids": list(svc.get("gpu_ids", [])),
                "numa_node": svc.get("numa_node"),
                "port": svc["port"],
                "metrics_host": svc.get("metrics_host", LOCAL_HOST) if not server else None,
                "metrics_port": svc.get("metrics_port") if not server else svc["port"],
                "health_url": health_url,
            }
        )
    return specs


SPECIFIERS = ("%d/",)
# The environment variables an Exec= line takes from systemd, each a word of its own (module_utils/sglang_flags.py).
EXPANDED = (PREFERRED_WORD, WEIGHT_WORD)


def sglang_systemd_argv(argv: list[str]) -> str:
    """Quote an argv for an Exec= line (systemd's own rules: double quotes, % doubled).

    The one specifier meant for systemd, %d (the credentials directory) at the start of an argument, is kept.
    """
    out = []
    for arg in argv:
        text = str(arg)
        if text in EXPANDED:
            out.append(text)
            continue
        keep = next((s for s in SPECIFIERS if text.startswith(s)), "")
        text = keep + text[len(keep) :].replace("%", "%%")
        if not text or any(ch in text for ch in " \t\"'\\;$"):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$") + '"'
        out.append(text)
    return " ".join(out)
