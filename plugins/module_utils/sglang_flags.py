"""The one table of the command-line flags the collection manages, for the servers and for the router.

Each row: the option, its aliases in the real parser, the variable that owns what it sets, and how it is rendered
from a service's settings (the words after the option; None: not rendered here; []: a switch). A row whose value an
operator chooses names its setting (the key of the unit settings, sglang_services' vars) and, when the real parser
has a closed list, the choices the collection accepts: the role's checks (`choice_errors`, filter
sglang_flag_errors) and its argument_specs are held to them (tests/unit/test_module_utils_flags.py). The same rows
render the command lines (plugin_utils/sglang_units.py), refuse `extra_flags` and `sglang_services_server_flags` that
would set one of them (module_utils/sglang_inputs.py, with argparse's abbreviations), and are held to the real
parsers, aliases included, by tests/contract (sglang 0.5.23 `ServerArgs.add_cli_args`, sglang-router 0.3.2
`RouterArgs.add_cli_args`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The address the servers always listen on, and the router and its metrics unless their topology entry says otherwise.
LOCAL_HOST = "127.0.0.1"
# The managed sampling defaults as --preferred-sampling-params takes them (JSON), from the file sglang_genconfig
# writes beside the env files (the layout's sampling_env): systemd expands the variable into one argument, so a
# change of the defaults changes that file and the generation config, never a unit.
PREFERRED_ENV = "SGLANG_DSV4_PREFERRED_SAMPLING_PARAMS"
PREFERRED_WORD = "${" + PREFERRED_ENV + "}"
# The version of the weights each server start loads, from its record step (module_utils/sglang_records.py, which
# writes the variable beside the start's record): the digest of the model directory's weights manifest.
WEIGHT_ENV = "SGLANG_DSV4_WEIGHT_VERSION"
WEIGHT_WORD = "${" + WEIGHT_ENV + "}"


def preferred_sampling_params(sampling: dict[str, Any]) -> str:
    """The JSON --preferred-sampling-params gets: every managed sampling default that is set (null: left alone)."""
    return json.dumps({key: value for key, value in sorted(sampling.items()) if value is not None})


def preferred_sampling_env(sampling: dict[str, Any]) -> str:
    """The text of the sampling env file: one variable, its JSON single-quoted (systemd keeps it verbatim)."""
    return (
        "# Written by sglang_genconfig: the managed sampling defaults as SGLang's --preferred-sampling-params takes\n"
        "# them (native /generate uses them for every key a request leaves out). Both servers start from it.\n"
        f"{PREFERRED_ENV}='{preferred_sampling_params(sampling)}'\n"
    )


# (service settings, rendering settings) -> the words after the option, or None.
Render = Callable[..., Any]


@dataclass(frozen=True)
class Flag:
    option: str
    variable: str
    render: Render
    aliases: tuple[str, ...] = ()
    # The unit settings' key that holds the operator's value, and the values the collection accepts (empty: any).
    setting: str | None = None
    choices: tuple[str, ...] = ()
    # The option is given once per group of words its render returns (the router's --prefill and --decode lists).
    repeat: bool = False


def _never(_svc: dict[str, Any], _settings: dict[str, Any]) -> None:
    return None


def _switch(_svc: dict[str, Any], _settings: dict[str, Any]) -> list[Any]:
    return []


def _by_mode(topology: dict[str, Any], mode: str) -> dict[str, Any]:
    return next(s for s in topology.values() if s["mode"] == mode)


def _pool(settings: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    """The router's servers of one mode: its pool's (plugin_utils/sglang_pools.py), or this host's own at loopback."""
    members = settings.get("pool_members") or []
    if members:
        return [m for m in members if m["mode"] == mode]
    svc = _by_mode(settings["topology"], mode)
    return [{"url": f"http://{LOCAL_HOST}:{svc['port']}", "bootstrap_port": svc.get("bootstrap_port")}]


SERVER_FLAGS: tuple[Flag, ...] = (
    Flag("--model-path", "sglang_common_model_path", lambda svc, st: [st["model_path"]], ("--model",)),
    Flag("--served-model-name", "sglang_services_served_model_name", lambda svc, st: [st["served_model_name"]]),
    # A host of its own: loopback (its router is beside them); a host of a pool across hosts: the address the pool's
    # router and the other hosts' servers reach it at.
    Flag(
        "--host",
        "sglang_services_advertise_host (a pool across hosts; else the collection: 127.0.0.1)",
        lambda svc, st: [st.get("listen_host") or LOCAL_HOST],
    ),
    Flag("--port", "sglang_services_topology.<service>.port", lambda svc, st: [svc["port"]]),
    Flag(
        "--tp-size",
        "sglang_services_topology.<service>.gpu_ids",
        lambda svc, st: [len(svc["gpu_ids"])],
        ("--tensor-parallel-size",),
    ),
    Flag("--base-gpu-id", "sglang_services_topology.<service>.gpu_ids", _never),
    # The sampling-defaults switch, always "model": without it SGLang ignores generation_config.json (the product's
    # point), so no variable chooses it.
    Flag("--sampling-defaults", "the collection (generation_config.json is read only so)", lambda svc, st: ["model"]),
    Flag("--disaggregation-mode", "sglang_services_topology.<service>.mode", lambda svc, st: [svc["mode"]]),
    Flag(
        "--disaggregation-transfer-backend",
        "sglang_services_transfer_backend",
        lambda svc, st: [st["transfer_backend"]],
        setting="transfer_backend",
        # SGLang 0.5.23's TransferBackend values (its parser takes these).
        choices=("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"),
    ),
    Flag(
        "--disaggregation-bootstrap-port",
        "sglang_services_topology.prefill.bootstrap_port",
        lambda svc, st: [svc["bootstrap_port"]] if svc["mode"] == "prefill" else None,
    ),
    Flag(
        "--disaggregation-ib-device",
        "sglang_services_ib_device",
        lambda svc, st: [st["ib_device"]] if st.get("ib_device") else None,
    ),
    # %d is systemd's credentials directory (LoadCredential=server-config.yaml in the unit).
    Flag(
        "--config",
        "the collection (the API key file)",
        lambda svc, st: ["%d/server-config.yaml"] if st.get("api_key") else None,
    ),
    Flag("--api-key", "sglang_services_api_key", _never),
    Flag(
        "--kv-cache-dtype",
        "sglang_services_kv_cache_dtype",
        lambda svc, st: [st["kv_cache_dtype"]],
        setting="kv_cache_dtype",
        # The KV cache dtypes DeepSeek-V4-Flash is served with (SGLang's parser takes more).
        choices=("fp8_e4m3", "bfloat16"),
    ),
    # The monitoring scrapes the servers' /metrics.
    Flag("--enable-metrics", "the collection (the monitoring scrapes /metrics)", _switch),
    # Native /generate never reads generation_config.json; SGLang merges these under the keys a request leaves out
    # (tokenizer_manager: {**preferred, **obj.sampling_params}). Inert on the OpenAI routes, which fill every key.
    Flag(
        "--preferred-sampling-params",
        "sglang_genconfig_temperature and the other sglang_genconfig_* sampling defaults",
        lambda svc, st: [PREFERRED_WORD],
    ),
    # Which weights a server loaded: /model_info and /server_info report it, smg reads it when a worker registers.
    Flag(
        "--weight-version",
        "the collection (the digest of the model directory's weights manifest)",
        lambda svc, st: [WEIGHT_WORD],
    ),
)

ROUTER_FLAGS: tuple[Flag, ...] = (
    Flag("--pd-disaggregation", "the collection", _switch),
    # One --prefill URL BOOTSTRAP_PORT per prefill and one --decode URL per decode of the router's pool.
    Flag(
        "--prefill",
        "sglang_services_topology",
        lambda svc, st: [[m["url"], m["bootstrap_port"]] for m in _pool(st, "prefill")],
        repeat=True,
    ),
    Flag(
        "--decode", "sglang_services_topology", lambda svc, st: [[m["url"]] for m in _pool(st, "decode")], repeat=True
    ),
    Flag("--host", "sglang_services_topology.router.host", lambda svc, st: [svc.get("host", LOCAL_HOST)]),
    Flag("--port", "sglang_services_topology.router.port", lambda svc, st: [svc["port"]]),
    # Without these the router serves its metrics on 0.0.0.0:29000.
    Flag(
        "--prometheus-host",
        "sglang_services_topology.router.metrics_host",
        lambda svc, st: [svc.get("metrics_host", LOCAL_HOST)],
    ),
    Flag("--prometheus-port", "sglang_services_topology.router.metrics_port", lambda svc, st: [svc["metrics_port"]]),
    # Offline and quiet: the tokenizer comes from the model directory, never from the Hub.
    Flag("--tokenizer-path", "sglang_common_model_path", lambda svc, st: [st["model_path"]]),
    # smg 1.13.0 adds --model as an alias (measured by the contract tests against its parser).
    Flag("--model-path", "sglang_common_model_path", _never, ("--model",)),
    Flag(
        "--tls-cert-path",
        "sglang_services_router_tls_cert",
        lambda svc, st: ["%d/tls-cert"] if st.get("router_tls") else None,
    ),
    Flag(
        "--tls-key-path",
        "sglang_services_router_tls_key",
        lambda svc, st: ["%d/tls-key"] if st.get("router_tls") else None,
    ),
    # Both keys reach the router from systemd credentials through sglang_with_secret.py, never a command line.
    Flag("--api-key", "sglang_services_api_key", _never),
    Flag("--control-plane-api-keys", "sglang_services_admin_key", _never),
)


def managed_options(flags: tuple[Flag, ...]) -> dict[str, str]:
    """Option string (aliases included) -> the variable that owns it."""
    return {spelling: flag.variable for flag in flags for spelling in (flag.option, *flag.aliases)}


def render(flags: tuple[Flag, ...], svc: dict[str, Any], settings: dict[str, Any]) -> list[Any]:
    """The managed part of a command line, in the table's order."""
    argv: list[Any] = []
    for flag in flags:
        words = flag.render(svc, settings)
        if words is None:
            continue
        for group in words if flag.repeat else [words]:
            argv += [flag.option, *group]
    return argv


def choices(flags: tuple[Flag, ...] = SERVER_FLAGS + ROUTER_FLAGS) -> dict[str, tuple[str, ...]]:
    """Variable -> the values the collection accepts, for every row that has choices."""
    return {flag.variable: flag.choices for flag in flags if flag.choices}


def choice_errors(values: dict[str, Any], flags: tuple[Flag, ...] = SERVER_FLAGS + ROUTER_FLAGS) -> list[str]:
    """A message naming the variable and its value for every value (by variable) that is not one of its choices."""
    return [
        f"{variable}={values[variable]!r} must be one of {', '.join(accepted)}"
        for variable, accepted in choices(flags).items()
        if variable in values and values[variable] not in accepted
    ]
