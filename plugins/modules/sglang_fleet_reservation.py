#!/usr/bin/python
"""Ansible module: read, take or give back the fleet's step reservations on the reservation host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_fleet_reservation
short_description: Read, take or give back the fleet's step reservations (the hosts each run chose for its step)
description:
  - One file on one host every run reaches (the rollout role's C(sglang_rollout_reservation_host)) holds, for each
    run with a step in flight, the hosts it chose for that step, who runs it and until when its lease holds. The
    capacity guard of every run adds the other runs' reserved hosts to the hosts out of rotation, so two runs on
    different C(--limit)s can never together take more of the fleet out than C(sglang_rollout_max_unavailable).
  - C(read) returns the live entries (a lease that ended is no reservation) and the file's version.
  - C(reserved) adds this run's entry for its step, only if the file is still at O(version) (the one the step's
    choice read), a compare-and-set, so two runs never both choose on the same view. C(reserved) is false when
    another run changed the reservations in between; nothing is written then.
  - C(released) takes O(hosts) (every host of the run when empty) out of this run's entries.
  - The file is a regular file directly under C(/run) (only root can create anything there), written atomically
    under the exclusive flock of a root-only guard file beside it, never through a link; a file that cannot be read
    fails the task naming the path, and is never taken for "no reservation".
  - Bookkeeping, not a change of the deployment, so it always reports unchanged; it writes nothing in check mode.
options:
  path:
    description: The reservations file, directly in a folder only root can write (C(/run)).
    type: str
    default: /run/sglang-dsv4-reservations.json
  state:
    description: What to do.
    type: str
    choices: [read, reserved, released]
    default: read
  run_id:
    description: This run's id (C(reserved), C(released)).
    type: str
    default: ''
  owner:
    description: Who runs this run (user@controller), shown to the other runs that wait for its hosts.
    type: str
    default: ''
  step:
    description: The step's number in its run.
    type: int
    default: 0
  hosts:
    description: The hosts to reserve (C(reserved)) or to give back (C(released); empty gives back every one).
    type: list
    elements: str
    default: []
  version:
    description: The version of the reservations the step's choice read (C(reserved)).
    type: int
    default: -1
  lease:
    description: Seconds the entry holds if its run never gives it back (a killed controller).
    type: int
    default: 3600
  dead_runs:
    description: Runs whose entries go in the same write (C(reserved)), runs the operator named dead by breaking their
      lock (C(sglang_rollout_break_lock=RUN_ID)).
    type: list
    elements: str
    default: []
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: See every run's reserved hosts (on the reservation host)
  dsv4.sglang.sglang_fleet_reservation:
    state: read
  become: true
  register: reservations

- name: Give back what a dead run still holds (its id from the read above), before its lease ends
  dsv4.sglang.sglang_fleet_reservation:
    state: released
    run_id: 20261207T221500-ab12cd
  become: true
"""

RETURN = r"""
version:
  description: The reservations' version after the call (every write adds one).
  returned: always
  type: int
entries:
  description: The live entries, each C(run), C(owner), C(step), C(hosts), C(taken), C(until) and C(left) (seconds
    its lease has left).
  returned: always
  type: list
reserved:
  description: Whether this run's entry was written (C(reserved)).
  returned: when state is reserved
  type: bool
released:
  description: The hosts given back (C(released)).
  returned: when state is released
  type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_reservation

ARGUMENT_SPEC = {
    "path": {"type": "str", "default": "/run/sglang-dsv4-reservations.json"},
    "state": {"type": "str", "choices": ["read", "reserved", "released"], "default": "read"},
    "run_id": {"type": "str", "default": ""},
    "owner": {"type": "str", "default": ""},
    "step": {"type": "int", "default": 0},
    "hosts": {"type": "list", "elements": "str", "default": []},
    "version": {"type": "int", "default": -1},
    "lease": {"type": "int", "default": 3600},
    "dead_runs": {"type": "list", "elements": "str", "default": []},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["state"] != "read" and not p["run_id"]:
        module.fail_json(msg=f"sglang_fleet_reservation: state={p['state']} needs the run's run_id")
    if p["state"] == "reserved" and (not p["hosts"] or p["version"] < 0 or p["lease"] < 1):
        module.fail_json(msg="sglang_fleet_reservation: state=reserved needs hosts, the version read and a lease")
    try:
        if p["state"] == "read" or module.check_mode:
            result = sglang_reservation.read(p["path"])
        elif p["state"] == "reserved":
            result = sglang_reservation.reserve(
                p["path"],
                p["run_id"],
                p["owner"],
                p["step"],
                p["hosts"],
                p["version"],
                p["lease"],
                dead_runs=p["dead_runs"],
            )
        else:
            result = sglang_reservation.release(p["path"], p["run_id"], p["hosts"] or None)
    except sglang_reservation.ReservationError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
