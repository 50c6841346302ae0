"""Progressive rollouts: the steps a run takes, the capacity guard that bounds each batch, and what the plan says
of them (filters sglang_step_errors, sglang_rollout_schedule, sglang_rollout_next_step).

- A step is a batch size, a whole number of hosts or a percentage of the hosts that change ("25%": rounded up, at
  least one host), as Ansible's `serial` list takes them; the last step repeats until every host has changed.
- The guard (`sglang_rollout_max_unavailable`) is a count or a percentage of the inventory's serving hosts
  (rounded down, at least one host, as Kubernetes' maxUnavailable is rounded down). No batch takes more hosts out
  of rotation than the guard less the hosts already unavailable (not serving, not ready, or drained), counted on
  the whole inventory before every batch; a batch the guard reduces to nothing stops the run.
- A PD pool across hosts (xPyD, settings["pools"]: host -> its sglang_services_pool) is one unit of all of this: it
  changes as one (its prefills and decodes restart together, never a prefill beside a decode of other settings),
  so a step takes whole pools, and a step's size and the guard count a pool as one. A pool's availability is asked
  of what serves it, its router host (settings["pool_routers"]): it serves when its router does, whatever a member
  that answered says (a new member on its first deploy); it does not when its router host answered that it does
  not; and a host of it that could not be asked (UNKNOWN) makes it unknown: counted out of rotation for the guard's
  room (the unknown never counts as serving) and still costing capacity when a step takes it (the unknown never
  makes a step free). A step that would leave the inventory with nothing in rotation because it takes a pool (the
  pool's whole capacity goes while its servers restart) is refused unless the operator allowed that pool by name
  (settings["allow_pool_outage"], sglang_rollout_allow_pool_outage).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_canary import SERVICES
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_rotation import DRAINED_SERVING

PERCENT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)%$")
# ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses.
COUNT = re.compile(r"^[0-9]+$")
# The whys of a host the count could not ask (sglang_fleet_rotation's, and out_of_rotation's own): what it serves is
# unknown, never known to be out.
UNKNOWN = ("cannot be asked", "cannot be reached", "did not answer", "not in the inventory", "not asked", "failed in")


def unknown(why: Any) -> bool:
    """Whether a host's why says the count could not learn whether it serves."""
    return str(why).startswith(UNKNOWN)


# DRAINED_SERVING (sglang_rotation.in_rotation) is the why of a host the guard counts out of rotation because an
# earlier run's drain left its workers out while its services run: the run brings it back first, at no capacity cost.


class Units:
    """The units a rollout counts: a host of its own, or a PD pool across hosts (all of its hosts as one). A pool's
    key is its first host in `order` (the inventory's), so a unit is always named by a host; `pools` maps hosts to
    their pool's name (a pool named by one host only is a host of its own); `routers`, the hosts that run a pool's
    router (what serves the pool)."""

    def __init__(
        self,
        pools: dict[str, Any] | None,
        order: list[str],
        routers: list[str] | tuple[str, ...] = (),
        services: dict[str, Any] | None = None,
    ) -> None:
        named = {str(host): str(pool) for host, pool in (pools or {}).items() if pool}
        members: dict[str, list[str]] = {}
        for host in dict.fromkeys([*order, *sorted(named)]):
            if host in named:
                members.setdefault(named[host], []).append(host)
        self.members = {pool: hosts for pool, hosts in members.items() if len(hosts) > 1}
        self.key = {host: hosts[0] for hosts in self.members.values() for host in hosts}
        self.pool_of_key = {hosts[0]: pool for pool, hosts in self.members.items()}
        self.routers = {pool: [host for host in hosts if host in routers] for pool, hosts in self.members.items()}
        self._services = {str(host): list(found) for host, found in (services or {}).items() if found}

    def services(self, host: str) -> list[str]:
        """The services a host runs (a pool's host: those of its topology; a host of its own: all three)."""
        return list(self._services.get(host) or SERVICES) if host in self.key else list(SERVICES)

    def unit(self, host: str) -> str:
        return self.key.get(host, host)

    def units(self, hosts: list[str]) -> list[str]:
        return list(dict.fromkeys(self.unit(host) for host in hosts))

    def expand(self, units: list[str], hosts: list[str]) -> list[str]:
        """The hosts of `hosts` that belong to `units`: unit by unit in the units' order, each pool's hosts in the
        order of `hosts`."""
        return [host for unit in units for host in hosts if self.unit(host) == unit]

    def pool(self, unit: str) -> str | None:
        return self.pool_of_key.get(unit)

    def down(self, unavailable: dict[str, str]) -> dict[str, str]:
        """The units the guard counts out of rotation, each with why: a host of its own when it is; a pool when its
        router host answered that it does not serve, or when any of its hosts could not be asked (the unknown never
        counts as serving). A pool whose router serves is in rotation, whatever a member that answered says."""
        out: dict[str, list[str]] = {}
        for host in sorted(unavailable):
            out.setdefault(self.unit(host), []).append(host)
        return {
            unit: (
                str(unavailable[hosts[0]])
                if unit not in self.pool_of_key
                else "; ".join(f"{host}: {unavailable[host]}" for host in hosts)
            )
            for unit, hosts in out.items()
            if unit not in self.pool_of_key
            or self._not_serving(unit, unavailable)
            or any(unknown(unavailable[host]) for host in hosts)
        }

    def _not_serving(self, unit: str, unavailable: dict[str, str]) -> bool:
        """A pool whose every router host answered that it does not serve (a pool with no router host known to the
        inventory is judged by its hosts: all of them out)."""
        hosts = self.routers.get(self.pool_of_key[unit]) or self.members[self.pool_of_key[unit]]
        return all(host in unavailable and not unknown(unavailable[host]) for host in hosts)

    def costly(self, down: dict[str, str], unavailable: dict[str, str]) -> list[str]:
        """The units of `down` (what down() counts) that a step does not take at no capacity cost: a pool with a host
        that could not be asked and whose router host does not say it is out may serve. (A host of its own that is
        out, and a pool whose router host answered that it does not serve, are known not to serve: free to take.)"""
        return [unit for unit in down if unit in self.pool_of_key and not self._not_serving(unit, unavailable)]

    def serving(self, serving: list[str], hosts: list[str]) -> list[str]:
        """The units of `hosts` all of whose hosts serve."""
        return [unit for unit in self.units(hosts) if all(h in serving for h in self.expand([unit], hosts))]

    def name(self, unit: str, hosts: list[str]) -> str:
        """How a line names a unit: a host, or a pool with its hosts."""
        pool = self.pool(unit)
        return unit if pool is None else f"pool {pool} ({', '.join(self.expand([unit], hosts))})"


def _spec_errors(variable: str, spec: Any) -> list[str]:
    if isinstance(spec, bool):
        return [f"{variable}={spec!r} must be a whole number of hosts or a percentage such as '25%'"]
    if isinstance(spec, int):
        return [] if spec >= 1 else [f"{variable}={spec!r} must be at least 1 host"]
    if isinstance(spec, str):
        if COUNT.match(spec):
            return [] if int(spec) >= 1 else [f"{variable}={spec!r} must be at least 1 host"]
        found = PERCENT.match(spec.strip())
        if found and 0 < float(found.group(1)) <= 100:
            return []
    return [f"{variable}={spec!r} must be a whole number of hosts (at least 1) or a percentage from '1%' to '100%'"]


def whole_fleet(max_unavailable: Any, inventory: int) -> bool:
    """Whether the guard as written lets every serving host of the inventory out of rotation at once: a share of
    100%, or a count of at least the inventory's hosts where it has more than one (a one-host fleet has no other
    guard than one host)."""
    if isinstance(max_unavailable, str) and PERCENT.match(max_unavailable.strip()):
        return float(max_unavailable.strip()[:-1]) >= 100
    return inventory > 1 and int(max_unavailable) >= inventory


def step_errors(
    steps: Any, max_unavailable: Any, inventory: int | None = None, allow_whole_fleet: Any = False
) -> list[str]:
    """What is wrong with the steps and the guard, each message naming the variable and the value. With the
    inventory's size: a guard that lets the whole fleet out of rotation at once is refused unless the operator
    allowed it by name (sglang_rollout_allow_whole_fleet)."""
    errors: list[str] = []
    if not isinstance(steps, list) or not steps:
        errors.append(f"sglang_rollout_steps={steps!r} must be a non-empty list of host counts or percentages")
    else:
        for index, spec in enumerate(steps):
            errors += _spec_errors(f"sglang_rollout_steps[{index}]", spec)
    guard_errors = _spec_errors("sglang_rollout_max_unavailable", max_unavailable)
    errors += guard_errors
    if not isinstance(allow_whole_fleet, bool):
        errors.append(f"sglang_rollout_allow_whole_fleet={allow_whole_fleet!r} must be true or false")
    elif (
        not guard_errors and inventory is not None and whole_fleet(max_unavailable, inventory) and not allow_whole_fleet
    ):
        errors.append(
            f"sglang_rollout_max_unavailable={max_unavailable!r} lets every one of the inventory's {inventory} serving"
            " host(s) out of rotation at once: no capacity guard at all. Set a smaller guard, or allow it by name with"
            " sglang_rollout_allow_whole_fleet=true"
        )
    return errors


def amount(spec: Any, total: int, round_up: bool = True) -> int:
    """A count, or a percentage of total (rounded up for a step, down for the guard), at least 1."""
    if isinstance(spec, str) and spec.strip().endswith("%"):
        share = float(spec.strip()[:-1]) * total / 100
        value = math.ceil(share - 1e-9) if round_up else math.floor(share + 1e-9)
    else:
        value = int(spec)
    return max(1, value)


def guard(max_unavailable: Any, serving: int) -> int:
    """How many of the inventory's serving hosts may be out of rotation at once."""
    return amount(max_unavailable, serving, round_up=False)


def batch_size(steps: list[Any], index: int, changing: int) -> int:
    """The size step `index` asks for (the last step repeats)."""
    return amount(steps[min(index, len(steps) - 1)], changing)


def next_batch(
    pending: list[str],
    steps: list[Any],
    index: int,
    changing: int,
    allowed: int,
    unavailable: list[str],
    fresh: list[str] | tuple[str, ...] = (),
    returning: list[str] | tuple[str, ...] = (),
    costly: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The next batch: the first hosts still to change, as many as the step asks and the guard allows now.

    pending: hosts still to change, in inventory order; changing: how many change in the whole run; allowed: the
    guard; unavailable: the inventory's hosts out of rotation now (a host of the batch that is itself unavailable
    takes no more capacity away, so it is not counted twice); fresh: the run's hosts that did not serve when the run
    planned (a host added to the fleet, on its first deploy). Where the guard holds the serving hosts back, a fresh
    host further down the list still goes: its change is what brings it into rotation (as Kubernetes replaces
    unavailable pods first). A host that served at the plan and fell over since is no such host: it waits its turn.
    returning: the run's hosts out of rotation only because an earlier run's drain left their workers out while
    their services serve (DRAINED_SERVING): they go first, whatever the guard, since changing them costs no capacity
    and brings them back (as a disruption budget counts the evictions it can undo). costly: those of `unavailable`
    that are not known to be out (a pool with a host that could not be asked): counted out for the room, and still
    taking room when the batch takes them (the unknown never makes a step free)."""
    wanted = batch_size(steps, index, changing)
    down = set(unavailable)
    room = allowed - len(down)
    batch: list[str] = []
    held = False
    # The run's own drained hosts whose services serve go first: their change is what brings them back.
    back = [host for host in pending if host in returning and host in down]
    for host in back + [host for host in pending if host not in back]:
        if len(batch) >= wanted:
            break
        if host in down and host not in costly:
            if not held or host in fresh or host in back:
                batch.append(host)  # already out of rotation: changing it costs no more capacity
        elif room > 0 and not held:
            batch.append(host)
            room -= 1
        else:
            held = True
    return {"hosts": batch, "wanted": wanted, "room": max(allowed - len(down), 0), "unavailable": sorted(down)}


def schedule(
    changing: list[str],
    steps: list[Any],
    allowed: int,
    unavailable: list[str],
    fresh: list[str] | tuple[str, ...] = (),
    returning: list[str] | tuple[str, ...] = (),
    costly: list[str] | tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The plan's batches (next_batch's arguments), as they would be if every step succeeds (a host out of rotation
    that a step changes serves after it) and no other host's health changes during the run."""
    pending, batches, index, down = list(changing), [], 0, list(unavailable)
    while pending:
        batch = next_batch(pending, steps, index, len(changing), allowed, down, fresh, returning, costly)
        if not batch["hosts"]:
            batches.append({**batch, "step": index + 1, "stopped": True})
            break
        batches.append({**batch, "step": index + 1, "stopped": False})
        pending = [host for host in pending if host not in batch["hosts"]]
        down = [host for host in down if host not in batch["hosts"]]
        index += 1
    return batches


def estimate(hosts: list[str], restart_seconds: dict[str, Any], settings: dict[str, Any], analysed: bool) -> float:
    """Seconds one batch of these hosts takes: the slowest host's measured restart (start to ready, from its
    journal; the start timeout when none was measured), the drain (two notices and the in-flight wait, counted as
    one notice), the verification, and the analysis when it runs (initial delay and every round)."""
    slowest = max((_seconds(restart_seconds.get(h)) or float(settings["start_timeout"]) for h in hosts), default=0.0)
    drain = 3 * float(settings["notice"]) if settings.get("drain") else 0.0
    analysis = (
        float(settings["initial_delay"]) + float(settings["interval"]) * int(settings["count"]) if analysed else 0.0
    )
    return round(slowest + drain + float(settings.get("verification", 10)) + analysis, 1)


def returning_hosts(changing: list[str], unavailable: dict[str, str]) -> list[str]:
    """The hosts of the run out of rotation only because a drain left their workers out while they serve."""
    return [host for host in changing if str(unavailable.get(host, "")).startswith(DRAINED_SERVING)]


def _seconds(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def step_of(
    number: int,
    hosts: list[str],
    pending_after: list[str],
    serving: list[str],
    analysis: bool,
    units: Units | None = None,
) -> dict[str, Any]:
    """What one step's analysis judges, unit by unit, against the hosts that serve and have not changed yet (none:
    the latencies are not compared, every other check still runs). A host of its own is judged when it served before
    the run (a host's first start had no traffic to judge), as a whole: its prefill, decode and router. A pool across
    hosts is judged as one unit, through its router host, when that host served before the run: the judged host
    (step["analysed"]) maps, in step["judge"], to every host of the pool with the services it runs (each host is
    expected to export only those). A pool of the step with no router host in it cannot be judged
    (step["unjudged"]: the plan refuses the run)."""
    units = units or Units(None, hosts)
    stable = [host for host in pending_after if host in serving]
    judge: dict[str, dict[str, list[str]]] = {}
    names: list[str] = []
    unjudged: list[str] = []
    for unit in units.units(hosts) if analysis else []:
        pool = units.pool(unit)
        if pool is None:
            if unit in serving:
                judge[unit] = {unit: units.services(unit)}
                names.append(unit)
            continue
        members = units.expand([unit], hosts)
        router = next((host for host in members if host in units.routers.get(pool, ())), None)
        if router is None:
            unjudged.append(units.name(unit, hosts))
        elif router in serving:
            judge[router] = {host: units.services(host) for host in members}
            names.append(f"pool {pool} (through {router})")
    return {
        "step": number,
        "hosts": hosts,
        "analysed": list(judge),
        "analysed_names": names,
        "judge": judge,
        "unjudged": unjudged,
        "stable": stable,
        "compare": bool(stable),
    }


def describe_step(step: dict[str, Any], total: int, guard_now: int, unavailable: list[str]) -> str:
    """One line of the plan (or of the run, before a step) for one step. A step of pools (step["named"], the pools
    with their hosts) counts its units: a pool is one."""
    size = len(step.get("units") or step["hosts"])
    text = f"step {step['step']}: {step.get('named') or ', '.join(step['hosts'])} ({size} of {total}"
    # Smaller than the step asks only because the guard held hosts back (not because fewer were left).
    if step.get("wanted") and step["wanted"] > size and step.get("held"):
        text += f"; the step asks {step['wanted']}, the guard allows {size}"
        text += f": {len(unavailable)} of {guard_now} already out of rotation" if unavailable else ""
    text += ")"
    judged = step.get("analysed_names") or step["analysed"]
    if not step["analysed"]:
        text += "; analysis: none" + ("" if step.get("analysis", True) else " (sglang_rollout_analysis=false)")
    elif step["compare"]:
        text += f"; analysis of {', '.join(judged)} against {', '.join(step['stable'])} (not yet changed)"
    else:
        text += (
            f"; analysis of {', '.join(judged)} without latency comparison (no host left unchanged):"
            " success, transfer failures, defaults in effect, answers"
        )
    if step.get("estimate") is not None:
        text += f"; about {round(step['estimate'])} s"
    return text


def _counted(
    changing: list[str], serving: list[str], inventory: list[str], unavailable: dict[str, str], settings: dict[str, Any]
) -> dict[str, Any]:
    """What the guard and the steps count, in units (a host, or a pool across hosts as one): the run's units, the
    inventory's, those out of rotation now (with why), those not serving at the plan, those brought back first."""
    units = Units(
        settings.get("pools"),
        [*inventory, *changing],
        settings.get("pool_routers") or (),
        settings.get("pool_services"),
    )
    down = units.down(unavailable)
    changing_units = units.units(changing)
    back = [
        unit
        for unit in changing_units
        if any(units.unit(h) == unit for h in unavailable)
        and all(str(unavailable[h]).startswith(DRAINED_SERVING) for h in unavailable if units.unit(h) == unit)
    ]
    return {
        "units": units,
        "changing": changing_units,
        "inventory": units.units(inventory),
        "down": down,
        # Counted out, but not known to be: a step that takes one of these pays for it.
        "costly": units.costly(down, unavailable),
        "fresh": [unit for unit in changing_units if unit not in units.serving(serving, changing)],
        "back": back,
    }


def pool_outages(
    batch: list[str], counted: dict[str, Any], down: list[str], allowed_pools: list[Any] | tuple[Any, ...] = ()
) -> list[str]:
    """The pools of a batch (its units) the operator did not allow to take the inventory's last capacity: when the
    batch takes a pool in rotation and leaves no unit of the inventory in rotation (the pool's servers all restart at
    once). A pool known not to serve (its router host says so: its first deploy) has no capacity to lose; one with a
    host that could not be asked may serve, and is asked for like one in rotation."""
    units = counted["units"]
    pools = [units.pool(unit) for unit in batch if units.pool(unit) and (unit not in down or unit in counted["costly"])]
    left = [unit for unit in counted["inventory"] if unit not in batch and unit not in down]
    if not pools or left:
        return []
    allowed = {str(name) for name in allowed_pools}
    return [str(pool) for pool in pools if pool not in allowed]


def _outage_line(number: int, refused: list[str], counted: dict[str, Any], changing: list[str]) -> str:
    units = counted["units"]
    named = "; ".join(units.name(units.members[pool][0], changing) for pool in refused)
    down = counted["down"]
    out = f" (out of rotation: {'; '.join(f'{unit}: {why}' for unit, why in sorted(down.items()))})" if down else ""
    return (
        f"step {number}: NONE: it would take {named} while nothing else of the inventory is in rotation{out}: a pool's"
        " prefills and decodes restart as one, so the pool's whole capacity, here the inventory's last, is out until"
        " they are ready again. Nothing was changed. Allow it by name with"
        f" sglang_rollout_allow_pool_outage={sorted(refused)!r}, or bring other capacity into rotation first"
    )


def _with_units(step: dict[str, Any], batch: list[str], counted: dict[str, Any], changing: list[str]) -> None:
    """A step of pools names its units (a pool with its hosts)."""
    units = counted["units"]
    if any(units.pool(unit) for unit in batch):
        step["units"] = list(batch)
        step["named"] = ", ".join(units.name(unit, changing) for unit in batch)
        step["pools"] = [units.pool(unit) for unit in batch if units.pool(unit)]


def plan(
    changing: list[str],
    serving: list[str],
    inventory: list[str],
    unavailable: dict[str, str],
    settings: dict[str, Any],
    restart_seconds: dict[str, Any],
) -> dict[str, Any]:
    """The run's steps as the plan sees them (the guard counted from the health read now; counted again before each
    step), with an estimate per step and in total, and the plan table's lines.

    changing: the hosts that change, in inventory order; serving: those whose services all run now; inventory: the
    inventory's serving hosts (group sglang_dsv4, outside --limit too); unavailable: those out of rotation now, with
    why; settings: steps, max_unavailable, analysis, pause_after and what estimate() reads."""
    counted = _counted(changing, serving, inventory, unavailable, settings)
    units = counted["units"]
    allowed = guard(settings["max_unavailable"], len(counted["inventory"]))
    down = sorted(counted["down"])
    back = counted["back"]
    batches = schedule(counted["changing"], settings["steps"], allowed, down, counted["fresh"], back, counted["costly"])
    steps, pending, total, refused = [], list(changing), 0.0, []
    for batch in batches:
        hosts = units.expand(batch["hosts"], changing)
        outage = (
            []
            if batch["stopped"]
            else pool_outages(batch["hosts"], counted, down, settings.get("allow_pool_outage") or ())
        )
        pending = [host for host in pending if host not in hosts]
        step = step_of(batch["step"], hosts, pending, serving, bool(settings["analysis"]), units)
        step.update(
            wanted=batch["wanted"],
            stopped=batch["stopped"] or bool(outage),
            analysis=bool(settings["analysis"]),
            held=bool(pending),
        )
        _with_units(step, batch["hosts"], counted, changing)
        if outage:
            step["refused"] = outage
            refused += outage
        elif not batch["stopped"]:
            step["estimate"] = estimate(hosts, restart_seconds, settings, bool(step["analysed"]))
            total += step["estimate"]
        steps.append(step)
        if outage:
            break
    noun = "unit(s) (a host, or a pool across hosts as one)" if units.members else "host(s)"
    lines = [
        f"rollout: {len(counted['changing'])} {noun} change in"
        f" {len([s for s in steps if not s['stopped']])} step(s) (sglang_rollout_steps={settings['steps']}); the guard:"
        f" at most {allowed} of the inventory's {len(counted['inventory'])} serving"
        f" {'unit(s)' if units.members else 'host(s)'} out of rotation at once"
        f" (sglang_rollout_max_unavailable={settings['max_unavailable']!r}), counted again before each step",
    ]
    for pool, members in units.members.items():
        if any(host in changing for host in members):
            lines.append(
                f"pool {pool}: {', '.join(members)} change as one (every prefill and decode restarts together,"
                " the router is told before they leave and after they return)"
            )
    if down:
        lines.append(
            "out of rotation now: "
            + "; ".join(f"{units.name(unit, inventory)} ({counted['down'][unit]})" for unit in down)
        )
    if back:
        lines.append(
            f"brought back first: {', '.join(units.name(unit, changing) for unit in back)} (an earlier run's drain left"
            " the workers out while the services serve; changing them costs no capacity and puts them back into"
            " rotation)"
        )
    for step in steps:
        if step.get("refused"):
            lines.append(_outage_line(step["step"], step["refused"], counted, changing))
        elif step["stopped"]:
            lines.append(
                f"step {step['step']}: NONE: the guard leaves no room ({len(down)} of {allowed} out of rotation);"
                " the run stops here unless hosts come back"
            )
        else:
            lines.append(describe_step(step, len(counted["changing"]), allowed, down))
    pause = settings.get("pause_after")
    if pause and int(pause) < len(steps):
        lines.append(f"pause after step {pause} (sglang_rollout_pause_after): run again to go on")
    if changing:
        lines.append(f"estimate: about {round(total)} s in all (restarts measured from each host's journal)")
    return {
        "guard": allowed,
        "steps": steps,
        "estimate": round(total, 1),
        "lines": lines,
        "analysis": any(step["analysed"] for step in steps),
        "serving": serving,
        # Pools whose step would take the inventory's last capacity, not allowed by name: the plan refuses the run.
        "refused": refused,
        # Pools a step's analysis cannot judge (no host of the pool in the step runs its router: the inventory's pool
        # checks allow none such): the plan refuses the run rather than start one that can only roll back.
        "pool_analysis": [name for step in steps for name in step.get("unjudged") or []],
    }


def next_step(
    number: int,
    changing: list[str],
    done: list[str],
    serving: list[str],
    inventory: list[str],
    unavailable: dict[str, str],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The step the run takes now, from the health read just before it: its hosts (the guard less the hosts out of
    rotation now), what its analysis judges, and its line. No hosts: the guard leaves no room, the run stops."""
    pending = [host for host in changing if host not in done]
    counted = _counted(changing, serving, inventory, unavailable, settings)
    units = counted["units"]
    allowed = guard(settings["max_unavailable"], len(counted["inventory"]))
    back = [unit for unit in counted["back"] if unit in units.units(pending)]
    out = sorted(counted["down"])
    batch = next_batch(
        units.units(pending),
        settings["steps"],
        number - 1,
        len(counted["changing"]),
        allowed,
        out,
        counted["fresh"],
        back,
        counted["costly"],
    )
    outage = pool_outages(batch["hosts"], counted, out, settings.get("allow_pool_outage") or ())
    hosts = [] if outage else units.expand(batch["hosts"], pending)
    after = [host for host in pending if host not in hosts]
    step = step_of(number, hosts, after, serving, bool(settings["analysis"]), units)
    step.update(wanted=batch["wanted"], analysis=bool(settings["analysis"]), pending=pending, held=bool(after))
    if hosts:
        _with_units(step, batch["hosts"], counted, changing)
    if outage:
        step["refused"] = outage
        step["line"] = _outage_line(number, outage, counted, changing)
    elif hosts:
        step["line"] = describe_step(step, len(counted["changing"]), allowed, out)
        first = [units.name(unit, changing) for unit in batch["hosts"] if unit in back]
        if first:
            step["line"] += f"; brought back first (drained, serving; no capacity lost): {', '.join(first)}"
    else:
        why = "; ".join(f"{units.name(unit, inventory)}: {counted['down'][unit]}" for unit in out)
        step["line"] = (
            f"step {number}: the guard leaves no room: {len(out)} of the inventory's {len(counted['inventory'])}"
            f" serving {'units' if units.members else 'hosts'} are out of rotation ({why}), at most {allowed} may be"
            f" (sglang_rollout_max_unavailable={settings['max_unavailable']!r}). The rollout stops before this step;"
            f" {len(pending)} host(s) not changed: {', '.join(pending)}. Bring those hosts back into rotation (or"
            " raise the guard), then run again: the hosts already changed are no-ops."
        )
    return step


def out_of_rotation(inventory: list[str], answers: dict[str, Any], run: list[str], alive: list[str]) -> dict[str, str]:
    """The inventory's hosts out of rotation, each with why, from one count of the action sglang_fleet_rotation:
    `answers`, host -> its answer; `run`, the run's hosts; `alive`, the run's hosts that have not failed (a failed
    one is not asked). A host without an answer is out: the unknown never counts as serving."""
    out: dict[str, str] = {}
    for host in inventory:
        result = (answers or {}).get(host)
        if host in run and host not in alive:
            out[host] = "failed in this run"
        elif not isinstance(result, dict) or not result:
            out[host] = "not asked"
        elif result.get("available") is not True:
            out[host] = str(result.get("why") or "did not say")
    return out


# A host's outcome at the end of its step (the fact sglang_rollout_outcome: "changed" from playbooks/tasks/step.yml,
# the others from sglang_rollout's rollback.yml); a step's host without one was lost.
VERDICTS = ("changed", "rolled back", "rollback failed", "lock lost", "not locked")


def _lost_line(host: str, number: int, lock: dict[str, Any] | None, run_id: str) -> str:
    if not lock or not lock.get("run_id"):
        return (
            f"{host}: LOST in step {number} while or before it took the lock (unreachable): NOT changed by this run;"
            f" it may hold this run's lock (run {run_id}) until its lease ends. Once it can be reached:"
            f" ansible-playbook deploy.yml --limit {host} -e sglang_rollout_break_lock={run_id}"
        )
    return (
        f"{host}: LOST in step {number} (unreachable, or it never reached its step's end): NOT rolled back, its"
        " files possibly half-written; possibly OUT OF ROTATION (drained) until its lease on"
        f" {lock.get('path', '?')} ends, at most {lock.get('lease', '?')} s after its last renewal, when its own guard"
        " puts the workers back if its services run from the files on disk; the lock stays held by run"
        f" {lock['run_id']}. Once it can be reached: ansible-playbook deploy.yml --limit {host}"
        f" -e sglang_rollout_break_lock={lock['run_id']}"
    )


def step_report(
    number: int,
    step_hosts: list[str],
    hosts: list[str],
    alive: list[str],
    done: list[str],
    verdicts: dict[str, Any],
    locks: dict[str, Any],
    settings: dict[str, Any],
    analysis_failures: list[str] | tuple[str, ...] = (),
    run_id: str = "?",
) -> dict[str, Any]:
    """What one step did, host by host, and whether the run stops, pauses or goes on (playbooks/tasks/step.yml).

    hosts: the apply's hosts in inventory order; alive: those still in the play; done: every step's hosts so far
    (this one's included); verdicts: host -> its outcome (VERDICTS, "" for none); locks: host -> the fence it took
    ({path, run_id, lease}), for the message of a lost host. A step's host without an outcome was lost: it stops
    the run and is never counted as rolled back; a host that dropped out before its step never changed; a host
    that changed but failed after (the lock's release) fails the step. The last line counts them apart."""
    verdict = {host: str(verdicts.get(host) or "") for host in hosts}
    for host in hosts:
        if verdict[host] not in VERDICTS:
            verdict[host] = ""
    lost = [host for host in step_hosts if not verdict[host]]
    failed = [host for host in step_hosts if verdict[host] != "changed" or host not in alive]
    dropped = [host for host in hosts if host not in done and host not in alive]
    left = [host for host in hosts if host not in done and host in alive]
    percent = int(settings.get("max_fail_percentage") or 0)
    stop = bool(lost) or bool(failed and (analysis_failures or len(failed) * 100 > percent * len(step_hosts)))
    pause = not stop and int(settings.get("pause_after") or 0) == number and bool(left)
    lines = [_lost_line(host, number, locks.get(host), run_id) for host in lost]
    for host in dropped:
        lines.append(f"{host}: dropped out of the run before its step (unreachable): NOT changed by this run")
    for kind, said in (
        ("rolled back", "rolled back to their state before this run"),
        ("rollback failed", "NOT rolled back: the rollback failed"),
        ("lock lost", "NOT rolled back: this run lost their lock to another run"),
        ("not locked", "not changed: another run held their lock"),
    ):
        named = [host for host in step_hosts if verdict[host] == kind]
        if named:
            lines.append(f"step {number}: {said} (see above): {', '.join(named)}")
    late = [host for host in step_hosts if verdict[host] == "changed" and host not in alive]
    if late:
        lines.append(
            f"step {number}: changed and verified, then failed at the step's end (see above): {', '.join(late)}"
        )
    if stop:
        lines.append(
            f"step {number} failed on {', '.join(failed)}: the rollout stops; {len(left)} host(s) not changed"
            + (f": {', '.join(left)}" if left else "")
        )
    elif pause:
        lines.append(
            f"paused after step {number} (sglang_rollout_pause_after): {len(left)} host(s) not changed yet:"
            f" {', '.join(left)}. Look at the changed hosts; run again without sglang_rollout_pause_after to go on"
            " (the changed hosts are no-ops)."
        )
    end = stop or pause or not left
    if end:
        ran = [host for host in hosts if host in done]
        groups = {kind: [host for host in ran if verdict[host] == kind] for kind in VERDICTS}
        lost_all = [host for host in ran if not verdict[host]]
        not_rolled_back = groups["rollback failed"] + groups["lock lost"]
        untouched = [host for host in hosts if host not in done] + groups["not locked"]
        every = len(groups["changed"]) == len(hosts) and not late
        lines.append(
            ("every host changed: " if every else "rollout: ")
            + f"{len(groups['changed'])} changed, {len(groups['rolled back'])} rolled back,"
            f" {len(not_rolled_back)} failed and NOT rolled back, {len(lost_all)} lost, {len(untouched)} untouched,"
            f" of {len(hosts)}"
            + "".join(
                f"; {kind}: {', '.join(names)}"
                for kind, names in (
                    ("rolled back", groups["rolled back"]),
                    ("NOT rolled back", not_rolled_back),
                    ("lost", lost_all),
                    ("untouched", untouched),
                )
                if names
            )
        )
    return {
        "stop": stop,
        "pause": pause,
        "end": end,
        "lost": lost,
        "failed": failed,
        "dropped": dropped,
        "left": left,
        "lines": lines,
    }
