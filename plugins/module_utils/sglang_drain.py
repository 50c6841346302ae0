"""The drain and the undrain of a host's router (modules sglang_drain and sglang_host_restart).

drain() takes the router's workers out (kept in a root-only state file, with what the host's own guard needs to put
them back if the run dies), waits for the balancer to notice and for the servers' in-flight work to end (bounded),
and never fails open: only a refused connection counts as a server with nothing in flight. restore() puts the saved
workers back, level-triggered, and waits until /readiness answers 200 and the balancer has noticed. Both check and
renew the rollout lock (the caller's `fence`) before they change anything. `module` runs the fence and fails the call.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_http, sglang_lock, sglang_ready, sglang_rotation
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_rotation import running_key

# SGLang 0.5.23's load gauges (srt/observability/metrics_collector.py): what a server still has to finish.
IN_FLIGHT = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)
# Seconds between two looks at the router and the servers' load.
POLL = 0.2
# The longest wait for one /metrics answer (a busy server may be slow: that is unknown, and looked at again).
METRICS_TIMEOUT = 5
# How long a registration may stay queued before restore sends it again.
RESEND = 5.0
# Before a drain skips a router as out of rotation, this many /readiness answers must all say so, this far apart,
# each within this timeout (about 7 s at the worst): one timeout, 5xx or flap is no proof.
READINESS_LOOKS = 3
READINESS_PAUSE = 0.5
READINESS_TIMEOUT = 2


def call(url: str, method: str = "GET", key: str = "", body: dict | None = None) -> tuple[int, bytes]:
    status, _message, answer = sglang_http.call(url, method=method, key=key, body=body, timeout=10)
    return status, answer


def in_flight(urls: list[str]) -> tuple[int | None, list[str]]:
    """(the servers' requests still to finish, or None when a load could not be read; what could not be read).

    A server whose port is closed (connection refused: a failed start, or a rollback's second drain) has nothing
    left to finish. Anything else that is not a readable 200 (an error status, a timeout of a busy server, a
    broken answer) is unknown, never zero."""
    total, unreadable = 0.0, []
    for url in urls:
        status, message, body = sglang_http.call(url, timeout=METRICS_TIMEOUT)
        if status == 0 and message.startswith(sglang_http.NOTHING_LISTENS):
            continue
        if status != 200:
            unreadable.append(f"{url}: {message}")
            continue
        # A gauge that has no sample yet (a server that served nothing since its start) is no load.
        for line in body.decode(errors="replace").splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in IN_FLIGHT:
                try:
                    value = float(line.rsplit(" ", 1)[1])
                except (IndexError, ValueError):
                    value = math.nan
                if not math.isfinite(value) or value < 0:
                    unreadable.append(f"{url}: {name} is {line.rsplit(' ', 1)[-1]!r}")
                    break
                total += value
    return (None if unreadable else int(total)), unreadable


def guard_settings(p: dict[str, Any], pending: dict | None) -> dict | None:
    """What the host's guard needs to put the workers back on its own: where to ask, the lock whose lease it waits
    out, and each service with the invocation it was drained with (a pending drain keeps the ones it saved)."""
    if not p["guard"]:
        return None
    if pending and pending.get("guard"):
        return pending["guard"]
    return {
        "router_url": p["router_url"],
        "admin_credential": p["admin_credential"],
        "lock": p["guard"]["lock"],
        "record_dir": p["guard"]["record_dir"],
        "drained_serve": bool(p["guard"].get("drained_serve")),
        "units": [
            {
                "name": unit["name"],
                # A drained router's /readiness answers 503 until its workers are back: its /health says it runs.
                "health_url": re.sub(r"/readiness$", "/health", unit["health_url"]),
                "invocation": sglang_rotation.invocation(f"{unit['name']}.service")[1],
            }
            for unit in p["guard"]["units"]
        ],
    }


def listed_workers(router: str, key: str) -> list[dict] | None:
    """The router's workers, or None when its control plane does not answer (a router that does not run)."""
    status, body = call(f"{router}/workers", key=key)
    return (json.loads(body or b"{}").get("workers") or []) if status == 200 else None


def saved_form(worker: dict) -> dict:
    """What POST /workers takes back: the worker's URL, its type and a prefill's bootstrap port."""
    return {k: worker.get(k) for k in ("url", "worker_type", "bootstrap_port") if worker.get(k) is not None}


def readiness(router: str) -> int:
    return call(f"{router}/readiness")[0]


def rotation(router: str, looks: int | None = None, pause: float | None = None) -> tuple[str, list[str]]:
    """("in", seen) when the router's /readiness answers 200 at any of `looks` looks, `pause` seconds apart (a router
    that may serve is drained); ("out", seen) only when every look says it is out: 503 (a router without its workers)
    or nothing listening (a router that does not run); ("unknown", seen) for anything else (a timeout, another
    status, a flap between out and no answer), which the drain never takes as out of rotation."""
    looks = READINESS_LOOKS if looks is None else looks
    pause = READINESS_PAUSE if pause is None else pause
    seen: list[str] = []
    for look in range(looks):
        if look:
            time.sleep(pause)
        status, message, _body = sglang_http.call(f"{router}/readiness", timeout=READINESS_TIMEOUT)
        if status == 200:
            return "in", [*seen, "200"]
        seen.append(str(status) if status else message)
    out = all(word == "503" or word.startswith(sglang_http.NOTHING_LISTENS) for word in seen)
    return ("out" if out else "unknown"), seen


def wait_for(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)


class Eviction:
    """Keeps a router's worker list empty, level-triggered: the router queues each removal (and each startup
    registration) as a background job, and a removal queued while the router still registers its workers can be
    lost (measured on sglang-router 0.3.1 and 0.3.2 right after a start). Every check removes what is listed
    again; a worker not yet saved is added to the state file first, so that it comes back too."""

    def __init__(self, module: Any, router: str, key: str, path: str, saved: list[dict], guard: dict | None) -> None:
        self.module, self.router, self.key, self.path, self.guard = module, router, key, path, guard
        self.workers = list(saved)

    def __call__(self) -> int:
        """Remove every worker listed now; how many were listed (0 also for a router that does not answer)."""
        listed = listed_workers(self.router, self.key) or []
        known = {w["url"] for w in self.workers}
        new = [saved_form(w) for w in listed if w.get("url") not in known]
        if new:
            self.workers += new
            sglang_rotation.save_state(self.path, self.workers, self.guard)
        for worker in listed:
            status, _unused = call(f"{self.router}/workers/{worker['id']}", method="DELETE", key=self.key)
            if status not in (200, 202, 204, 404):
                self.module.fail_json(msg=f"the router refused to remove worker {worker.get('url')} ({status})")
        return len(listed)


def drain(module: Any, p: dict[str, Any]) -> dict[str, Any]:
    """Take the router's workers out and wait until the servers have finished; the result (module sglang_drain's
    RETURN for state=drained). `p` holds the drain's options; `module` runs the fence (its `fence` parameter)."""
    started = time.monotonic()
    router = p["router_url"].rstrip("/")
    pending = sglang_rotation.load_state(p["state_file"])
    saved = pending["workers"] if pending else None
    if saved is None:
        found, seen = rotation(router)
        if found == "unknown":
            module.fail_json(
                msg=f"cannot tell whether the router at {router} is in rotation: /readiness answered"
                f" {', '.join(seen)} at {len(seen)} looks (neither 200 nor, every time, 503 or a closed port); the"
                " drain does not restart a host whose router may still send it requests"
            )
        if found == "out":
            # Not in rotation now, at every look (a first start, a router that does not run): nothing to take out.
            return {
                "changed": False,
                "drained": True,
                "timed_out": False,
                "in_flight": 0,
                "unreadable": [],
                "seconds": round(time.monotonic() - started, 1),
                "workers": [],
                "out_of_rotation": seen,
            }
    key = running_key(p["admin_credential"])
    listed = listed_workers(router, key) if key is not None else None
    if listed is None and saved is None:
        why = "did not answer to" if key is not None else f"cannot be asked: no {p['admin_credential']} holds"
        module.fail_json(msg=f"the router's control plane at {router}/workers {why} the admin key it runs with")
    if module.check_mode:
        workers = saved if saved is not None else [saved_form(w) for w in listed or []]
        return {
            "changed": bool(listed),
            "drained": True,
            "timed_out": False,
            "in_flight": 0,
            "unreadable": [],
            "seconds": 0.0,
            "workers": workers,
        }
    sglang_lock.fenced(module)
    # A drain left by a rollback's first attempt or a run that died keeps the workers it saved.
    guard = guard_settings(p, pending)
    if saved is None:
        saved = [saved_form(w) for w in listed or []]
        sglang_rotation.save_state(p["state_file"], saved, guard)
    if p["guard"]:
        why = sglang_rotation.arm(p["state_file"], p["guard"]["helper"])
        if why:
            module.warn(f"the host's own guard could not be armed ({why}): if this run dies, the next run puts it back")
    evict = Eviction(module, router, key or "", p["state_file"], saved, guard)
    # Out of rotation once no worker is listed and /readiness is anything but 200 (503, or no answer from a router
    # that does not run).
    if not wait_for(lambda: evict() == 0 and readiness(router) != 200, 30):
        module.fail_json(
            msg=f"{router}/readiness still answers {readiness(router)} 30 s after its workers were removed"
            f" ({evict()} worker(s) still listed)"
        )
    # The balancer checks /readiness every few seconds and takes the host out after a few failures; a worker that
    # comes back meanwhile, or while the servers finish their requests, is removed again.
    notice = time.monotonic() + p["notice_seconds"]
    while time.monotonic() < notice:
        evict()
        time.sleep(POLL)
    left: dict[str, Any] = {"n": None, "unreadable": []}

    def idle() -> bool:
        evict()
        left["n"], left["unreadable"] = in_flight(p["metrics_urls"])
        return left["n"] == 0

    drained = wait_for(idle, p["timeout"])
    return {
        "changed": True,
        "drained": drained,
        "timed_out": not drained,
        "in_flight": left["n"],
        "unreadable": left["unreadable"],
        "seconds": round(time.monotonic() - started, 1),
        "workers": evict.workers,
    }


def send_missing(router: str, admin_credential: str, workers: list[dict]) -> list[tuple[dict, int, bytes]]:
    """Send the router each of `workers` it does not list; the refused ones, with the status and answer. The key is
    read again at every call: a router that restarted meanwhile runs with its new one."""
    key = running_key(admin_credential) or ""
    present = {w.get("url") for w in listed_workers(router, key) or []}
    refused = []
    for worker in workers:
        if worker["url"] in present:
            continue
        status, answer = call(f"{router}/workers", method="POST", key=key, body=worker)
        if status not in (200, 201, 202, 409):
            refused.append((worker, status, answer))
    return refused


def registration_nudge(router: str, admin_credential: str, state_file: str, router_unit: str, urls: list[str]):
    """For the wait of a router this call restarts on a drained host: a function of the unit it looks at, which
    sends the router the drain's saved workers it does not list, once the unit has been starting for RESEND
    seconds, then every RESEND seconds. The router registers the workers it was started with itself, as a queued
    job, and that job can be lost (sglang-router 0.3.1's workflow scheduler reports "Workflow deadlocked" in the
    lab): its start-post would then wait for a /readiness that never comes. Only saved workers at `urls` (the
    servers' URLs now) are sent: a router restarted for new ports registers those alone. Refusals are left to the
    wait's own bounds (the router may not listen yet)."""
    pending = sglang_rotation.load_state(state_file)
    workers = [w for w in (pending or {}).get("workers") or [] if w.get("url") in urls]
    if not workers:
        return None
    # The clock starts when the wait first sees the router starting (it starts after the servers, by After=).
    due = {"at": None}

    def nudge(unit: str) -> None:
        if unit.removesuffix(".service") != router_unit.removesuffix(".service"):
            return
        if due["at"] is None:
            due["at"] = time.monotonic() + RESEND
        if time.monotonic() < due["at"]:
            return
        due["at"] = time.monotonic() + RESEND
        if readiness(router) != 200:
            send_missing(router, admin_credential, workers)

    return nudge


def restore(module: Any, p: dict[str, Any]) -> dict[str, Any]:
    """Put the workers of the state file back and wait until the balancer sends to the host again; the result
    (module sglang_drain's RETURN for state=restored). Without a state file it does nothing."""
    started = time.monotonic()
    router = p["router_url"].rstrip("/")
    pending = sglang_rotation.load_state(p["state_file"])
    if pending is None:
        return {"changed": False, "seconds": 0.0, "workers": []}
    workers = pending["workers"]
    if module.check_mode:
        return {"changed": True, "seconds": 0.0, "workers": workers}
    sglang_lock.fenced(module)
    if p["router_unit"] and not sglang_ready.installed(module.run_command, p["router_unit"]):
        os.unlink(p["state_file"])
        sglang_rotation.disarm()
        return {"changed": True, "seconds": 0.0, "workers": [], "no_router": True}
    # Level-triggered too: a registration the router queued and lost is sent again, every few seconds.
    resend = {"at": 0.0}

    def back() -> bool:
        if readiness(router) == 200:
            return True
        if not p["router_restarted"] and time.monotonic() >= resend["at"]:
            for worker, status, answer in send_missing(router, p["admin_credential"], workers):
                module.fail_json(
                    msg=f"the router refused to take worker {worker['url']} back ({status}): {answer[:300]!r}"
                )
            resend["at"] = time.monotonic() + RESEND
        return False

    if not wait_for(back, p["timeout"]):
        module.fail_json(
            msg=f"{router}/readiness answers {readiness(router)} {p['timeout']} s after the workers were put back; the"
            f" host stays out of rotation ({p['state_file']} keeps them for the next run)"
        )
    # The balancer sends to the host again after a few good checks.
    time.sleep(p["notice_seconds"])
    os.unlink(p["state_file"])
    sglang_rotation.disarm()
    return {"changed": True, "seconds": round(time.monotonic() - started, 1), "workers": workers}
