"""What a server runs with, asked of the server and of its current start: the one probe of the plan's light proof
(module sglang_host_state) and of the verification (module sglang_ask).

- `sampling_mode`: the server's own answer, `/server_info`'s `sampling_defaults` (SGLang 0.5.23 reports the
  `--sampling-defaults` it was started with), beside its `/health`.
- `weight_version`: the version of the weights the server says it runs, `/model_info`'s `weight_version` (the
  collection starts each server with `--weight-version`, the digest of the model directory's weights manifest).
- `logged_defaults`: the sampling defaults SGLang logged at the start of the unit's current invocation (its
  `Using default chat sampling params` line, read from that invocation's journal only), so an earlier start's line
  never counts.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_systemd
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_commands import bounded
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_http import call
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import startup_defaults

# Seconds a server has to answer /server_info: it answers from memory, even under load.
PROBE_TIMEOUT = 10
STARTUP_MARK = "Using default chat sampling"


def server_info_url(health_url: str) -> str:
    """/server_info beside a server's /health."""
    return str(health_url).removesuffix("/health") + "/server_info"


def model_info_url(health_url: str) -> str:
    """/model_info beside a server's /health."""
    return str(health_url).removesuffix("/health") + "/model_info"


def _json_object(url: str, key: str, timeout: int) -> tuple[dict[str, Any] | None, str | None]:
    """(the JSON object a server answered at url, None) or (None, why there is none)."""
    status, message, body = call(url, key=key, timeout=timeout)
    if status != 200:
        return None, f"{url} answered {status or 'nothing'} ({message})"
    try:
        info = json.loads(body)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return None, f"{url} did not answer a JSON object"
    return info, None


def weight_version(health_url: str, key: str, timeout: int = PROBE_TIMEOUT) -> tuple[str | None, str | None]:
    """(the weight_version in effect, None) or (None, why it could not be read). From /model_info: SGLang 0.5.23
    reports there the value in effect (its control plane can change it after the start); /server_info keeps the
    start's."""
    url = model_info_url(health_url)
    info, why = _json_object(url, key, timeout)
    if info is not None and not isinstance(info.get("weight_version"), str):
        why = f"{url} did not answer a JSON object with a weight_version"
    return (None, why) if why else (info["weight_version"], None)


def sampling_mode(health_url: str, key: str, timeout: int = PROBE_TIMEOUT) -> tuple[str | None, str | None]:
    """(the server's sampling_defaults mode, None) or (None, why it could not be read)."""
    served, why = served_with(health_url, key, timeout)
    return (served or {}).get("sampling_defaults"), why


def served_with(health_url: str, key: str, timeout: int = PROBE_TIMEOUT) -> tuple[dict[str, Any] | None, str | None]:
    """What the server says it runs with, from its /server_info: its `sampling_defaults` mode and its
    `preferred_sampling_params` (the defaults of native /generate, an object or null); or (None, why not)."""
    info, why = _json_object(server_info_url(health_url), key, timeout)
    if info is None:
        return None, why
    return {key: info.get(key) for key in ("sampling_defaults", "preferred_sampling_params")}, None


def current_invocation(unit: str) -> str:
    """The invocation id of the unit's current start ('' when it has none)."""
    rc, out, _err = bounded(sglang_systemd.show_argv([f"{unit}.service"], ["InvocationID"]))
    return sglang_systemd.properties(out).get("InvocationID", "") if rc == 0 else ""


def logged_defaults(invocation: str) -> dict[str, Any] | None:
    """The defaults logged at the start of this invocation, or None (no invocation, no line, or no journal)."""
    if not invocation:
        return None
    rc, journal, _err = bounded(["journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_INVOCATION_ID={invocation}"])
    if rc != 0:
        return None
    return startup_defaults("\n".join(line for line in journal.splitlines() if STARTUP_MARK in line))


READY_MARK = "The server is fired up and ready to roll"


def ready_seconds(invocation: str, started_usec: int) -> float | None:
    """Seconds from the unit's current start (its main process's start, CLOCK_MONOTONIC microseconds) to SGLang's
    ready line in that invocation's journal: how long the host's last restart took to load. None when either is
    not on record (no current start, the line not logged yet, or the journal rotated away)."""
    if not invocation or not started_usec:
        return None
    rc, journal, _err = bounded(
        [
            "journalctl",
            "--no-pager",
            "-o",
            "json",
            "-n",
            "1",
            "--grep",
            READY_MARK,
            f"_SYSTEMD_INVOCATION_ID={invocation}",
        ],
    )
    try:
        entry = json.loads(journal.strip().splitlines()[-1]) if rc == 0 and journal.strip() else None
        ready = int(entry["__MONOTONIC_TIMESTAMP"]) if entry else 0
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    return round((ready - started_usec) / 1e6, 1) if ready >= started_usec > 0 else None
