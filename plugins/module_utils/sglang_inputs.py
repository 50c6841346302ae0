"""Input rules for everything the collection renders into a unit, an env file or a command line.

Written once, reached from YAML through the `sglang_input_errors` filter (plugins/filter/sglang_inputs.py),
so preflight and the tests use the same code. Every message names the variable and the value; for secrets
the variable and the fault, never the value.

The managed option strings come from the one table of managed flags (module_utils/sglang_flags.py), which also
renders the command lines; tests/contract holds it to the real parsers, aliases included.
Both parsers accept unique prefixes (argparse's allow_abbrev), so a prefix of a managed option is refused too.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_flags import (
    LOCAL_HOST,
    ROUTER_FLAGS,
    SERVER_FLAGS,
    managed_options,
)

# Option string -> the variable that owns what it sets: from the one table of managed flags (sglang_flags.py).
SERVER_MANAGED_OPTIONS: dict[str, str] = managed_options(SERVER_FLAGS)
ROUTER_MANAGED_OPTIONS: dict[str, str] = managed_options(ROUTER_FLAGS)

# What counts as loopback (LOCAL_HOST: where the collection listens unless told otherwise, sglang_flags.py).
LOOPBACK = (LOCAL_HOST, "::1", "localhost")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Environment the units set themselves; an operator's value would be silently overridden or break the split.
MANAGED_ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "HOME", "XDG_CACHE_HOME", "CREDENTIALS_DIRECTORY")
# Variables earlier versions had, and what replaced them.
REMOVED_VARIABLES: dict[str, str] = {
    "sglang_genconfig_model_path": "sglang_common_model_path",
    "sglang_services_model_path": "sglang_common_model_path",
    "sglang_rollout_model_path": "sglang_common_model_path",
    "sglang_rollout_units": "nothing: the units come from sglang_services_topology",
    "sglang_rollout_lock_timeout": "nothing: a locked host stops the run in the plan (see sglang_rollout_break_lock)",
    "sglang_verify_health_timeout": "sglang_services_timeout_start_sec",
    "sglang_runtime_python": "sglang_runtime_server_lock: the servers and the router run from runtime releases",
    "sglang_services_user": "sglang_runtime_user (the user sglang_runtime creates is the one the units run as)",
    "sglang_runtime_standin_dir": "nothing: the lab installs its stand-in itself (roles/lab_hosts, sglang_lab_standin)",
    "sglang_services_sampling_defaults": "nothing: the servers always run with --sampling-defaults model (without it"
    " SGLang ignores generation_config.json)",
    "sglang_rollout_batch": "sglang_rollout_steps, a list of host counts or percentages (for example [1, '10%',"
    " '25%']; the last step repeats), bounded by sglang_rollout_max_unavailable",
    "sglang_rollout_canary": "sglang_rollout_steps (its first step is the canary) and sglang_rollout_analysis"
    " (false: no analysis on live metrics)",
}


def is_address(text: Any) -> bool:
    """An IP address (v4 or v6) or localhost: what the services and the monitoring may listen on."""
    if not isinstance(text, str):
        return False
    if text == "localhost":
        return True
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(address: Any) -> bool:
    """An address only this host reaches: 127.0.0.0/8, ::1 or localhost."""
    return address in LOOPBACK or (is_address(address) and ipaddress.ip_address(address).is_loopback)


def _control_character(text: str) -> str | None:
    for char in text:
        if ord(char) < 0x20 or ord(char) == 0x7F or 0x80 <= ord(char) < 0xA0 or char in "\u2028\u2029":
            return repr(char)
    return None


def control_character_errors(name: str, value: Any, secret: bool = False) -> list[str]:
    """Every string inside value (keys included) that holds a newline or another control character."""
    if isinstance(value, dict):
        errors: list[str] = []
        for key, item in value.items():
            errors += control_character_errors(f"{name} key", key, secret)
            errors += control_character_errors(f"{name}.{key}", item, secret)
        return errors
    if isinstance(value, (list, tuple)):
        return [e for i, item in enumerate(value) for e in control_character_errors(f"{name}[{i}]", item, secret)]
    if isinstance(value, str):
        found = _control_character(value)
        if found:
            shown = "the value" if secret else repr(value)
            return [f"{name}: {shown} holds the control character {found}; it would end up in a unit or command line"]
    return []


def _option_name(word: str) -> str | None:
    if not word.startswith("--") or len(word) == 2:
        return None
    return word.split("=", 1)[0]


def managed_flag_errors(name: str, flags: Any, managed: dict[str, str]) -> list[str]:
    """Flags that set (or, as an abbreviation argparse accepts, would set) an option the collection manages."""
    if not isinstance(flags, list):
        return []
    errors = []
    for index, token in enumerate(flags):
        option = _option_name(str(token))
        if option is None:
            continue
        if any(char.isspace() for char in option):
            errors.append(f"{name}[{index}]={token!r} is not one flag: put the flag and its value in separate items")
            continue
        hits = sorted(m for m in managed if m == option or m.startswith(option))
        if hits:
            owner = managed[hits[0]]
            # A row the collection sets itself says why ("the collection (why)"); any other names its variable.
            if owner.startswith("the collection"):
                why = owner.removeprefix("the collection").strip().removeprefix("(").removesuffix(")")
                how = f": {why}" if why else ""
            else:
                how = f" (set {owner} instead)"
            errors.append(f"{name}[{index}]={token!r} sets {', '.join(hits)}, which the collection manages{how}")
    return errors


def environment_errors(name: str, environment: Any) -> list[str]:
    if not isinstance(environment, dict):
        return [f"{name}={environment!r} must be a mapping of variable names to values"]
    errors = []
    for key, value in environment.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            errors.append(f"{name}: {key!r} is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        elif key in MANAGED_ENVIRONMENT:
            errors.append(f"{name}: {key} is set by the collection and may not be overridden")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.append(f"{name}.{key}={value!r} must be a string or a number")
            continue
        # systemd.exec reads env files line by line: a trailing backslash joins the next line (here another
        # variable) into this value, an inner one escapes the next character and is dropped ("a\\b" becomes "ab"),
        # surrounding whitespace is stripped, a byte order mark is dropped, and a leading quote starts a quoted value.
        text = str(value)
        if text.endswith("\\"):
            errors.append(f"{name}.{key}={text!r} ends with a backslash, which systemd joins with the next line")
        elif "\\" in text:
            errors.append(f"{name}.{key}={text!r} holds a backslash, which systemd takes as an escape and drops")
        elif "\ufeff" in text:
            errors.append(f"{name}.{key}={text!r} holds a byte order mark (U+FEFF), which systemd drops")
        elif text != text.strip():
            errors.append(f"{name}.{key}={text!r} starts or ends with whitespace, which systemd strips")
        elif text[:1] in ("'", '"'):
            errors.append(f"{name}.{key}={text!r} starts with a quote, which systemd takes as quoting")
    return errors


def removed_variable_errors(defined: list[str]) -> list[str]:
    return [
        f"{variable} was removed; use {REMOVED_VARIABLES[variable]}"
        for variable in sorted(defined)
        if variable in REMOVED_VARIABLES
    ]


def path_errors(name: str, value: Any) -> list[str]:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or " " in value
        or (len(value) > 1 and value.endswith("/"))
    ):
        return [f"{name}={value!r} must be an absolute path without spaces or a trailing slash"]
    return []


def server_entry_errors(name: str, entry: Any) -> list[str]:
    """What the servers' python runs: [-m, MODULE] or [/PROGRAM, ARG...], never an option (the flags are rendered)."""
    if (
        isinstance(entry, list)
        and entry
        and all(isinstance(word, str) and word for word in entry)
        and not any(word.startswith("-") for word in entry[1:])
        and ((entry[0] == "-m" and len(entry) == 2) or (entry[0].startswith("/") and " " not in entry[0]))
    ):
        return []
    return [
        f"{name}={entry!r} must be [-m, MODULE] or [/PROGRAM, ARG...] without options: "
        "the collection renders every server flag (sglang_services_server_flags adds others)"
    ]


def input_errors(values: dict[str, Any], secrets: tuple[str, ...] = (), paths: tuple[str, ...] = ()) -> list[str]:
    """Control characters anywhere, plus the rules that belong to particular variables."""
    errors: list[str] = []
    for name, value in values.items():
        errors += control_character_errors(name, value, secret=name in secrets)
        if name in paths:
            errors += path_errors(name, value)
    if "sglang_runtime_server_entry" in values:
        errors += server_entry_errors("sglang_runtime_server_entry", values["sglang_runtime_server_entry"])
    if "sglang_services_environment" in values:
        errors += environment_errors("sglang_services_environment", values["sglang_services_environment"])
    if "sglang_services_server_flags" in values:
        errors += managed_flag_errors(
            "sglang_services_server_flags", values["sglang_services_server_flags"], SERVER_MANAGED_OPTIONS
        )
    address = values.get("sglang_services_advertise_host")
    if address is not None and (not isinstance(address, str) or not is_address(address)):
        errors.append(f"sglang_services_advertise_host={address!r} must be an IP address (or null)")
    topology = values.get("sglang_services_topology")
    if isinstance(topology, dict):
        for service, settings in topology.items():
            if not isinstance(settings, dict):
                continue
            managed = ROUTER_MANAGED_OPTIONS if settings.get("mode") == "router" else SERVER_MANAGED_OPTIONS
            errors += managed_flag_errors(
                f"sglang_services_topology.{service}.extra_flags", settings.get("extra_flags"), managed
            )
    return errors
