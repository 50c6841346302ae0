#!/usr/bin/python
"""Documentation of the action plugin sglang_fleet_rotation (plugins/action): the capacity guard's count at once."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_fleet_rotation
short_description: Ask every serving host of the inventory at once whether it is in rotation
version_added: 0.9.0
description:
  - The capacity guard's count, before the plan and before every step of a rollout. One task, run once on the
    controller, asks every host in O(hosts) concurrently (in threads, at most O(workers) at a time), each over its
    own connection with the options Ansible would use for it (its C(ansible_host), C(ansible_port),
    C(ansible_user), key and ssh arguments). Its wall time is the slowest answer, not the sum of them.
  - Each host answers the question of M(dsv4.sglang.sglang_in_rotation) (its router's C(/readiness) answers 200
    and no drain is pending; a drained host whose services serve is C(drained_serving)), run by the host's
    C(/usr/bin/python3) (or its C(ansible_python_interpreter)) from a program sent on the connection's stdin;
    no module payload and no temporary file. As root, with C(sudo -n) where the play becomes and the connecting user
    is not root (another become method cannot be used, and the host is named).
  - At most O(workers) hosts are asked at once, each given O(host_timeout) seconds from when its own question
    starts (never from the count's start); the count of N hosts is bounded by (ceil(N / O(workers)) + 1) x
    O(host_timeout) seconds (returned as C(bound)), and a long queue counts no healthy host out.
  - A host that cannot be asked (unreachable, no answer within O(host_timeout) seconds of its question, an answer
    that is not the program's) is out of rotation, with why; one whose turn never came within the bound is "not
    asked". The unknown never counts as serving.
  - Changes nothing; runs in check mode too. An action plugin; the module itself runs nowhere.
options:
  hosts:
    description: The inventory's hosts to ask.
    type: list
    elements: str
    required: true
  router_urls:
    description:
      - host -> where its router listens (the run's hosts, from their desired state); a host without one is asked
        where its last rollout recorded it (O(status_file)).
    type: dict
    default: {}
  health_urls:
    description:
      - host -> its servers' C(/health) URLs, for a host without a router (a server host of a PD pool across hosts,
        whose pool's router host answers for the pool's rotation); such a host is in rotation when every one answers
        200. A host without either is asked what its last rollout recorded (O(status_file)).
    type: dict
    default: {}
  status_file:
    description: Each host's record of its last rollout.
    type: str
    default: /var/lib/sglang-dsv4/rollout.json
  drain_state:
    description: The drain's state file on each host; present while the router's workers are out.
    type: str
    default: /run/sglang-dsv4/drain.json
  timeout:
    description: Seconds each router and service has to answer, on the host.
    type: int
    default: 5
  host_timeout:
    description: Seconds each host has to answer, counted from when its own question starts (its connection
      included); a host that has not answered by then is out of rotation.
    type: int
    default: 30
  workers:
    description: Hosts asked at the same time (each a connection, and on ssh a client process, on the controller).
    type: int
    default: 64
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Count the inventory's hosts out of rotation
  dsv4.sglang.sglang_fleet_rotation:
    hosts: "{{ groups['sglang_dsv4'] }}"
  run_once: true
  register: rotation
"""

RETURN = r"""
hosts:
  description: host -> C(available), C(why) (empty when it is), C(drained_serving), C(router_url) (the URL asked).
  returned: always
  type: dict
seconds:
  description: Wall seconds the count took.
  returned: always
  type: float
prepared:
  description: Of those, the seconds spent making each host's connection and command (on the controller, in turn).
  returned: always
  type: float
bound:
  description: The count's bound in seconds once its questions start, (ceil(hosts / workers) + 1) x host_timeout.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

# The options, once: the action plugin validates its task's arguments against this.
ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "router_urls": {"type": "dict", "default": {}},
    "health_urls": {"type": "dict", "default": {}},
    "status_file": {"type": "str", "default": "/var/lib/sglang-dsv4/rollout.json"},
    "drain_state": {"type": "str", "default": "/run/sglang-dsv4/drain.json"},
    "timeout": {"type": "int", "default": 5},
    "host_timeout": {"type": "int", "default": 30},
    "workers": {"type": "int", "default": 64},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="sglang_fleet_rotation is an action plugin: it runs on the controller, never on a host")


if __name__ == "__main__":
    main()
