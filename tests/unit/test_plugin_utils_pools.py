"""PD pools across hosts (plugin_utils/sglang_pools.py): the members a pool's router lists, the single-host shape
unchanged, and the pools an inventory may not have, each named by its variable and hosts."""

from __future__ import annotations

import copy

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_flags import ROUTER_FLAGS, render
from ansible_collections.dsv4.sglang.plugins.plugin_utils import sglang_pools as pools
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_units import sglang_topology_errors

from tests.unit.test_plugin_utils_units import ROUTER_PD, SETTINGS, TOPOLOGY

PREFILL = {"mode": "prefill", "gpu_ids": [0, 1, 2, 3], "numa_node": 0, "port": 30000, "bootstrap_port": 8998}
PREFILL_2 = {"mode": "prefill", "gpu_ids": [4, 5, 6, 7], "numa_node": 1, "port": 30002, "bootstrap_port": 8999}
DECODE = {"mode": "decode", "gpu_ids": [0, 1, 2, 3, 4, 5, 6, 7], "port": 30001}
ROUTER = TOPOLOGY["router"]


def host(name: str, topology: dict, pool: str | None = "pd-a", address: str | None = None) -> dict:
    return {"host": name, "pool": pool, "advertise_host": address, "topology": topology}


# Two prefill hosts (the second with two prefills, one per NUMA half), a decode host and a router host: 3P1D.
XPYD = [
    host("p1", {"prefill": PREFILL}, address="198.51.100.11"),
    host("p2", {"prefill": PREFILL, "prefill-b": PREFILL_2}, address="198.51.100.12"),
    host("d1", {"decode": DECODE}, address="198.51.100.21"),
    host("r1", {"router": ROUTER}, address="198.51.100.31"),
]


def router_argv(members: list[dict]) -> list[str]:
    settings = {**SETTINGS, "topology": TOPOLOGY, "pool_members": members}
    return [str(word) for word in render(ROUTER_FLAGS, TOPOLOGY["router"], settings)]


def test_a_host_of_its_own_is_its_own_pool_at_loopback_and_its_router_renders_as_before():
    alone = [host("gpu-01", TOPOLOGY, pool=None, address="198.51.100.7")]
    # Nothing to list: its router lists its own servers at loopback, byte for byte as before pools.
    assert pools.sglang_pool_members(alone, "gpu-01") == []
    assert pools.sglang_pool_errors(alone) == []
    assert router_argv([])[:6] == ROUTER_PD
    # A pool named by one host only is a pool of its own too: its topology's checks are the single host's.
    named = [host("gpu-01", TOPOLOGY, pool="pd-z", address="198.51.100.7")]
    assert pools.sglang_pool_members(named, "pd-z") == [] and pools.sglang_pool_errors(named) == []


def test_a_pool_across_hosts_lists_every_prefill_and_decode_at_its_hosts_address_prefills_first():
    assert pools.sglang_pool_errors(XPYD) == []
    members = pools.sglang_pool_members(XPYD, "pd-a")
    assert [(m["host"], m["service"], m["url"], m["bootstrap_port"]) for m in members] == [
        ("p1", "prefill", "http://198.51.100.11:30000", 8998),
        ("p2", "prefill", "http://198.51.100.12:30000", 8998),
        ("p2", "prefill-b", "http://198.51.100.12:30002", 8999),
        ("d1", "decode", "http://198.51.100.21:30001", None),
    ]
    argv = router_argv(members)
    assert argv[: argv.index("--host")] == [
        "--pd-disaggregation",
        *["--prefill", "http://198.51.100.11:30000", "8998"],
        *["--prefill", "http://198.51.100.12:30000", "8998"],
        *["--prefill", "http://198.51.100.12:30002", "8999"],
        *["--decode", "http://198.51.100.21:30001"],
    ]
    # Another pool of the same inventory is not this one's.
    other = [*XPYD, host("gpu-09", TOPOLOGY, pool="pd-b", address="198.51.100.9")]
    assert pools.sglang_pool_members(other, "pd-a") == members
    assert pools.sglang_pool_members(other, "pd-b") == []


def test_an_ipv6_address_is_bracketed_in_the_url():
    pool = [
        host("p1", {"prefill": PREFILL, "router": ROUTER}, address="2001:db8::11"),
        host("d1", {"decode": DECODE}, address="2001:db8::21"),
    ]
    assert pools.sglang_pool_errors(pool) == []
    assert pools.sglang_pool_members(pool, "pd-a")[0]["url"] == "http://[2001:db8::11]:30000"


def test_pools_an_inventory_may_not_have_are_named_by_variable_pool_and_host():
    no_decode = [h for h in XPYD if h["host"] != "d1"]
    assert pools.sglang_pool_errors(no_decode) == [
        "sglang_services_pool='pd-a' (p1, p2, r1): no decode server in the pool; a pool needs at least one prefill"
        " and one decode"
    ]
    two_routers = [*XPYD, host("r2", {"router": ROUTER}, address="198.51.100.32")]
    assert pools.sglang_pool_errors(two_routers) == [
        "sglang_services_pool='pd-a' (p1, p2, d1, r1, r2): 2 routers in the pool (r1:router, r2:router); a pool has"
        " exactly one, which lists all of its prefills and decodes"
    ]
    loopback = copy.deepcopy(XPYD)
    loopback[2]["advertise_host"] = "127.0.0.1"
    loopback[3]["advertise_host"] = None
    wildcard = copy.deepcopy(XPYD)
    wildcard[0]["advertise_host"] = "0.0.0.0"  # noqa: S104 - refused
    same = copy.deepcopy(XPYD)
    same[1]["advertise_host"] = "198.51.100.11"
    assert pools.sglang_pool_errors(loopback) == [
        "sglang_services_advertise_host='127.0.0.1' on d1: the pool 'pd-a' spans hosts, so each of them needs the"
        " address the others reach its servers at (not loopback, not a wildcard)",
        "sglang_services_advertise_host=None on r1: the pool 'pd-a' spans hosts, so each of them needs the address"
        " the others reach its servers at (not loopback, not a wildcard)",
    ]
    assert "sglang_services_advertise_host='0.0.0.0' on p1" in pools.sglang_pool_errors(wildcard)[0]
    assert pools.sglang_pool_errors(same) == ["sglang_services_advertise_host='198.51.100.11' on p2 is already p1's"]
    # A host of its own needs none of it (its servers stay on loopback).
    assert pools.sglang_pool_errors([host("gpu-01", TOPOLOGY, pool=None)]) == []


def test_the_servers_of_a_pool_across_hosts_must_agree_on_the_backend_and_the_kv_cache_options():
    skewed = copy.deepcopy(XPYD)
    skewed[2]["server_flags"] = ["--page-size", "64"]
    skewed[1]["topology"]["prefill-b"] = {**PREFILL_2, "extra_flags": ["--dtype=bfloat16"]}
    skewed[3]["transfer_backend"] = "nixl"
    assert pools.sglang_pool_errors(skewed) == [
        "sglang_services_transfer_backend='nixl' on r1 and 'mooncake' on p1: the pool 'pd-a' moves its KV cache"
        " between them, so every host of it uses the same backend",
        "sglang_services_pool='pd-a': d1:decode would run with --page-size '64' and p1:prefill with SGLang's default:"
        " every prefill and decode of a pool must agree (the KV cache crosses between any two of them); set it alike"
        " in sglang_services_server_flags of its hosts",
        "sglang_services_pool='pd-a': p2:prefill-b would run with --dtype 'bfloat16' and p1:prefill with SGLang's"
        " default: every prefill and decode of a pool must agree (the KV cache crosses between any two of them); set"
        " it alike in sglang_services_server_flags of its hosts",
    ]
    # The same options on every host: no error, whatever each host's other flags.
    alike = copy.deepcopy(XPYD)
    for entry in alike:
        entry["server_flags"] = ["--page-size", "64", "--trust-remote-code"]
    assert pools.sglang_pool_errors(alike) == []


def test_a_host_of_a_spanning_pool_runs_its_own_part_and_a_host_of_its_own_runs_all_three():
    for entry in XPYD:
        assert sglang_topology_errors(entry["topology"], spanning=True) == [], entry["host"]
    assert sglang_topology_errors({"decode": DECODE}) == [
        "sglang_services_topology must have exactly one service with mode prefill, found 0",
        "sglang_services_topology must have exactly one service with mode router, found 0",
    ]
    two_routers = {"router": ROUTER, "router-b": {**ROUTER, "port": 8001, "metrics_port": 29001}}
    assert sglang_topology_errors(two_routers, spanning=True) == [
        "sglang_services_topology may have at most one service with mode router, found 2"
    ]
    assert sglang_topology_errors(TOPOLOGY) == [] and sglang_topology_errors(TOPOLOGY, spanning=True) == []


def test_a_lab_pool_shares_the_controllers_loopback_and_tells_its_services_apart_by_port():
    lab = [
        host("lab-1", {"prefill": {**PREFILL, "port": 31011, "bootstrap_port": 31013}}, address="127.0.0.1"),
        host("lab-2", {"decode": {**DECODE, "port": 31022}}, address="127.0.0.1"),
        host("lab-3", {"router": {**ROUTER, "port": 31030, "metrics_port": 31034}}, address="127.0.0.1"),
    ]
    assert pools.sglang_pool_errors(lab, lab=True) == []
    # Outside the lab, loopback is no address for a pool across hosts.
    assert len(pools.sglang_pool_errors(lab)) == 3
    clash = copy.deepcopy(lab)
    clash[1]["topology"]["decode"]["port"] = 31011
    assert pools.sglang_pool_errors(clash, lab=True) == [
        "sglang_services_pool='pd-a': lab-2:decode.port=31011 is already lab-1:prefill.port's (one loopback)"
    ]
    real = copy.deepcopy(lab)
    real[0]["advertise_host"] = "198.51.100.11"
    assert "lab hosts share the controller's loopback" in pools.sglang_pool_errors(real, lab=True)[0]


def test_every_host_of_a_pool_has_the_same_sampling_defaults():
    same = copy.deepcopy(XPYD)
    for entry in same:
        entry["sampling"] = {"temperature": 0.6, "top_p": 0.95}
    assert pools.sglang_pool_errors(same) == []
    same[2]["sampling"] = {"temperature": 0.7, "top_p": 0.95}
    assert pools.sglang_pool_errors(same) == [
        "the sglang_genconfig_* sampling defaults of d1 ({'temperature': 0.7, 'top_p': 0.95}) and of p1"
        " ({'temperature': 0.6, 'top_p': 0.95}) differ: the pool 'pd-a' pairs any prefill with any decode (a prefill"
        " samples a request's first token, its decode the rest), so every host of it has the same defaults"
    ]


def test_every_server_host_of_a_pool_runs_the_same_servers_release():
    release = {"id": "8c1f", "describe": "sglang 0.5.23", "entry": ["-m", "sglang.launch_server"]}
    same = copy.deepcopy(XPYD)
    for entry in same:
        entry["server_release"] = release
    # The router host runs no server: its servers' release is none of the pool's business.
    same[3]["server_release"] = {**release, "id": "0000", "describe": "sglang 0.5.22"}
    assert pools.sglang_pool_errors(same) == []
    same[2]["server_release"] = {**release, "id": "77aa", "describe": "sglang 0.5.24"}
    assert pools.sglang_pool_errors(same) == [
        "the servers of d1 would run release 77aa (sglang 0.5.24; -m sglang.launch_server) and those of p1 release"
        " 8c1f (sglang 0.5.23; -m sglang.launch_server): the pool 'pd-a' pairs any prefill with any decode, so every"
        " server host of it runs the same servers' release (sglang_runtime_server_lock, sglang_runtime_server_entry)"
    ]


def test_the_router_hosts_are_those_whose_topology_runs_a_router():
    topologies = {
        "p1": {"prefill": {"mode": "prefill"}},
        "r1": {"gate": {"mode": "router"}},
        "x1": "not a mapping",
        "all": {"prefill": {"mode": "prefill"}, "decode": {"mode": "decode"}, "router": {"mode": "router"}},
    }
    assert pools.sglang_pool_router_hosts(topologies) == ["r1", "all"]
    # What each host runs (what the analysis asks each host of a pool to export): its modes, in one order.
    assert pools.sglang_pool_services({**topologies, "pd": {"d": {"mode": "decode"}, "p": {"mode": "prefill"}}}) == {
        "p1": ["prefill"],
        "r1": ["router"],
        "x1": [],
        "all": ["prefill", "decode", "router"],
        "pd": ["prefill", "decode"],
    }


def test_the_pools_router_host_is_the_host_of_the_pool_that_runs_its_router():
    entries = [
        host("p1", {"prefill": PREFILL}, address="198.51.100.11"),
        host("d1", {"decode": DECODE}, address="198.51.100.21"),
        host("r1", {"router": ROUTER}, address="198.51.100.31"),
        host("x1", {"router": ROUTER}, pool="pd-b", address="198.51.100.41"),
    ]
    assert pools.sglang_pool_router(entries, "pd-a") == "r1"
    # A pool of one host lists no servers of other hosts: it has no router host of its own to wait for.
    assert pools.sglang_pool_router(entries, "pd-b") is None
    assert pools.sglang_pool_router(entries, "pd-z") is None
