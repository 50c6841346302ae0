"""One PD pool across three lab hosts after its side effect (molecule verify): each host runs its own part of the
pool, the router lists every server of it, and every server runs from what the rolled-back pool holds (0.7)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
PARTS = {"dsv4-xpyd-1": "prefill", "dsv4-xpyd-2": "decode", "dsv4-xpyd-3": "router"}


def name(host) -> str:
    return host.check_output("hostname")


@pytest.mark.parametrize("unit", ["prefill", "decode", "router"])
def test_each_host_runs_its_own_part_of_the_pool_only(host, unit):
    own = PARTS[name(host)] == unit
    assert host.service(f"sglang-dsv4-{unit}").is_running is own
    assert host.file(f"/etc/systemd/system/sglang-dsv4-{unit}.service").exists is own


def test_the_pools_router_lists_its_prefill_with_the_bootstrap_port_and_its_decode(host):
    if PARTS[name(host)] != "router":
        pytest.skip("the router host's unit")
    line = next(
        x
        for x in host.file("/etc/systemd/system/sglang-dsv4-router.service").content_string.splitlines()
        if x.startswith("ExecStart=")
    )
    assert "--prefill http://127.0.0.1:23011 23013 --decode http://127.0.0.1:23022 " in line
    readiness = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:23030/readiness').status)"
    assert host.check_output(f'python3 -c "{readiness}"') == "200"


def test_each_server_runs_with_the_defaults_the_rolled_back_pool_holds(host):
    part = PARTS[name(host)]
    if part == "router":
        pytest.skip("no server on the router host")
    assert json.loads(host.file(GENCONFIG).content_string)["temperature"] == 0.7
    invocation = host.check_output(f"systemctl show -P InvocationID sglang-dsv4-{part}")
    journal = host.check_output(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}")
    assert "{'temperature': 0.7, 'top_p': 0.95}" in journal


def test_a_server_host_records_where_its_servers_answer_for_the_capacity_guard(host):
    record = json.loads(host.file("/var/lib/sglang-dsv4/rollout.json").content_string)
    part = PARTS[name(host)]
    if part == "router":
        assert record["router_url"] == "http://127.0.0.1:23030" and "health_urls" not in record
    else:
        port = {"prefill": 23011, "decode": 23022}[part]
        assert record["router_url"] is None and record["health_urls"] == [f"http://127.0.0.1:{port}/health"]


# Each host's Prometheus (lab: its port block + 5) and the targets it must scrape, all labelled pool="pd-lab".
PROMETHEUS = {"dsv4-xpyd-1": 23015, "dsv4-xpyd-2": 23025, "dsv4-xpyd-3": 23035}
SCRAPED = {
    "dsv4-xpyd-1": {("sglang", "prefill", "127.0.0.1:23011")},
    "dsv4-xpyd-2": {("sglang", "decode", "127.0.0.1:23022")},
    "dsv4-xpyd-3": {("sglang-router", "router", "127.0.0.1:23034")},
}


def serving_targets(port: int) -> set[tuple[str, str, str]] | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10) as response:
        targets = json.loads(response.read())["data"]["activeTargets"]
    if not all(t["health"] == "up" for t in targets):
        return None
    assert all(t["labels"]["pool"] == "pd-lab" for t in targets), targets
    return {
        (t["labels"]["job"], t["labels"]["role"], t["labels"]["instance"])
        for t in targets
        if t["labels"]["job"] in ("sglang", "sglang-router")
    }


def test_each_hosts_prometheus_scrapes_its_part_of_the_pool_labelled_with_the_pool(host):
    port, deadline, found = PROMETHEUS[name(host)], time.monotonic() + 90, None
    while time.monotonic() < deadline:
        found = serving_targets(port)
        if found:
            break
        time.sleep(2)
    assert found == SCRAPED[name(host)]
