"""Whether the services are up: the one wait of the restart (module sglang_service_restart) and of the
verification (module sglang_ask's `ready`).

A unit is ready once systemd says it is active and running and its URL (a server's `/health`, the router's
`/readiness`) answers 200. A unit this call restarted counts only after it left the inactive state after the
restart was issued: the old process answering `/health`, or the failed state of an earlier start, says nothing
about the new one. A unit that enters `failed` or `auto-restart` fails the wait at once, quoting its journal with
every key masked. `run` is the module's `run_command` (argv in, rc, stdout, stderr out).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_systemd
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_commands import CommandError, Run
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_http import call
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_redact import redact, secrets_of

# Seconds between two looks at the units: a restart is seen about this soon after it is ready.
POLL = 0.2
# Seconds allowed beyond a unit's start timeout (the restart's default, the verification's).
MARGIN = 15
PROPERTIES = ("ActiveState", "SubState", "LoadState", "InactiveExitTimestampMonotonic", "Job")


def unit_props(run: Run, name: str) -> dict[str, str]:
    _unused, out, _unused2 = run(sglang_systemd.show_argv([name], PROPERTIES))
    return sglang_systemd.properties(out)


def units_props(run: Run, names: list[str]) -> dict[str, dict[str, str]]:
    """Several units' properties in one `systemctl show` (one process per look, however many units wait), each
    block paired with its unit by its Id, never by its place; a unit without a block of its own is asked alone."""
    _unused, out, _unused2 = run(sglang_systemd.show_argv(names, ("Id", *PROPERTIES)))
    found = sglang_systemd.units(out)
    return {name: found.get(sglang_systemd.unit_id(name)) or unit_props(run, name) for name in names}


def installed(run: Run, name: str) -> bool:
    return unit_props(run, name).get("LoadState") not in ("not-found", None)


def journal_tail(run: Run, name: str, secret_files: list[str]) -> str:
    """The unit's last journal lines, every key masked (the values the credential files hold are read only here)."""
    _unused, out, _unused2 = run(["journalctl", "--no-pager", "-o", "cat", "-n", "12", "-u", name])
    return redact(out.strip(), secrets_of(secret_files))


def busy(run: Run, names: list[str]) -> dict[str, str]:
    """The units of `names` a systemd job runs on (a start, restart or stop queued and not ended), each with its job
    and state, e.g. {"sglang-dsv4-router": "job 300 (activating/start-post)"}; one `systemctl show`. A systemctl
    that does not answer raises CommandError: an unread answer is never taken for "no job"."""
    if not names:
        return {}
    rc, out, err = run(sglang_systemd.show_argv(names, ("Id", *PROPERTIES)))
    found = sglang_systemd.units(out) if rc == 0 else {}
    ids = {name: sglang_systemd.unit_id(name) for name in names}
    if not all("ActiveState" in found.get(unit, {}) for unit in ids.values()):
        raise CommandError(
            f"systemctl show {' '.join(names)} did not answer for each unit (rc {rc}: {err.strip()[-200:]}): whether"
            " an earlier job still runs on them is unknown"
        )
    jobs = {name: found[unit_id] for name, unit_id in ids.items()}
    return {
        name: f"job {props['Job']} ({props.get('ActiveState', 'unknown')}/{props.get('SubState', 'unknown')})"
        for name, props in jobs.items()
        if props.get("Job")
    }


def wait_ready(
    run: Run,
    wait: list[dict],
    timeout: int,
    margin: int,
    secret_files: list[str],
    fresh: frozenset[str] = frozenset(),
    issued_us: int = 0,
    nudge: Callable[[str], None] | None = None,
) -> dict:
    """Waits for every installed unit of `wait` ({name, health_url}) within `timeout` + `margin` seconds.

    Returns {units: {name: {url, active, sub, status}}, waited: seconds, failure: None or why}; `fresh` names the
    units restarted at `issued_us` (this host's monotonic clock, in microseconds). `nudge` is called with the name of
    each unit seen starting (its new start begun, not yet active), at every look."""
    started = time.monotonic()
    deadline = started + timeout + margin
    units = {
        u["name"]: {"url": u["health_url"], "active": "", "sub": "", "status": 0}
        for u in wait
        if installed(run, u["name"])
    }
    pending = set(units)

    def result(failure: str | None) -> dict:
        return {"units": units, "waited": round(time.monotonic() - started, 1), "failure": failure}

    while pending:
        looked = units_props(run, sorted(pending))
        for name in sorted(pending):
            entry = units[name]
            props = looked[name]
            entry["active"], entry["sub"] = props.get("ActiveState", "unknown"), props.get("SubState", "unknown")
            if (
                name.removesuffix(".service") in fresh
                and int(props.get("InactiveExitTimestampMonotonic") or 0) <= issued_us
            ):
                # The queued job has not begun this unit's new start yet.
                continue
            if nudge is not None and entry["active"] == "activating" and entry["sub"] != "auto-restart":
                nudge(name)
            if entry["active"] == "failed" or entry["sub"] == "auto-restart":
                return result(
                    f"{name} did not start: it is {entry['active']} ({entry['sub']}) after "
                    f"{time.monotonic() - started:.0f} s. Its journal:\n{journal_tail(run, name, secret_files)}"
                )
            if entry["active"] == "active" and entry["sub"] == "running":
                # The router's own certificate, on loopback: checked for being up, not for who it is.
                entry["status"] = call(entry["url"], timeout=5)[0]
                if entry["status"] == 200:
                    pending.discard(name)
        if not pending:
            break
        if time.monotonic() > deadline:
            late = ", ".join(
                f"{n} ({units[n]['active']}/{units[n]['sub']}, {units[n]['url']} -> {units[n]['status']})"
                for n in sorted(pending)
            )
            return result(f"not ready within the start timeout of {timeout} s (+{margin} s): {late}")
        time.sleep(POLL)
    return result(None)
