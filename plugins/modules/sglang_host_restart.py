#!/usr/bin/python
"""Ansible module: a host's whole restart in one call: decide from the files on disk, drain, restart, wait, undrain."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_restart
short_description: Decide, drain, restart prefill and decode together (the router on its own), wait, put back
version_added: 0.9.0
description:
  - The one path by which the SGLang services restart (the restart handler's, and the rollback's), in one
    host-side call where there were four module runs. In order, on the host and without a round trip
  - 1. Reads what each service runs from against the files on disk now (as M(dsv4.sglang.sglang_host_state)
    C(against=disk) does) and decides what restarts (module_utils/sglang_plan.py); a light-proof failure the
    caller carries (O(proof_failures)) restarts its group too.
  - 2. With O(rotation.drain) and something to restart, takes the host out of rotation and lets the servers
    finish their requests (as M(dsv4.sglang.sglang_drain) C(state=drained) does, arming the host's own guard
    with O(rotation.guard)). A drain that does not end within O(rotation.drain_timeout) fails the call, nothing
    restarted, when O(rotation.on_timeout=stop), and restarts anyway when it is C(restart).
  - 3. Restarts prefill and decode in one transaction, then the router, and waits for them within one start
    timeout (as M(dsv4.sglang.sglang_service_restart) does; a daemon-reload first where a unit needs it). A router
    restarted on a drained host that is still starting after a few seconds is sent the drain's saved workers it does
    not list (those at the servers' URLs now). Its own registration of them is a queued job that can be lost.
  - 4. Puts the workers a drain removed back (this call's drain, or one an earlier run left) and waits until the
    balancer sends to the host again (as M(dsv4.sglang.sglang_drain) C(state=restored) does).
  - 5. With O(prove), reads the host again and fails unless every service runs from exactly the files on disk,
    and one whose unit file is gone no longer runs (the rollback's proof).
  - The drain, the restart and the undrain each check and renew the rollout lock O(fence) before they act, so
    the lease is renewed as the call goes; a run that lost the lock fails with C(lost) and touches nothing more.
  - Once begun, the sequence ends on the host even when the controller loses the host mid-call (its session hung
    up); the call itself puts the host back into rotation, never leaving it drained halfway.
  - In check mode it reads and reports what it would restart, and changes nothing.
  - Its lab fault points (O(lab_fault)) are C(before_drain), C(after_drain), C(at_restart) (every restart queued,
    nothing waited for yet) and C(before_undrain).
extends_documentation_fragment:
  - dsv4.sglang.fence
  - dsv4.sglang.lab_fault
options:
  units:
    description: The services, each C(name), C(group) (C(servers) or C(router)), C(inputs), C(health_url).
    type: list
    elements: dict
    required: true
  target:
    description: The systemd target that groups the services; started when it is not active.
    type: str
    required: true
  generation_config:
    description: The path of generation_config.json (an input of both servers).
    type: path
    required: true
  record_dir:
    description: Where the services' start records are.
    type: path
    required: true
  lock_path:
    description: The rollout lock's folder (read, for the report).
    type: path
    required: true
  proof_failures:
    description: Each group's light-proof failures (C(servers), C(router)) the caller's plan found; a group
      with any restarts once even where no start record says why.
    type: dict
    default: {}
  pool_restart:
    description: xPyD. Why this host's servers restart with their PD pool across hosts although their own inputs did
      not change (the plan's reasons); the call decides with them as the plan did.
    type: list
    elements: str
    default: []
  rotation:
    description: The host's router and the drain.
    type: dict
    required: true
    suboptions:
      router_url:
        description: The router's URL on the host; empty on a host without a router (a server host of a PD pool
          across hosts).
        type: str
        default: ""
      held_by_pool:
        description: The host is one of a PD pool across hosts, whose router host took the pool's workers out of
          rotation before this call and puts them back after it (sglang_services' handlers); this call neither
          drains nor puts workers back.
        type: bool
        default: false
      pool_refusal:
        description: xPyD. Why the pool's drain does not hold this server host (it failed, timed out with
          C(on_timeout=stop), or did not run in this run). Not empty, the call fails before anything restarts when
          it would restart anything, saying this; it goes on when nothing of the host needs a restart.
        type: str
        default: ""
      admin_credential:
        description: The admin-key credential of the running router (see M(dsv4.sglang.sglang_drain)).
        type: path
        required: true
      state_file:
        description: Where the removed workers are kept until they are back.
        type: path
        required: true
      metrics_urls:
        description: The C(/metrics) URLs of prefill and decode.
        type: list
        elements: str
        default: []
      drain:
        description: Take the host out of rotation before anything restarts.
        type: bool
        default: true
      drain_timeout:
        description: The longest wait for the servers' in-flight work to end.
        type: int
        default: 300
      on_timeout:
        description: What a drain that did not end in time does, C(stop) (fail, nothing restarted) or C(restart).
        type: str
        choices: [stop, restart]
        default: stop
      notice_seconds:
        description: How long the balancer takes to notice a change of C(/readiness).
        type: int
        default: 10
      guard:
        description: The host's own guard, armed with the drain (as the option
          O(dsv4.sglang.sglang_drain#module:guard) is).
        type: dict
  timeout:
    description: The services' start timeout (TimeoutStartSec), in seconds; also the undrain's wait.
    type: int
    required: true
  orphans:
    description: The units (and the target) this collection manages; any of them that runs with no unit file is
      stopped.
    type: list
    elements: str
    default: []
  unit_dir:
    description: Where the units' files and their enable links are.
    type: path
    default: /etc/systemd/system
  secret_files:
    description: The credential files whose values are masked in quoted journal lines.
    type: list
    elements: path
    default: []
  prove:
    description: After the undrain, fail unless every service runs from exactly the files on disk (a rollback's
      proof, judged on the host).
    type: bool
    default: false
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Drain, restart what does not run from its inputs and put the host back into rotation
  dsv4.sglang.sglang_host_restart:
    units:
      - {name: sglang-dsv4-prefill, group: servers, inputs: [], health_url: "http://127.0.0.1:30000/health"}
      - {name: sglang-dsv4-decode, group: servers, inputs: [], health_url: "http://127.0.0.1:30001/health"}
      - {name: sglang-dsv4-router, group: router, inputs: [], health_url: "http://127.0.0.1:8000/readiness"}
    target: sglang-dsv4.target
    generation_config: /srv/models/DeepSeek-V4-Flash/generation_config.json
    record_dir: /run/sglang-dsv4
    lock_path: /run/sglang-dsv4-deploy
    rotation:
      router_url: http://127.0.0.1:8000
      admin_credential: /run/credentials/sglang-dsv4-router.service/admin-key
      state_file: /run/sglang-dsv4/drain.json
    timeout: 1800
"""

RETURN = r"""
plan:
  description: What the read against the files on disk decided (C(restart) reasons per group, C(restart_servers),
    C(restart_router)).
  returned: always
  type: dict
drain:
  description: What the drain returned (M(dsv4.sglang.sglang_drain) C(state=drained)), or null when none ran.
  returned: always
  type: dict
restart:
  description: What the restart returned (M(dsv4.sglang.sglang_service_restart)).
  returned: always
  type: dict
undrain:
  description: What the undrain returned (M(dsv4.sglang.sglang_drain) C(state=restored)).
  returned: always
  type: dict
waited:
  description: Seconds spent waiting for the services (the drain, start to ready, the return to rotation).
  returned: always
  type: float
"""

import signal
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lab_fault, sglang_ready
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_drain import drain, registration_nudge, restore
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_host_read import READ_SPEC, read, runs_astray
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_restart import restart

POINTS = ("before_drain", "after_drain", "at_restart", "before_undrain")

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "units": {"type": "list", "elements": "dict", "required": True},
    "target": {"type": "str", "required": True},
    "generation_config": {"type": "path", "required": True},
    "record_dir": {"type": "path", "required": True},
    "lock_path": {"type": "path", "required": True},
    "proof_failures": {"type": "dict", "default": {}},
    "pool_restart": {"type": "list", "elements": "str", "default": []},
    "rotation": {
        "type": "dict",
        "required": True,
        "options": {
            "router_url": {"type": "str", "default": ""},
            "held_by_pool": {"type": "bool", "default": False},
            "pool_refusal": {"type": "str", "default": ""},
            "admin_credential": {"type": "path", "required": True},
            "state_file": {"type": "path", "required": True},
            "metrics_urls": {"type": "list", "elements": "str", "default": []},
            "drain": {"type": "bool", "default": True},
            "drain_timeout": {"type": "int", "default": 300},
            "on_timeout": {"type": "str", "choices": ["stop", "restart"], "default": "stop"},
            "notice_seconds": {"type": "int", "default": 10},
            "guard": {"type": "dict"},
        },
    },
    "timeout": {"type": "int", "required": True},
    "orphans": {"type": "list", "elements": "str", "default": []},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    # Paths of the key files, not keys: what they hold is read on the host and never returned.
    "secret_files": {"type": "list", "elements": "path", "default": [], "no_log": False},
    "prove": {"type": "bool", "default": False},
    "fence": {"type": "dict"},
    "lab_fault": {"type": "dict"},
}


def read_disk(module: Any, proof_failures: dict, pool: list[str] | None = None) -> dict[str, Any]:
    """What each service runs from, against the files on disk now (the read of module_utils/sglang_host_read.py),
    with the pool's reasons (`pool`) as the plan had them."""
    p = module.params
    params = {name: spec.get("default") for name, spec in READ_SPEC.items()}
    params.update(
        files=[],
        generation_config={"path": p["generation_config"], "sampling": {}},
        units=p["units"],
        record_dir=p["record_dir"],
        lock_path=p["lock_path"],
        against="disk",
        proof=False,
        proof_failures=proof_failures,
        pool_restart=list(pool or []),
    )
    return read(module, params)


def drain_timed_out(drained: dict[str, Any], timeout: int) -> str:
    left = (
        f"{drained['in_flight']} request(s) still in flight"
        if drained["in_flight"] is not None
        else f"the servers' load could not be read ({'; '.join(drained['unreadable'])})"
    )
    return (
        f"the host did not drain within sglang_services_drain_timeout={timeout} s: {left}. Nothing restarted. The"
        " host is OUT OF ROTATION until its services run from the files on disk: a rollback restores them and puts"
        " it back, otherwise the next run or the host's own guard does. Raise the timeout, or set"
        " sglang_services_drain_on_timeout=restart to restart anyway."
    )


def host_restart(module: Any) -> None:
    """Decide, drain, restart, wait, undrain (and prove); exits through the module (exit_json or fail_json)."""
    p, rotation, fault = module.params, module.params["rotation"], module.params["lab_fault"]
    refused = sglang_lab_fault.refused(fault, POINTS)
    if refused:
        module.fail_json(msg=f"{refused}; nothing was changed")
    if module.check_mode:
        fault = None
    # Once begun, the sequence ends on the host: a controller that loses the host mid-call (its session hung up)
    # does not leave it drained halfway; the call drains, restarts and puts the workers back all the same. (The
    # lab's kill at a point is the other case: the call itself ends there, and the host's guard is left.)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def at(point: str) -> None:
        sglang_lab_fault.at(fault, point, lambda msg: module.fail_json(msg=msg))

    state = read_disk(module, p["proof_failures"], p["pool_restart"])
    plan = state["plan"]
    acting = plan["restart_servers"] or plan["restart_router"]
    # xPyD: a server host of a pool restarts only on a drain of its pool it could see succeed.
    if rotation["pool_refusal"] and acting:
        module.fail_json(msg=f"{rotation['pool_refusal']}; nothing restarted on this host", plan=plan)
    servers = [u for u in p["units"] if u["group"] == "servers"]
    routers = [u for u in p["units"] if u["group"] == "router"]
    common = {
        "router_url": rotation["router_url"],
        "admin_credential": rotation["admin_credential"],
        "state_file": rotation["state_file"],
        "notice_seconds": rotation["notice_seconds"],
    }

    held = rotation["held_by_pool"]
    at("before_drain")
    drained = None
    if rotation["drain"] and acting and not held:
        drained = drain(
            module,
            {
                **common,
                "metrics_urls": rotation["metrics_urls"],
                "timeout": rotation["drain_timeout"],
                # Only under a rollout's lock: the guard waits for that lease to end before it acts.
                "guard": rotation["guard"] if p["fence"] else None,
            },
        )
        at("after_drain")
        if drained["timed_out"] and rotation["on_timeout"] == "stop":
            module.fail_json(msg=drain_timed_out(drained, rotation["drain_timeout"]), plan=plan, drain=drained)

    restarted = restart(
        module,
        {
            # Before any restart: systemd does not always flag a new drop-in folder as a change (NeedDaemonReload),
            # and a restart without a reload would start the old unit while its start record names the new files.
            "daemon_reload": acting or any(u["need_reload"] for u in state["units"].values()),
            "enable": [],
            # Prefill and decode in one transaction, then the router; the target is started if it is not.
            "restart": ([[u["name"] for u in servers]] if plan["restart_servers"] else [])
            + ([[u["name"] for u in routers]] if plan["restart_router"] else []),
            "start": [p["target"]],
            # A drained router has no workers, so its /readiness stays 503 until they are back (the undrain waits
            # for it then); a router that restarts registers them itself and is waited for here.
            "wait": (servers if plan["restart_servers"] else [])
            + (
                routers
                if plan["restart_router"]
                or (plan["restart_servers"] and not held and not (drained and drained["changed"]))
                else []
            ),
            "timeout": p["timeout"],
            "margin": sglang_ready.MARGIN,
            # A service still running after its unit file was removed (a rolled-back first deploy) is stopped.
            "orphans": p["orphans"],
            "unit_dir": p["unit_dir"],
            "secret_files": p["secret_files"],
        },
        issued=lambda: at("at_restart"),
        # A router restarted on a drained host gets the workers it does not list sent again while it starts.
        nudge=registration_nudge(
            rotation["router_url"].rstrip("/"),
            rotation["admin_credential"],
            rotation["state_file"],
            routers[0]["name"],
            [u["health_url"].removesuffix("/health") for u in servers],
        )
        if plan["restart_router"] and routers and not module.check_mode and not held
        else None,
    )

    at("before_undrain")
    router_unit = f"{routers[0]['name']}.service" if routers else None
    # A host of a pool: its pool's router host puts the workers back once every server of the pool is ready.
    undrained = (
        {"changed": False, "seconds": 0.0, "held_by_pool": True}
        if held
        else restore(
            module,
            {**common, "router_unit": router_unit, "timeout": p["timeout"], "router_restarted": plan["restart_router"]},
        )
    )
    result = {
        "changed": bool(acting or restarted["changed"] or undrained["changed"]),
        "plan": plan,
        "drain": drained,
        "restart": restarted,
        "undrain": undrained,
        "waited": round((drained or {}).get("seconds", 0.0) + restarted["waited"] + undrained["seconds"], 1),
    }
    if p["prove"] and not module.check_mode:
        astray = runs_astray(read_disk(module, {})["units"])
        if astray:
            module.fail_json(
                msg=f"after the restart these services do not run from the files on disk: {'; '.join(astray)}",
                **result,
            )
    module.exit_json(**result)


def main() -> None:
    host_restart(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
