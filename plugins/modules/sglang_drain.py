#!/usr/bin/python
"""Take a host's router out of rotation before its services restart, and put it back after (bounded)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_drain
short_description: Drain a host before its SGLang services restart, and put it back into rotation after
version_added: 0.5.0
description:
  - C(state=drained) removes every worker from the router through its control plane (admin key), so that the
    router's C(/readiness) answers 503 and the fleet's balancer stops sending to the host; waits
    O(notice_seconds) for the balancer to notice; then waits until the servers have no request left (running,
    queued, prefill bootstrap and in-flight queues, decode prealloc and transfer queues, from their
    C(/metrics)), at most O(timeout) seconds. The workers it removed are kept in O(state_file) (root only), so
    that a rollback, or the next run after a run that died, puts the same workers back.
  - C(state=restored) puts the workers of O(state_file) back (unless the router restarted and registered them
    from its command line), waits until C(/readiness) answers 200 and then O(notice_seconds) for the balancer to
    send to the host again, and removes O(state_file). Without a state file it does nothing.
  - Every wait is bounded; a drain that does not end in time returns C(timed_out) with what is still in flight.
options:
  state:
    description: C(drained) or C(restored).
    type: str
    choices: [drained, restored]
    required: true
  router_url:
    description: The router's URL on the host (its control plane is on the same port).
    type: str
    required: true
  admin_key:
    description: The router's admin key (never logged).
    type: str
    required: true
  metrics_urls:
    description: The C(/metrics) URLs of prefill and decode.
    type: list
    elements: str
    default: []
  state_file:
    description: Where the removed workers are kept until they are back.
    type: path
    required: true
  notice_seconds:
    description: How long the balancer takes to notice a change of C(/readiness) (its check interval times its
      fall or rise count, plus one interval).
    type: int
    default: 10
  timeout:
    description: The longest wait for the servers' in-flight work to reach zero (C(drained)), or for the router's
      C(/readiness) (C(restored)).
    type: int
    default: 300
  router_restarted:
    description: The router restarted since the drain and registered its workers itself (C(restored)).
    type: bool
    default: false
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Take the host out of rotation
  dsv4.sglang.sglang_drain:
    state: drained
    router_url: http://127.0.0.1:8000
    admin_key: "{{ sglang_services_admin_key }}"
    metrics_urls: [http://127.0.0.1:30000/metrics, http://127.0.0.1:30001/metrics]
    state_file: /run/sglang-dsv4/drain.json
"""

RETURN = r"""
drained:
  description: Whether the servers' in-flight work reached zero in time.
  returned: state=drained
  type: bool
timed_out:
  description: Whether the drain timeout passed with work still in flight.
  returned: state=drained
  type: bool
in_flight:
  description: Requests still in flight at the end of the wait.
  returned: state=drained
  type: int
seconds:
  description: How long the step took.
  returned: always
  type: float
workers:
  description: The workers removed (C(drained)) or put back (C(restored)).
  returned: always
  type: list
"""

import json
import os
import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import read_regular, write_atomic

# SGLang 0.5.23's load gauges (srt/observability/metrics_collector.py): what a server still has to finish.
IN_FLIGHT = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)
POLL = 0.5


def call(url: str, method: str = "GET", key: str = "", body: dict | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with open_url(
            url, method=method, data=data, headers=headers, timeout=10, validate_certs=False, use_proxy=False
        ) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except (urllib.error.URLError, OSError, UrlConnectionError):
        return 0, b""


def in_flight(urls: list[str]) -> int:
    """The servers' requests still to finish. A server whose /metrics does not answer is not running (a failed
    start, or a rollback's second drain): it has nothing left to finish."""
    total = 0.0
    for url in urls:
        status, body = call(url)
        if status != 200:
            continue
        for line in body.decode(errors="replace").splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in IN_FLIGHT:
                total += float(line.rsplit(" ", 1)[1])
    return int(total)


def readiness(router: str) -> int:
    return call(f"{router}/readiness")[0]


def wait_for(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)


def load_state(path: str) -> list[dict] | None:
    raw = read_regular(path, limit=1 << 20)
    if raw is None:
        return None
    entry = json.loads(raw)
    return entry.get("workers") if isinstance(entry, dict) else None


def drain(module: AnsibleModule) -> None:
    p = module.params
    started = time.monotonic()
    router, key = p["router_url"].rstrip("/"), p["admin_key"]
    saved = load_state(p["state_file"])
    if saved is None and readiness(router) != 200:
        # Not in rotation now (a first start, a router that does not run): nothing to take out.
        module.exit_json(changed=False, drained=True, timed_out=False, in_flight=0, seconds=0.0, workers=[])
    status, body = call(f"{router}/workers", key=key)
    if status != 200 and saved is None:
        module.fail_json(
            msg=f"the router's control plane at {router}/workers answered {status or 'nothing'} to the admin key"
        )
    # With a drain pending and the router down, there is nothing left to remove.
    listed = (json.loads(body or b"{}").get("workers") or []) if status == 200 else []
    # A drain left by a rollback's first attempt or a run that died: keep the workers it saved.
    workers = (
        saved
        if saved is not None
        else [{k: w.get(k) for k in ("url", "worker_type", "bootstrap_port") if w.get(k) is not None} for w in listed]
    )
    if module.check_mode:
        module.exit_json(changed=bool(listed), drained=True, timed_out=False, in_flight=0, seconds=0.0, workers=workers)
    if saved is None:
        directory = os.path.dirname(p["state_file"])
        os.makedirs(directory, mode=0o700, exist_ok=True)
        write_atomic(p["state_file"], json.dumps({"workers": workers, "at": time.time()}) + "\n", mode=0o600)
    for worker in listed:
        status, _unused = call(f"{router}/workers/{worker['id']}", method="DELETE", key=key)
        if status not in (200, 202, 204, 404):
            module.fail_json(msg=f"the router refused to remove worker {worker.get('url')} ({status})")
    # Out of rotation once /readiness is anything but 200 (503, or no answer from a router that does not run).
    if not wait_for(lambda: readiness(router) != 200, 30):
        module.fail_json(
            msg=f"{router}/readiness still answers {readiness(router)} 30 s after its workers were removed"
        )
    # The balancer checks /readiness every few seconds and takes the host out after a few failures.
    time.sleep(p["notice_seconds"])
    left = {"n": 0}

    def idle() -> bool:
        left["n"] = in_flight(p["metrics_urls"])
        return left["n"] == 0

    drained = wait_for(idle, p["timeout"])
    module.exit_json(
        changed=True,
        drained=drained,
        timed_out=not drained,
        in_flight=left["n"],
        seconds=round(time.monotonic() - started, 1),
        workers=workers,
    )


def restore(module: AnsibleModule) -> None:
    p = module.params
    started = time.monotonic()
    router, key = p["router_url"].rstrip("/"), p["admin_key"]
    workers = load_state(p["state_file"])
    if workers is None:
        module.exit_json(changed=False, seconds=0.0, workers=[])
    if module.check_mode:
        module.exit_json(changed=True, seconds=0.0, workers=workers)
    if not p["router_restarted"]:
        status, body = call(f"{router}/workers", key=key)
        present = {w.get("url") for w in (json.loads(body or b"{}").get("workers") or [])} if status == 200 else set()
        for worker in workers:
            if worker["url"] in present:
                continue
            status, answer = call(f"{router}/workers", method="POST", key=key, body=worker)
            if status not in (200, 201, 202):
                module.fail_json(
                    msg=f"the router refused to take worker {worker['url']} back ({status}): {answer[:300]!r}"
                )
    if not wait_for(lambda: readiness(router) == 200, p["timeout"]):
        module.fail_json(
            msg=f"{router}/readiness answers {readiness(router)} {p['timeout']} s after the workers were put back; the"
            f" host stays out of rotation ({p['state_file']} keeps them for the next run)"
        )
    # The balancer sends to the host again after a few good checks.
    time.sleep(p["notice_seconds"])
    os.unlink(p["state_file"])
    module.exit_json(changed=True, seconds=round(time.monotonic() - started, 1), workers=workers)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["drained", "restored"], "required": True},
            "router_url": {"type": "str", "required": True},
            "admin_key": {"type": "str", "required": True, "no_log": True},
            "metrics_urls": {"type": "list", "elements": "str", "default": []},
            "state_file": {"type": "path", "required": True},
            "notice_seconds": {"type": "int", "default": 10},
            "timeout": {"type": "int", "default": 300},
            "router_restarted": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    if module.params["state"] == "drained":
        drain(module)
    restore(module)


if __name__ == "__main__":
    main()
