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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_rotation import in_rotation


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
    module.exit_json(changed=False, **in_rotation(p["router_url"], p["status_file"], p["drain_state"], p["timeout"]))


if __name__ == "__main__":
    main()
