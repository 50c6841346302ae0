"""One PD pool across four lab hosts (2P1D and a router host) and a host of its own after the side effect (molecule
verify): each host runs its own part of the pool, the router lists every server of it, every server runs from what
the rolled-back pool holds (0.7); then, last, the pool's sampling change under load through the balancer loses no
request and passes its step analysis; before it, a KV transfer fault on one prefill fails the pool's analysis and
rolls the whole pool back."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import labtools
import testinfra
from labtools import (
    ROOT,
    Hold,
    cut_ssh,
    deploy,
    flat,
    host_state,
    lab_secret,
    leaked,
    long_stream,
    pids,
    readiness,
    text,
    uncut,
)

GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
PARTS = {"dsv4-xpyd-1": "prefill", "dsv4-xpyd-2": "decode", "dsv4-xpyd-3": "router", "dsv4-xpyd-5": "prefill"}
# The host of its own: prefill, decode and router on it.
ALONE = "dsv4-xpyd-4"
# The GPU hosts (dsv4-xpyd-6 is the central Prometheus, checked through the analysis that reads it).
testinfra_hosts = [f"ansible://dsv4-xpyd-{number}" for number in range(1, 6)]


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


# --- the pool through the seams: its drain that times out, a router-only change, a silent host, the analysis ----

BALANCER = 23000
RATE = 10
POOLED = ["dsv4-xpyd-1", "dsv4-xpyd-2", "dsv4-xpyd-3", "dsv4-xpyd-5"]
POOL_HOSTS = ",".join(POOLED)
POOL_ROUTER = 23030
# The state the side effect left the pool in (its sampling change, then a change rolled back).
AS_LEFT = {"sglang_genconfig_temperature": 0.7}
# The router host's handler that takes the pool's workers out of rotation before any server of it restarts.
POOL_DRAIN = "Take the pool's workers out of rotation before its servers restart"
# The capacity guard's count (the plan's is the first).
COUNT = "Ask every serving host of the inventory at once whether it is in rotation"
# The step analysis on, judged on the central Prometheus dsv4-xpyd-6 (its settings: the hosts' host_vars and the
# lab's), in two rounds of which one may fail; the fault case's one round may not (each round is 15 s of the suite).
ANALYSED = {"sglang_rollout_analysis": True, "sglang_rollout_canary_count": 2}
ONE_ROUND = {**ANALYSED, "sglang_rollout_canary_count": 1, "sglang_rollout_canary_failure_limit": 0}
# The analysis' first task, once the step's servers restarted and proved themselves.
ANALYSIS_START = "Let the step's hosts serve before judging them (initial delay)"
# The lab's KV transfer fault (roles/lab_hosts/files/sglang_lab_standin.py): the prefill start it names refuses
# every KV transfer.
TRANSFER_FAULT = "/run/sglang-dsv4-lab-transfer-fault"


def lab_host(hostname: str):
    return testinfra.get_host(f"ansible://{hostname}", ansible_inventory=labtools.inventory())


def pool_state() -> dict[str, dict]:
    """Each pool host's managed files (byte for byte) and every service's MainPID and InvocationID."""
    found = {}
    for hostname in POOLED:
        state = host_state(lab_host(hostname))
        found[hostname] = {"files": state["files"], "units": pids(state)}
    return found


def pool_run(settings: dict, env: dict | None = None):
    return labtools.start("deploy.yml", "--limit", POOL_HOSTS, "-e", json.dumps({**AS_LEFT, **settings}), env=env)


def under_load():
    """Steady load through the balancer, in front of the pool's router and the host of its own."""
    argv = [sys.executable, str(ROOT / "bench/loadgen.py"), "--port", str(BALANCER)]
    argv += ["--key", lab_secret("sglang_services_api_key"), "--rate", str(RATE), "--seconds", "900"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def counted(client: subprocess.Popen) -> dict:
    client.send_signal(signal.SIGTERM)
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def test_a_pool_drain_that_times_out_restarts_no_server_of_the_pool_and_the_run_names_the_pool(tmp_path):
    """The pool's router host is held at its drain until a long request streams through the pool; the drain then
    times out (sglang_services_drain_on_timeout=stop): no server of the pool restarts (MainPID and InvocationID
    unchanged on every host), every host of the pool is rolled back (files byte for byte), the run names the pool,
    the pool is back in rotation, and the clients through the balancer lose nothing."""
    before = pool_state()
    client = under_load()
    hold = Hold(tmp_path, POOL_DRAIN)
    run = pool_run({"sglang_genconfig_temperature": 0.72, "sglang_services_drain_timeout": 2}, env=hold.env)
    try:
        hold.reached(run)
        # 4000 tokens at 10 ms each: 40 s in flight, far beyond the drain's 2 s.
        url = f"http://127.0.0.1:{POOL_ROUTER}/v1/chat/completions"
        assert long_stream(url, lab_secret("sglang_services_api_key"), 4000).wait(60), "the long request never streamed"
    finally:
        hold.release()
        out = labtools.finish(run, timeout=900)
    tally = counted(client)
    said = flat(out)
    assert out.returncode != 0
    assert "pool pd-lab: its drain on dsv4-xpyd-3 did not end within sglang_services_drain_timeout=2 s" in said, said[
        -4000:
    ]
    for hostname in ("dsv4-xpyd-1", "dsv4-xpyd-2", "dsv4-xpyd-5"):
        assert f"{hostname} was rolled back to its state before this run" in said, hostname
    assert "nothing restarted on this host" in said
    after = pool_state()
    assert {h: after[h]["units"] for h in POOLED} == {h: before[h]["units"] for h in POOLED}
    assert {h: after[h]["files"] for h in POOLED} == {h: before[h]["files"] for h in POOLED}
    assert readiness(POOL_ROUTER) == 200
    assert not lab_host("dsv4-xpyd-3").file("/run/sglang-dsv4/drain.json").exists
    assert (tally["non_2xx"], tally["truncated"], tally["failed"]) == (0, 0, 0), tally


ROTATED_ADMIN_KEY = "rotated-admin-key-of-the-pool-0123456789"


def test_an_admin_key_rotated_on_the_pools_router_host_drains_the_pool_and_cuts_no_stream():
    """A change only the pool's router takes (its admin key, and back): its router host drains the pool first, as a
    host of its own does, restarts only the router, and puts the pool back; no server restarts, nothing is cut."""
    before = pool_state()
    started = int(lab_host("dsv4-xpyd-3").check_output("date +%s"))
    client = under_load()
    try:
        time.sleep(3)
        rotated = labtools.finish(pool_run({"sglang_services_admin_key": ROTATED_ADMIN_KEY}))
        back = labtools.finish(pool_run({}))
    finally:
        tally = counted(client)
    assert rotated.returncode == 0, text(rotated)[-3000:]
    assert back.returncode == 0, text(back)[-3000:]
    after = pool_state()
    for hostname in POOLED:
        for unit, (pid, invocation) in after[hostname]["units"].items():
            same = (pid, invocation) == before[hostname]["units"][unit]
            assert same is (unit != "router" or hostname != "dsv4-xpyd-3"), (hostname, unit)
    # Drained by its own restart call: the router was told to remove its workers (twice: the key, and back).
    journal = lab_host("dsv4-xpyd-3").check_output(
        f"journalctl -u sglang-dsv4-router --since @{started} -o cat --no-pager | grep -c DELETE || true"
    )
    assert int(journal or 0) >= 2, journal
    assert readiness(POOL_ROUTER) == 200
    assert (tally["non_2xx"], tally["truncated"], tally["failed"]) == (0, 0, 0), tally
    # Neither key, the rotated one nor the lab's, is kept anywhere on a host of the pool outside its key folders, nor
    # printed by either run.
    keys = (ROTATED_ADMIN_KEY, lab_secret("sglang_services_admin_key"))
    assert [key for key in keys if key in text(rotated) + text(back)] == []
    for hostname in POOLED:
        assert leaked(lab_host(hostname), *keys) == [], hostname


def test_a_pool_host_that_cannot_be_asked_at_the_guards_count_leaves_no_free_step(tmp_path):
    """dsv4-xpyd-1 (a prefill host) cannot be reached at the plan's count of hosts out of rotation (its ssh port cut
    while the run is held there): the pool is not taken for free. The guard (one unit of two) counts the unknown
    pool out and its restart as costing capacity, so the run stops before any host changes, naming that host."""
    before = pool_state()
    ssh = {entry["instance"]: int(entry["port"]) for entry in labtools.instances()}["dsv4-xpyd-1"]
    hold = Hold(tmp_path, COUNT)
    run = pool_run({"sglang_genconfig_temperature": 0.75}, env=hold.env)
    try:
        hold.reached(run)
        cut_ssh(ssh)
    finally:
        hold.release()
        try:
            out = labtools.finish(run, timeout=900)
        finally:
            uncut(ssh)
    said = flat(out)
    assert out.returncode != 0
    assert "the guard leaves no room" in said and "dsv4-xpyd-1: cannot be reached" in said, said[-4000:]
    assert "Take the lock, snapshot" not in out.stdout
    assert pool_state() == before


def test_a_kv_transfer_fault_on_one_prefill_fails_the_pools_analysis_and_rolls_the_whole_pool_back(tmp_path):
    """The pool's sampling change with the step analysis on, under load through the balancer, held once its servers
    restarted and proved themselves (before the analysis' first round); then the lab's KV transfer fault is put on
    dsv4-xpyd-5, one prefill: the requests the router sends through it fail on the decode, which counts each. The
    pool, judged as one unit through its router host, fails its analysis on those transfer failures, and the whole
    pool rolls back: files byte for byte, every server running from them, the pool back in rotation."""
    before = pool_state()
    client = under_load()
    hold = Hold(tmp_path, ANALYSIS_START)
    run = pool_run({"sglang_genconfig_temperature": 0.74, **ONE_ROUND}, env=hold.env)
    prefill = lab_host("dsv4-xpyd-5")
    try:
        hold.reached(run)
        # On its new server's start only: the rollback's restart brings up a sound one.
        prefill.run(f"systemctl show -P InvocationID sglang-dsv4-prefill > {TRANSFER_FAULT}")
    finally:
        hold.release()
        try:
            out = labtools.finish(run, timeout=900)
        finally:
            prefill.run(f"rm -f {TRANSFER_FAULT}")
            counted(client)
    said = flat(out)
    assert out.returncode != 0
    assert "; analysis of pool pd-lab (through dsv4-xpyd-3) without latency comparison" in said, said[-4000:]
    assert "step 1 (the canary) failed its analysis: dsv4-xpyd-3: 1 of 1 rounds failed" in said, said[-6000:]
    assert re.search(r"[1-9][0-9]* PD bootstrap or KV transfer failure\(s\) on dsv4-xpyd-2", said), said[-6000:]
    for hostname in POOLED:
        assert f"{hostname} was rolled back to its state before this run" in said, hostname
    after = pool_state()
    assert {h: after[h]["files"] for h in POOLED} == {h: before[h]["files"] for h in POOLED}
    # Every server restarted again, onto the restored defaults (its current start's own line); the router kept running.
    for hostname, part in PARTS.items():
        if part == "router":
            assert after[hostname]["units"]["router"] == before[hostname]["units"]["router"]
            continue
        assert after[hostname]["units"][part] != before[hostname]["units"][part], hostname
        invocation = after[hostname]["units"][part][1]
        journal = lab_host(hostname).check_output(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}")
        assert "{'temperature': 0.7, 'top_p': 0.95}" in journal, hostname
    assert readiness(POOL_ROUTER) == 200


# --- last: the pool's sampling change under load, through the balancer ------------------------------------------


def test_the_pools_sampling_change_under_load_through_the_balancer_passes_its_analysis_and_loses_no_request():
    """A steady stream of streaming chats through the lab balancer, in front of the pool's router and the host of its
    own, while the pool changes its sampling defaults as one step: its router host takes its workers out (the
    balancer sends everything to dsv4-xpyd-4), its servers restart, the workers go back; then the step analysis
    judges the pool as one unit on the central Prometheus (traffic through its router, latency from its decode,
    defaults from every server, each host's own scrape targets) and passes. Counted by the client
    (bench/loadgen.py: non-2xx, cut streams, refused connections)."""
    client = under_load()
    try:
        time.sleep(3)
        run = deploy("--limit", POOL_HOSTS, "-e", json.dumps({"sglang_genconfig_temperature": 0.75, **ANALYSED}))
        # The pool back in rotation gets traffic again before the load stops.
        time.sleep(3)
    finally:
        tally = counted(client)
    said = flat(run)
    assert run.returncode == 0, text(run)[-3000:]
    assert "step 1: pool pd-lab (dsv4-xpyd-1, dsv4-xpyd-2, dsv4-xpyd-3, dsv4-xpyd-5)" in said
    # Judged once, through its router host, on the evidence of every host of the pool: each round names the pool's
    # hosts, and its values hold the router's traffic and the decode's latency.
    # (Quotes escaped where the run printed its results as JSON.)
    rounds = re.findall(
        r"analysis of dsv4-xpyd-3 \(its pool dsv4-xpyd-1, dsv4-xpyd-2, dsv4-xpyd-3, dsv4-xpyd-5\) round ([0-9])/2:"
        r' (ok|FAILED: .*?) (\{\\?"up_prefill\\?": [^}]*\})',
        said,
    )
    assert [number for number, _verdict, _values in rounds] == ["1", "2"], said[-6000:]
    passed = [json.loads(values.replace('\\"', '"')) for _n, verdict, values in rounds if verdict == "ok"]
    assert len(passed) >= 1, rounds
    for values in passed:
        # Every host's own targets up; the router's traffic, the decode's latency, every server's defaults.
        assert [values[f"up_{target}"] for target in ("prefill", "decode", "router", "node")] == [1, 1, 1, 1]
        assert values["requests"] > 0 and values["success"] >= 0.99, rounds
        assert values["ttft_p99"] > 0 and values["itl_p99"] > 0, rounds
        assert values["defaults_in_effect"] == 1 and values["transfer_failures"] == 0, rounds
    assert "analysis of dsv4-xpyd-1" not in said and "analysis of dsv4-xpyd-2" not in said
    assert tally["ok"] >= 3 * RATE, tally
    assert (tally["non_2xx"], tally["truncated"], tally["failed"], tally["lost"]) == (0, 0, 0, 0), tally
