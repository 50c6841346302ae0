"""The host's sampling-defaults metrics: part of the helper set (plugin_utils/sglang_programs.py, HELPER_MODULES).

The monitoring role's timer runs `sglang_helper.py metrics STATUS_DIR OUT.prom MANAGED_JSON TARGET_JSON UNIT=ROLE...`
every minute: node_exporter textfile metrics saying whether the file holds the managed defaults and whether each
server's current invocation logged them, with the last rollout's and the last heal's time and result, all decided
by content. Standard library only.
"""

from __future__ import annotations

import json
import math
import subprocess
import time

try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import load, read_status
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    from sglang_files import load, read_status  # type: ignore[no-redef]
try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_sampling_defaults as defaults
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_systemd
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    import sglang_sampling_defaults as defaults  # type: ignore[no-redef]
    import sglang_systemd  # type: ignore[no-redef]


def _unit_state(unit: str) -> dict[str, str]:
    out = subprocess.run(
        sglang_systemd.show_argv([unit], ("ActiveState", "InvocationID", "ExecMainStartTimestamp"), "unix"),
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return sglang_systemd.properties(out)


def _journal(invocation: str) -> str:
    if not invocation:
        return ""
    return subprocess.run(
        ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def _labels(**labels: str) -> str:
    text = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in labels.items()
    )
    return "{" + text + "}" if text else ""


def _value(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(float(value))


METRIC_HELP = {
    "sglang_dsv4_defaults_check_timestamp_seconds": ("gauge", "When this check last ran."),
    "sglang_dsv4_managed_defaults_present": ("gauge", "1 when the managed sampling defaults file exists."),
    "sglang_dsv4_managed_sampling_default": ("gauge", "A managed sampling default."),
    "sglang_dsv4_generation_config_sampling_value": ("gauge", "A sampling key as generation_config.json holds it."),
    "sglang_dsv4_generation_config_in_sync": ("gauge", "1 when generation_config.json holds the managed defaults."),
    "sglang_dsv4_server_up": ("gauge", "1 when the server unit is active."),
    "sglang_dsv4_server_defaults_in_effect": (
        "gauge",
        "1 when the server's current invocation logged the managed sampling defaults.",
    ),
    "sglang_dsv4_server_start_time_seconds": ("gauge", "When the server's current process started."),
    "sglang_dsv4_last_rollout_timestamp_seconds": ("gauge", "When the last rollout's apply phase ended."),
    "sglang_dsv4_last_rollout_success": ("gauge", "1 when the last rollout's apply phase succeeded."),
    "sglang_dsv4_last_rollout_rolled_back": (
        "gauge",
        "1 when the last rollout's apply failed and was rolled back; 0 when it succeeded or its rollback failed.",
    ),
    "sglang_dsv4_last_heal_timestamp_seconds": ("gauge", "When a server start last checked the file."),
    "sglang_dsv4_last_heal_rewrote": ("gauge", "1 when that check had to put the managed defaults back."),
}


def metrics(
    status_dir: str, managed_path: str, target_path: str, units: dict[str, str], now: float | None = None
) -> str:
    """The textfile-collector metrics of the sampling defaults on this host, decided by content."""
    samples: list[tuple[str, dict[str, str], float]] = [
        ("sglang_dsv4_defaults_check_timestamp_seconds", {}, time.time() if now is None else now)
    ]
    try:
        with open(managed_path, encoding="utf-8") as handle:
            sampling = json.load(handle)
    except (OSError, ValueError):
        sampling = None
    samples.append(("sglang_dsv4_managed_defaults_present", {}, 1.0 if isinstance(sampling, dict) else 0.0))
    sampling = sampling if isinstance(sampling, dict) else {}
    expected = {k: sampling[k] for k in defaults.SAMPLING_KEYS if defaults.is_number(sampling.get(k))}
    for key, value in expected.items():
        samples.append(("sglang_dsv4_managed_sampling_default", {"key": key}, float(value)))
    try:
        config, _unused = load(target_path)
    except ValueError:
        config = None
    for key in defaults.SAMPLING_KEYS:
        if config is not None and defaults.is_number(config.get(key)):
            samples.append(("sglang_dsv4_generation_config_sampling_value", {"key": key}, float(config[key])))
    synced = bool(expected) and defaults.in_sync(config, sampling)
    samples.append(("sglang_dsv4_generation_config_in_sync", {"path": target_path}, 1.0 if synced else 0.0))
    for unit, role in units.items():
        state = _unit_state(unit)
        labels = {"unit": unit, "role": role}
        active = state.get("ActiveState") == "active"
        samples.append(("sglang_dsv4_server_up", labels, 1.0 if active else 0.0))
        logged = defaults.startup_defaults(_journal(state.get("InvocationID", ""))) if active else None
        on_disk = defaults.sampling_of(config) if config is not None else None
        effective = active and bool(expected) and not defaults.defaults_errors(expected, logged, on_disk)
        if role != "router":
            samples.append(("sglang_dsv4_server_defaults_in_effect", labels, 1.0 if effective else 0.0))
        started = state.get("ExecMainStartTimestamp", "").lstrip("@")
        if active and started.replace(".", "", 1).isdigit():
            samples.append(("sglang_dsv4_server_start_time_seconds", labels, float(started)))
    rollout = read_status(status_dir, "rollout.json")
    if rollout and defaults.is_number(rollout.get("time")):
        samples.append(("sglang_dsv4_last_rollout_timestamp_seconds", {}, float(rollout["time"])))
        samples.append(("sglang_dsv4_last_rollout_success", {}, 1.0 if rollout.get("success") else 0.0))
        # Results written before the outcome was recorded were always rolled back when they failed.
        rolled_back = rollout.get("rolled_back", not rollout.get("success"))
        samples.append(("sglang_dsv4_last_rollout_rolled_back", {}, 1.0 if rolled_back else 0.0))
    healed = read_status(status_dir, "heal.json")
    if healed and defaults.is_number(healed.get("time")):
        samples.append(("sglang_dsv4_last_heal_timestamp_seconds", {}, float(healed["time"])))
        samples.append(("sglang_dsv4_last_heal_rewrote", {}, 1.0 if healed.get("rewrote") else 0.0))
    lines: list[str] = []
    for name, (kind, text) in METRIC_HELP.items():
        family = [f"{name}{_labels(**labels)} {_value(value)}" for n, labels, value in samples if n == name]
        if family:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *family]
    return "\n".join(lines) + "\n"
