"""A host out of rotation and back: part of the helper set (plugin_utils/sglang_programs.py, HELPER_MODULES).

A drain (modules/sglang_drain.py) takes every worker out of the host's router and keeps them in a root-only state
file until they are back; it speaks to the router with the admin key the router runs with (systemd's copy of its
credential for the current invocation), never with a key the controller sends. Under a rollout's lock the same
drain arms a transient systemd timer on the host that runs `sglang_helper.py undrain-guard STATE_FILE` every
GUARD_EVERY seconds. Once no live lease holds the host (the run that drained it is gone: killed, or its lease
broken) and every service is active, healthy and runs from the files on disk (or, after an apply's drain,
untouched from the invocation that served before the run), the guard puts the workers back, waits for the router's
/readiness, and removes the state file and its own timer. So a controller killed after a drain costs the host's
capacity no longer than the lease. Standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import time
import urllib.parse
from typing import Any

try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_systemd
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import read_regular, write_atomic
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    import sglang_systemd  # type: ignore[no-redef]
    from sglang_files import read_regular, write_atomic  # type: ignore[no-redef]

# The transient timer (and its service) a drain arms; seconds between two looks of the guard.
GUARD_UNIT = "sglang-dsv4-undrain-guard"
GUARD_EVERY = 30
# The capacity guard's word for a drained host whose services all answer their health checks (in_rotation): an
# earlier run's drain that did not end. A rollout brings it back first, since changing it costs no capacity.
DRAINED_SERVING = "drained, its services serving"
# How long the guard waits for the router's /readiness after putting the workers back.
READY_WAIT = 60


def running_key(path: str) -> str | None:
    """The admin key the running router started with (its credential, id:name:role:key), or None when it has none
    (a router that does not run has no credentials folder)."""
    raw = read_regular(path, limit=4096)
    if raw is None:
        return None
    entry = raw.decode(errors="replace").strip()
    return entry.split(":", 3)[3] if entry.count(":") >= 3 else entry


def load_state(path: str) -> dict[str, Any] | None:
    """The pending drain: {"workers": [...], "at": time, "guard": {...}}, or None when the host is in rotation."""
    raw = read_regular(path, limit=1 << 20)
    if raw is None:
        return None
    entry = json.loads(raw)
    return entry if isinstance(entry, dict) and isinstance(entry.get("workers"), list) else None


def save_state(path: str, workers: list[dict], guard: dict[str, Any] | None = None) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    entry = {"workers": workers, "at": time.time(), "guard": guard}
    write_atomic(path, json.dumps(entry) + "\n", mode=0o600)


def systemctl(*args: str) -> tuple[int, str]:
    """(rc, stdout) of one systemctl call; 127 where there is no systemctl (nothing of ours can run there)."""
    try:
        out = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        return 127, ""
    return out.returncode, out.stdout


def invocation(unit: str) -> tuple[str, str]:
    """(ActiveState, InvocationID) of a unit."""
    _rc, out = systemctl(*sglang_systemd.show_argv([unit], ("ActiveState", "InvocationID"))[1:])
    props = sglang_systemd.properties(out)
    return props.get("ActiveState", ""), props.get("InvocationID", "")


def arm(state_path: str, helper: str) -> str:
    """(Re)start the guard's transient timer for this drain; "" or why it could not."""
    for _attempt in range(3):
        # A guard looking right now finds this run's live lease and does nothing: stopping it costs nothing.
        systemctl("stop", f"{GUARD_UNIT}.timer", f"{GUARD_UNIT}.service")
        systemctl("reset-failed", f"{GUARD_UNIT}.timer", f"{GUARD_UNIT}.service")
        armed = subprocess.run(
            [
                "systemd-run",
                f"--unit={GUARD_UNIT}",
                f"--on-active={GUARD_EVERY}",
                f"--on-unit-active={GUARD_EVERY}",
                "--timer-property=AccuracySec=1s",
                "--description=Put the SGLang host back into rotation once no rollout holds it (sglang-dsv4)",
                "/usr/bin/python3",
                helper,
                "undrain-guard",
                state_path,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if armed.returncode == 0:
            return ""
        time.sleep(1)
    return f"systemd-run: {armed.stderr.strip()[-300:]}"


def disarm() -> None:
    """Remove the guard's timer (a drain that ended, or a guard that did its work)."""
    systemctl("stop", "--no-block", f"{GUARD_UNIT}.timer")
    systemctl("reset-failed", f"{GUARD_UNIT}.timer", f"{GUARD_UNIT}.service")


def lease_live(lock: str, now: float) -> bool:
    """Whether a rollout holds the host: its lock exists and its lease has not ended (unreadable counts as held)."""
    if not os.path.lexists(lock):
        return False
    try:
        owner = json.loads(read_regular(os.path.join(lock, "owner.json"), limit=4096) or b"{}")
        return now <= float(owner["lease_until"])
    except (OSError, ValueError, KeyError, TypeError):
        return True


def status(url: str, key: str = "", body: dict | None = None, timeout: float = 5) -> int:
    """The HTTP status of one call to a service on this host (0 when nothing answered)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        # The router's own certificate, on an address of this host: checked for answering, not for who it is.
        # Only for https: the guard's count (in_rotation, on plain http) loads no more than it needs.
        import ssl  # pylint: disable=import-outside-toplevel

        context = ssl._create_unverified_context()  # noqa: S323
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=context
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("POST" if data else "GET", parts.path or "/", body=data, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        connection.close()


def runs_from_disk(record: str, invocation: str) -> bool:
    """sglang_records.runs_from_disk, imported when the guard needs it: the capacity guard's count (in_rotation, run
    from a program the controller sends, action plugin sglang_fleet_rotation) carries only this file and
    sglang_files."""
    # pylint: disable=import-outside-toplevel
    try:  # in a module (Ansiballz) and on the controller
        from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import runs_from_disk as runs
    except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
        from sglang_records import runs_from_disk as runs  # type: ignore[no-redef]
    return runs(record, invocation)


def serving(guard: dict[str, Any]) -> str:
    """ "" when every service is active, healthy and runs from the files on disk, or (`drained_serve`: an apply's
    drain, whose services are the ones that served before the run) from the invocation it was drained with; else
    why not. A rollback's drain holds settings the run rejected: those never go back into rotation."""
    for unit in guard.get("units") or []:
        name = unit["name"]
        active, current = invocation(f"{name}.service")
        if active != "active":
            return f"{name} is {active or 'unknown'}"
        if status(unit["health_url"]) != 200:
            return f"{name}: {unit['health_url']} does not answer 200"
        record = os.path.join(guard["record_dir"], f"{name}.json")
        untouched = guard.get("drained_serve") and current == unit.get("invocation")
        if not untouched and not runs_from_disk(record, current):
            return f"{name} does not run from the files on disk"
    return ""


def undrain_guard(state_path: str, now: float | None = None) -> str:
    """One look of the guard: what it found or did, for the journal."""
    entry = load_state(state_path)
    if entry is None:
        disarm()
        return "the host is in rotation: nothing to do"
    guard = entry.get("guard") or {}
    if lease_live(guard.get("lock", ""), time.time() if now is None else now):
        return "a rollout holds the host: it puts the workers back itself"
    why = serving(guard)
    if why:
        return f"the host stays out of rotation: {why}"
    router = guard["router_url"].rstrip("/")
    key = running_key(guard["admin_credential"]) or ""
    for worker in entry["workers"]:
        code = status(f"{router}/workers", key, worker)
        if code not in (200, 201, 202, 409):
            return (
                f"the router refused to take worker {worker.get('url')} back ({code}); the host stays out of rotation"
            )
    deadline = time.monotonic() + READY_WAIT
    while status(f"{router}/readiness") != 200:
        if time.monotonic() > deadline:
            return f"{router}/readiness did not answer 200 within {READY_WAIT} s; the guard looks again"
        time.sleep(1)
    os.unlink(state_path)
    disarm()
    return f"no rollout holds the host and its services serve: {len(entry['workers'])} worker(s) back in rotation"


def recorded_health(path: str) -> list[str]:
    """The servers' /health URLs a server host of a PD pool recorded at its last rollout (none elsewhere)."""
    try:
        raw = read_regular(path, limit=1 << 16)
        urls = (json.loads(raw) or {}).get("health_urls") if raw else None
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(urls, list):
        return []
    return [url for url in urls if isinstance(url, str) and url.startswith(("http://", "https://"))]


def recorded_url(path: str) -> tuple[str, str]:
    """(the router URL the host's last rollout recorded, why not)."""
    try:
        raw = read_regular(path, limit=1 << 16)
        url = (json.loads(raw) or {}).get("router_url") if raw else None
    except (OSError, ValueError, AttributeError) as error:
        return "", f"its rollout record {path} cannot be read ({error})"
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return "", f"its rollout record {path} does not say where its router listens (no apply recorded it yet)"
    return url, ""


def drained_serving(path: str, timeout: float) -> bool:
    """Whether every service the pending drain recorded (its state file's guard settings) answers its health check
    now; False when the file names none or cannot be read."""
    try:
        entry = json.loads(read_regular(path, limit=1 << 20) or b"{}")
        units = ((entry or {}).get("guard") or {}).get("units") or []
        urls = [unit["health_url"] for unit in units]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return False
    return bool(urls) and all(status(url, timeout=timeout) == 200 for url in urls)


def in_rotation(
    router_url: str, status_file: str, drain_state: str, timeout: float = 5, health_urls: list[str] | None = None
) -> dict[str, Any]:
    """The capacity guard's one question to a host, asked on the host: is it in rotation now (its router's
    /readiness answers 200 and no drain is pending)? Where the router listens is `router_url`, or else what the
    host's last rollout recorded (`status_file`). {"available", "why", "drained_serving", "router_url"}; the unknown
    is never available.

    A server host of a PD pool across hosts has no router (its pool's router host answers for the pool's rotation):
    it is in rotation when every server of it answers /health 200 (`health_urls`, or what its last rollout recorded).
    """
    servers = list(health_urls or []) if not router_url else []
    if not router_url and not servers:
        servers = recorded_health(status_file)
    if servers:
        down = [f"{url} answered {status(url, timeout=timeout) or 'nothing (no connection)'}" for url in servers]
        down = [line for line in down if not line.endswith(" answered 200")]
        why = f"its servers' /health: {'; '.join(down)}" if down else ""
        return {"available": not why, "why": why, "drained_serving": False, "router_url": ""}
    url, why = (router_url, "") if router_url else recorded_url(status_file)
    serving = False
    if url and os.path.lexists(drain_state):
        serving = drained_serving(drain_state, timeout)
        kept = f"its router's workers are kept in {drain_state}"
        why = f"{DRAINED_SERVING}: {kept}" if serving else f"drained: {kept}"
    elif url:
        code = status(url.rstrip("/") + "/readiness", timeout=timeout)
        if code != 200:
            why = f"its router's /readiness answered {code or 'nothing (no connection)'}"
    return {"available": not why, "why": why, "drained_serving": serving, "router_url": url}
