#!/usr/bin/python
"""Documentation of the action plugin sglang_step_reservation (plugins/action): a step's hosts, reserved fleet-wide."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_step_reservation
short_description: Count the fleet, choose this step's hosts and reserve them fleet-wide, in one task
description:
  - Before each step of a rollout, on the controller, delegated to the reservation host
    (C(sglang_rollout_reservation_host)). Counts every serving host of the inventory as
    M(dsv4.sglang.sglang_fleet_rotation) does (O(count)), reads the fleet's step reservations there
    (M(dsv4.sglang.sglang_fleet_reservation)), adds the hosts other runs reserved to the hosts out of rotation,
    chooses the step's hosts under the capacity guard, and reserves them with a compare-and-set on the version
    its choice read. Another run that reserved in between makes it read, count and choose again; so two runs on
    different C(--limit)s never together take more of the fleet out than the guard allows.
  - A step that the other runs' reserved hosts leave no room for waits for them, counting again every
    C(reservation.poll) seconds, at most C(reservation.wait) seconds; a step with no room without them stops at
    once (its line says why), as the guard always did.
  - In check mode it counts, reads and chooses, and reserves nothing.
  - An action plugin; the module itself runs nowhere.
options:
  count:
    description: The count's settings, as M(dsv4.sglang.sglang_fleet_rotation) takes them.
    type: dict
    required: true
  counted:
    description: A count just made (host to why out) for the first try to start from; null counts first.
    type: dict
  run_hosts:
    description: The run's hosts (a failed one counts as out, "failed in this run").
    type: list
    elements: str
    required: true
  alive:
    description: The run's hosts that have not failed.
    type: list
    elements: str
    required: true
  choice:
    description: The step's choice (C(number), C(changing), C(done), C(serving), C(inventory), C(settings)), as the
      filter dsv4.sglang.sglang_rollout_next_step takes it.
    type: dict
    required: true
  reservation:
    description: C(path), C(run_id), C(owner), C(lease) (seconds), C(wait) (seconds), C(poll) (seconds).
    type: dict
    required: true
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Choose this step's hosts and reserve them
  dsv4.sglang.sglang_step_reservation:
    count: "{{ _sglang_rollout_count }}"
    run_hosts: "{{ ansible_play_hosts_all }}"
    alive: "{{ ansible_play_hosts }}"
    choice: "{{ choice }}"
    reservation:
      path: /run/sglang-dsv4-reservations.json
      run_id: "{{ run_id }}"
      owner: me@controller
      lease: 4000
      wait: 3600
      poll: 15
  delegate_to: "{{ sglang_rollout_reservation_host }}"
  run_once: true
"""

RETURN = r"""
step:
  description: The step, as the filter dsv4.sglang.sglang_rollout_next_step returns it, and C(reserved).
  returned: always
  type: dict
unavailable:
  description: host -> why it is out of rotation for this step (the count's, and the other runs' reservations).
  returned: always
  type: dict
reserved:
  description: Whether the step's hosts were reserved (never in check mode, never when the step has none).
  returned: always
  type: bool
entries:
  description: The reservations the choice read (every run's live entry).
  returned: always
  type: list
waited:
  description: Seconds the step waited for room other runs held.
  returned: always
  type: float
tries:
  description: How many times the step counted, read and chose.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

# The options, once: the action plugin validates its task's arguments against this.
ARGUMENT_SPEC = {
    "count": {"type": "dict", "required": True},
    "counted": {"type": "dict"},
    "run_hosts": {"type": "list", "elements": "str", "required": True},
    "alive": {"type": "list", "elements": "str", "required": True},
    "choice": {"type": "dict", "required": True},
    "reservation": {"type": "dict", "required": True},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="sglang_step_reservation is an action plugin: it runs on the controller, never on a host")


if __name__ == "__main__":
    main()
