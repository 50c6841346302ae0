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
  - The drain never fails open. Only a refused connection (nothing listens on the port) counts as a server with
    nothing in flight; any other error, HTTP status or timeout of a C(/metrics) read is unknown, and the drain
    keeps looking until its timeout, then returns C(timed_out) naming what it could not read.
extends_documentation_fragment:
  - dsv4.sglang.fence
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
  admin_credential:
    description:
      - The admin-key credential of the running router, as systemd handed it to the current invocation
        (C(/run/credentials/UNIT/admin-key), in the form C(id:name:role:key) that C(--control-plane-api-keys) takes).
      - The drain and the restore speak to the router with the key it runs with, read here on the host. A key
        rotated in the inventory takes over only when the router restarts with it, and never crosses the
        controller.
    type: path
    required: true
  router_unit:
    description:
      - The router's systemd unit (C(restored)). When it has no unit file (a rollback of a first deploy removed it),
        there is no router to put back into rotation (the state file is removed and nothing is waited for).
    type: str
  guard:
    description:
      - Arms the host's own guard with the drain (C(state=drained)); a transient systemd timer
        (module_utils/sglang_rotation.py) that puts the workers back once no live lease of C(lock) holds the host
        and every one of C(units) (each C(name), C(health_url)) is active, healthy and runs from the files on disk
        or, with C(drained_serve) (an apply's drain, not a rollback's), from the invocation it was drained with.
        C(helper) is the helper's path on the host, C(record_dir) where the services' start records are.
      - Without it, a drain whose run dies leaves the host out of rotation until the next run.
    type: dict
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
    admin_credential: /run/credentials/sglang-dsv4-router.service/admin-key
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
  description: Requests still in flight at the end of the wait; null when a server's load could not be read.
  returned: state=drained
  type: int
unreadable:
  description: The C(/metrics) reads that failed at the last look (URL and why), when the drain timed out on them.
  returned: state=drained
  type: list
seconds:
  description: How long the step took.
  returned: always
  type: float
out_of_rotation:
  description: The /readiness answers that showed the router out of rotation, when the drain took nothing out.
  returned: when the router was out of rotation at every look
  type: list
no_router:
  description: The router has no unit file, so nothing was put back and the state file was removed (C(restored)).
  returned: when it has none
  type: bool
workers:
  description: The workers removed (C(drained)) or put back (C(restored)).
  returned: always
  type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_drain import drain, restore


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["drained", "restored"], "required": True},
            "router_url": {"type": "str", "required": True},
            "admin_credential": {"type": "path", "required": True},
            "router_unit": {"type": "str"},
            "guard": {"type": "dict"},
            "fence": {"type": "dict"},
            "metrics_urls": {"type": "list", "elements": "str", "default": []},
            "state_file": {"type": "path", "required": True},
            "notice_seconds": {"type": "int", "default": 10},
            "timeout": {"type": "int", "default": 300},
            "router_restarted": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    step = drain if module.params["state"] == "drained" else restore
    module.exit_json(**step(module, module.params))


if __name__ == "__main__":
    main()
