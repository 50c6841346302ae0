"""One PD pool across four lab hosts (2P1D and a router host) and a host of its own after the side effect (molecule
verify): each host runs its own part of the pool, the router lists every server of it, every server runs from what
the rolled-back pool holds (0.7); then, last, the pool's sampling change under load through the balancer loses no
request."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import ROOT, deploy, flat, lab_secret, text

GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
PARTS = {"dsv4-xpyd-1": "prefill", "dsv4-xpyd-2": "decode", "dsv4-xpyd-3": "router", "dsv4-xpyd-5": "prefill"}
# The host of its own: prefill, decode and router on it.
ALONE = "dsv4-xpyd-4"


def name(host) -> str:
    return host.check_output("hostname")


@pytest.mark.parametrize("unit", ["prefill", "decode", "router"])
def test_each_host_runs_its_own_part_of_the_pool_only(host, unit):
    own = name(host) == ALONE or PARTS[name(host)] == unit
    assert host.service(f"sglang-dsv4-{unit}").is_running is own
    assert host.file(f"/etc/systemd/system/sglang-dsv4-{unit}.service").exists is own


def test_each_host_built_only_the_releases_its_part_runs(host):
    # A server host builds no router release, the router host no servers' release (minutes of pip and gigabytes).
    groups = host.check_output(
        "python3 -c \"import glob, json; print(' '.join(sorted(json.load(open(m))['group']"
        " for m in glob.glob('/opt/sglang/releases/*/sglang-release.json'))))\""
    ).split()
    part = "both" if name(host) == ALONE else PARTS[name(host)]
    expected = {"both": ["router", "servers"], "router": ["router"]}.get(part, ["servers"])
    assert groups == expected


def test_the_pools_router_lists_its_prefill_with_the_bootstrap_port_and_its_decode(host):
    if PARTS.get(name(host)) != "router":
        pytest.skip("the router host's unit")
    line = next(
        x
        for x in host.file("/etc/systemd/system/sglang-dsv4-router.service").content_string.splitlines()
        if x.startswith("ExecStart=")
    )
    assert (
        "--prefill http://127.0.0.1:23011 23013 --prefill http://127.0.0.1:23051 23053 --decode http://127.0.0.1:23022 "
        in line
    )
    readiness = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:23030/readiness').status)"
    assert host.check_output(f'python3 -c "{readiness}"') == "200"


def test_each_server_runs_with_the_defaults_the_rolled_back_pool_holds(host):
    part = PARTS.get(name(host), "router")
    if part == "router":
        pytest.skip("no server of the pool on this host")
    assert json.loads(host.file(GENCONFIG).content_string)["temperature"] == 0.7
    invocation = host.check_output(f"systemctl show -P InvocationID sglang-dsv4-{part}")
    journal = host.check_output(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}")
    assert "{'temperature': 0.7, 'top_p': 0.95}" in journal


def test_a_server_host_records_where_its_servers_answer_for_the_capacity_guard(host):
    if name(host) == ALONE:
        pytest.skip("a host of its own")
    record = json.loads(host.file("/var/lib/sglang-dsv4/rollout.json").content_string)
    part = PARTS[name(host)]
    if part == "router":
        assert record["router_url"] == "http://127.0.0.1:23030" and "health_urls" not in record
    else:
        port = {"dsv4-xpyd-1": 23011, "dsv4-xpyd-2": 23022, "dsv4-xpyd-5": 23051}[name(host)]
        assert record["router_url"] is None and record["health_urls"] == [f"http://127.0.0.1:{port}/health"]


# Each host's Prometheus (lab: its port block + 5) and the targets it must scrape, all labelled pool="pd-lab".
PROMETHEUS = {"dsv4-xpyd-1": 23015, "dsv4-xpyd-2": 23025, "dsv4-xpyd-3": 23035, ALONE: 23045, "dsv4-xpyd-5": 23055}
SCRAPED = {
    "dsv4-xpyd-1": {("sglang", "prefill", "127.0.0.1:23011")},
    "dsv4-xpyd-2": {("sglang", "decode", "127.0.0.1:23022")},
    "dsv4-xpyd-3": {("sglang-router", "router", "127.0.0.1:23034")},
    "dsv4-xpyd-5": {("sglang", "prefill", "127.0.0.1:23051")},
    ALONE: {
        ("sglang", "prefill", "127.0.0.1:23041"),
        ("sglang", "decode", "127.0.0.1:23042"),
        ("sglang-router", "router", "127.0.0.1:23044"),
    },
}
# The label every target of a host carries: its pool, or its own name.
POOL = {
    "dsv4-xpyd-1": "pd-lab",
    "dsv4-xpyd-2": "pd-lab",
    "dsv4-xpyd-3": "pd-lab",
    ALONE: ALONE,
    "dsv4-xpyd-5": "pd-lab",
}


def serving_targets(port: int, pool: str) -> set[tuple[str, str, str]] | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10) as response:
        targets = json.loads(response.read())["data"]["activeTargets"]
    if not all(t["health"] == "up" for t in targets):
        return None
    assert all(t["labels"]["pool"] == pool for t in targets), targets
    return {
        (t["labels"]["job"], t["labels"]["role"], t["labels"]["instance"])
        for t in targets
        if t["labels"]["job"] in ("sglang", "sglang-router")
    }


def test_each_hosts_prometheus_scrapes_its_part_of_the_pool_labelled_with_the_pool(host):
    port, deadline, found = PROMETHEUS[name(host)], time.monotonic() + 90, None
    while time.monotonic() < deadline:
        found = serving_targets(port, POOL[name(host)])
        if found:
            break
        time.sleep(2)
    assert found == SCRAPED[name(host)]


# --- last: the pool's sampling change under load, through the balancer ------------------------------------------

BALANCER = 23000
RATE = 10
POOL_HOSTS = "dsv4-xpyd-1,dsv4-xpyd-2,dsv4-xpyd-3,dsv4-xpyd-5"


def test_the_pools_sampling_change_under_load_through_the_balancer_loses_no_request():
    """A steady stream of streaming chats through the lab balancer, in front of the pool's router and the host of its
    own, while the pool changes its sampling defaults as one step: its router host takes its workers out (the
    balancer sends everything to dsv4-xpyd-4), its servers restart, the workers go back. Counted by the client
    (bench/loadgen.py: non-2xx, cut streams, refused connections)."""
    argv = [sys.executable, str(ROOT / "bench/loadgen.py"), "--port", str(BALANCER)]
    argv += ["--key", lab_secret("sglang_services_api_key"), "--rate", str(RATE), "--seconds", "900"]
    client = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        run = deploy("--limit", POOL_HOSTS, "-e", '{"sglang_genconfig_temperature": 0.75}')
        # The pool back in rotation gets traffic again before the load stops.
        time.sleep(3)
    finally:
        client.send_signal(signal.SIGTERM)
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, err[-2000:]
    counted = json.loads(out.strip().splitlines()[-1])
    assert run.returncode == 0, text(run)[-3000:]
    assert "step 1: pool pd-lab (dsv4-xpyd-1, dsv4-xpyd-2, dsv4-xpyd-3, dsv4-xpyd-5)" in flat(run)
    assert counted["ok"] >= 3 * RATE, counted
    assert (counted["non_2xx"], counted["truncated"], counted["failed"], counted["lost"]) == (0, 0, 0, 0), counted
