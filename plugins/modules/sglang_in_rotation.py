#!/usr/bin/python
"""Ansible module: is this host in rotation now (its router ready, no drain pending)? The capacity guard's count."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_in_rotation
short_description: Whether a host serves now, as the fleet's balancer sees it
version_added: 0.9.0
description:
  - The capacity guard of a progressive rollout counts the inventory's hosts out of rotation before every step;
    this is its one question to a host. A host is in rotation when its router's C(/readiness) answers 200 (the
    router has its workers; a drained router answers 503) and no drain is pending on it (O(drain_state)).
  - Where the router listens comes from O(router_url) (for a host of the run, its desired state) or else from the
    host's record of its last rollout (O(status_file), written by every apply), so that a host outside C(--limit)
    is asked where it said it serves. A host that cannot say, or does not answer, is out of rotation, and C(why)
    says why (the guard never counts the unknown as available).
  - A drained host whose services all answer their health checks (each unit the drain recorded in its state file)
    is C(drained_serving) - an earlier run's drain that did not end - and its C(why) starts with
    C(drained, its services serving) - a rollout brings it back first, since changing it costs no capacity.
  - Changes nothing; runs in check mode too.
options:
  router_url:
    description: The router's URL on the host; empty to read it from O(status_file).
    type: str
    default: ""
  status_file:
    description: The host's record of its last rollout (C(router_url) in it).
    type: path
    default: /var/lib/sglang-dsv4/rollout.json
  drain_state:
    description: The drain's state file; present while the router's workers are out.
    type: path
    default: /run/sglang-dsv4/drain.json
  timeout:
    description: Seconds the router has to answer.
    type: int
    default: 5
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Is this host in rotation
  dsv4.sglang.sglang_in_rotation:
    router_url: http://127.0.0.1:8000
  register: rotation
"""

RETURN = r"""
available:
  description: Whether the host is in rotation.
  returned: always
  type: bool
why:
  description: Why not (empty when it is).
  returned: always
  type: str
drained_serving:
  description: A drain is pending and every service it recorded answers its health check.
  returned: always
  type: bool
router_url:
  description: The URL asked (empty when none was known).
  returned: always
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import read_regular
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_http import call
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_steps import DRAINED_SERVING


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


def drained_serving(path: str, timeout: int) -> bool:
    """Whether every service the pending drain recorded (its state file's guard settings) answers its health check
    now; False when the file names none or cannot be read."""
    try:
        entry = json.loads(read_regular(path, limit=1 << 20) or b"{}")
        units = ((entry or {}).get("guard") or {}).get("units") or []
        urls = [unit["health_url"] for unit in units]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return False
    return bool(urls) and all(call(url, timeout=timeout)[0] == 200 for url in urls)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "default": ""},
            "status_file": {"type": "path", "default": "/var/lib/sglang-dsv4/rollout.json"},
            "drain_state": {"type": "path", "default": "/run/sglang-dsv4/drain.json"},
            "timeout": {"type": "int", "default": 5},
        },
        supports_check_mode=True,
    )
    p = module.params
    url, why = (p["router_url"], "") if p["router_url"] else recorded_url(p["status_file"])
    serving = False
    if url and os.path.lexists(p["drain_state"]):
        serving = drained_serving(p["drain_state"], p["timeout"])
        kept = f"its router's workers are kept in {p['drain_state']}"
        why = f"{DRAINED_SERVING}: {kept}" if serving else f"drained: {kept}"
    elif url:
        status, message, _body = call(url.rstrip("/") + "/readiness", timeout=p["timeout"])
        if status != 200:
            why = f"its router's /readiness answered {status or message}"
    module.exit_json(changed=False, available=not why, why=why, drained_serving=serving, router_url=url)


if __name__ == "__main__":
    main()
