"""PD pools across hosts (xPyD): which prefills and decodes, on which hosts, one router serves.

A pool is the hosts whose `sglang_services_pool` names it (by default each host is its own pool, the single-host
shape). Its members are every prefill and decode server of its hosts, each reached at its host's
`sglang_services_advertise_host`; its router lists them all (`--prefill URL BOOTSTRAP_PORT` per prefill,
`--decode URL` per decode, module_utils/sglang_flags.py). A pool spans hosts only with real addresses: a server
on another host is never reached at loopback.

The playbook computes each host's members once, from the inventory's variables (never another role's facts), and
hands the services role its own pool's (`sglang_services_pool_members`). Plain functions, tested in
tests/unit/test_plugin_utils_pools.py.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_inputs import LOCAL_HOST, is_address, is_loopback
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_units import PD_EQUAL, http_url, pd_values

POOL_VAR = "sglang_services_pool"
ADVERTISE_VAR = "sglang_services_advertise_host"
SERVER_MODES = ("prefill", "decode")


def _servers(topology: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(topology, dict):
        return []
    return [
        (name, svc)
        for name, svc in sorted(topology.items(), key=lambda item: str(item[0]))
        if isinstance(svc, dict) and svc.get("mode") in SERVER_MODES
    ]


def _routers(topology: Any) -> list[str]:
    if not isinstance(topology, dict):
        return []
    return [name for name, svc in topology.items() if isinstance(svc, dict) and svc.get("mode") == "router"]


def sglang_pool_router_hosts(topologies: dict[str, Any]) -> list[str]:
    """The hosts (host -> its sglang_services_topology) that run a router: of a pool across hosts, what serves it."""
    return [str(host) for host, topology in topologies.items() if _routers(topology)]


def sglang_pool_services(topologies: dict[str, Any]) -> dict[str, list[str]]:
    """The services each host runs (host -> its sglang_services_topology), in the order prefill, decode, router:
    what the analysis expects each host of a pool to export, and no more."""
    services = {}
    for host, topology in topologies.items():
        modes = {svc["mode"] for _name, svc in _servers(topology)} | ({"router"} if _routers(topology) else set())
        services[str(host)] = [mode for mode in (*SERVER_MODES, "router") if mode in modes]
    return services


def sglang_pool_router(hosts: list[dict[str, Any]], pool: str) -> str | None:
    """The host that runs the router of the pool `pool` across hosts (its drain of the pool gates every server's
    restart); None for a pool of one host, which has no servers of other hosts to list."""
    if not sglang_pool_members(hosts, pool):
        return None
    return next((str(entry["host"]) for entry in pools(hosts)[str(pool)] if _routers(entry.get("topology"))), None)


def pools(hosts: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Pool name -> its hosts ({host, pool, advertise_host, topology, and for the checks sampling, server_release,
    transfer_backend and server_flags}), in the order given (the inventory's)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for entry in hosts:
        found.setdefault(str(entry.get("pool") or entry["host"]), []).append(entry)
    return found


def sglang_pool_members(hosts: list[dict[str, Any]], pool: str) -> list[dict[str, Any]]:
    """The servers of the pool `pool` across hosts, prefills first, then decodes, each in host order: {host, service,
    mode, url, bootstrap_port}. A pool of one host has none to list: its router lists its own servers at loopback, as
    the single-host shape always did (module_utils/sglang_flags.py)."""
    members = pools(hosts).get(str(pool), [])
    if len(members) < 2:
        return []
    found = []
    for mode in SERVER_MODES:
        for entry in members:
            address = str(entry.get("advertise_host") or LOCAL_HOST)
            for name, svc in _servers(entry.get("topology")):
                if svc["mode"] != mode:
                    continue
                found.append(
                    {
                        "host": entry["host"],
                        "service": name,
                        "mode": mode,
                        "url": http_url(address, svc.get("port")),
                        "bootstrap_port": svc.get("bootstrap_port") if mode == "prefill" else None,
                    }
                )
    return found


def sglang_pool_errors(hosts: list[dict[str, Any]], lab: bool = False) -> list[str]:
    """Everything wrong with the inventory's pools across hosts, each message naming the variable, the pool and the
    hosts. A pool of one host is its topology's to check (plugin_utils/sglang_units.py: one of each service).

    `lab`: the lab's hosts share the controller's loopback (systemd-nspawn on host networking), so there a pool's
    hosts advertise 127.0.0.1 and are told apart by their ports: every server of the pool needs a port of its own."""
    errors: list[str] = []
    for name, members in pools(hosts).items():
        if len(members) < 2:
            continue
        where = f"{POOL_VAR}={name!r} ({', '.join(str(m['host']) for m in members)})"
        modes = [svc["mode"] for m in members for _n, svc in _servers(m.get("topology"))]
        routers = [(m["host"], r) for m in members for r in _routers(m.get("topology"))]
        for mode in SERVER_MODES:
            if mode not in modes:
                errors.append(
                    f"{where}: no {mode} server in the pool; a pool needs at least one prefill and one decode"
                )
        if len(routers) != 1:
            errors.append(
                f"{where}: {len(routers)} routers in the pool ({', '.join(f'{h}:{r}' for h, r in routers) or 'none'});"
                " a pool has exactly one, which lists all of its prefills and decodes"
            )
        errors += skew_errors(name, members)
        if lab:
            errors += _lab_port_errors(name, members)
            continue
        seen: dict[str, str] = {}
        for m in members:
            address = m.get("advertise_host")
            if (
                not isinstance(address, str)
                or not is_address(address)
                or is_loopback(address)
                or address
                in (
                    "0.0.0.0",  # noqa: S104 - named to be refused
                    "::",
                )
            ):
                errors.append(
                    f"{ADVERTISE_VAR}={address!r} on {m['host']}: the pool {name!r} spans hosts, so each of them needs"
                    " the address the others reach its servers at (not loopback, not a wildcard)"
                )
            elif address in seen:
                errors.append(f"{ADVERTISE_VAR}={address!r} on {m['host']} is already {seen[address]}'s")
            else:
                seen[address] = str(m["host"])
    return errors


def _lab_port_errors(name: str, members: list[dict[str, Any]]) -> list[str]:
    """On the lab's shared loopback, two services of a pool on one port would be one listener."""
    errors, owner = [], {}
    for m in members:
        address = m.get("advertise_host") or LOCAL_HOST
        if not is_loopback(str(address)):
            errors.append(
                f"{ADVERTISE_VAR}={address!r} on {m['host']}: lab hosts share the controller's loopback; a lab pool's"
                " hosts advertise 127.0.0.1"
            )
        topology = m.get("topology") if isinstance(m.get("topology"), dict) else {}
        for service, svc in topology.items():
            for key in ("port", "bootstrap_port", "metrics_port"):
                port = svc.get(key) if isinstance(svc, dict) else None
                if port is None:
                    continue
                where = f"{m['host']}:{service}.{key}"
                if port in owner:
                    errors.append(f"{POOL_VAR}={name!r}: {where}={port} is already {owner[port]}'s (one loopback)")
                else:
                    owner[port] = where
    return errors


def sglang_pools_left_out(hosts: list[dict[str, Any]], others: dict[str, Any]) -> list[str]:
    """A run takes a pool across hosts whole (its router lists them all, and a sampling change restarts them as one):
    one message per pool of `hosts` (the run's) that a host of `others` (host -> its sglang_services_pool as the
    inventory sets it, for the inventory's hosts outside the run) also names."""
    named = {str(entry["pool"]) for entry in hosts if entry.get("pool")}
    left: dict[str, list[str]] = {}
    for other, pool in others.items():
        if pool and str(pool) in named:
            left.setdefault(str(pool), []).append(str(other))
    return [
        f"{POOL_VAR}={name!r}: {', '.join(out)} of this pool {'is' if len(out) == 1 else 'are'} not in this run"
        " (--limit); a run takes a pool across hosts whole (its router lists every server of it, and a change restarts"
        " them as one): add them, or leave the pool out"
        for name, out in left.items()
    ]


def skew_errors(name: str, members: list[dict[str, Any]]) -> list[str]:
    """What the servers of a pool across hosts would not agree on, each naming the first server and one that differs:
    the KV cache crosses between any prefill and any decode of the pool, so every server of it runs the same transfer
    backend and the same PD_EQUAL options (each host's sglang_services_server_flags and the server's extra_flags)."""
    errors: list[str] = []
    # The sampling defaults: a prefill samples a request's first token, its decode the rest; both with one set.
    sampling = {str(m["host"]): m.get("sampling") for m in members if m.get("sampling") is not None}
    for other, values, first_host, first_sampling in _differing(sampling):
        errors.append(
            f"the sglang_genconfig_* sampling defaults of {other} ({values}) and of {first_host}"
            f" ({first_sampling}) differ: the pool {name!r} pairs any prefill with any decode (a prefill"
            " samples a request's first token, its decode the rest), so every host of it has the same defaults"
        )
    # The servers' release: a prefill and a decode of different SGLang releases may not agree on the KV layout.
    releases = {
        str(m["host"]): m.get("server_release")
        for m in members
        if m.get("server_release") is not None and _servers(m.get("topology"))
    }
    for other, value, first_host, first_value in _differing(releases):
        errors.append(
            f"the servers of {other} would run {_release(value)} and those of {first_host} {_release(first_value)}:"
            f" the pool {name!r} pairs any prefill with any decode, so every server host of it runs the same"
            " servers' release (sglang_runtime_server_lock, sglang_runtime_server_entry)"
        )
    backends = {str(m["host"]): m.get("transfer_backend") or "mooncake" for m in members}
    for other, backend, first_host, first_backend in _differing(backends):
        errors.append(
            f"sglang_services_transfer_backend={backend!r} on {other} and {first_backend!r} on {first_host}: the"
            f" pool {name!r} moves its KV cache between them, so every host of it uses the same backend"
        )
    servers = [
        (
            f"{m['host']}:{service}",
            pd_values(svc, m.get("server_flags") if isinstance(m.get("server_flags"), list) else []),
        )
        for m in members
        for service, svc in _servers(m.get("topology"))
    ]
    if not servers:
        return errors
    first, first_values = servers[0]
    for option in PD_EQUAL:
        for other, values in servers[1:]:
            if values[option] != first_values[option]:
                errors.append(
                    f"{POOL_VAR}={name!r}: {other} would run with {option} {said(values[option])} and {first} with"
                    f" {said(first_values[option])}: every prefill and decode of a pool must agree (the KV cache"
                    " crosses between any two of them); set it alike in sglang_services_server_flags of its hosts"
                )
                break
    return errors


def _release(value: Any) -> str:
    if not isinstance(value, dict):
        return repr(value)
    return f"release {value.get('id')} ({value.get('describe')}; {' '.join(map(str, value.get('entry') or []))})"


def _differing(values: dict[str, Any]) -> list[tuple[str, Any, str, Any]]:
    """(host, its value, the first host, the first value) for each host whose value differs from the first's."""
    if not values:
        return []
    first_host, first = next(iter(values.items()))
    return [(host, value, first_host, first) for host, value in values.items() if value != first]


def said(value: str | None) -> str:
    return "SGLang's default" if value is None else repr(value)
