"""A rollout under live traffic loses nothing: four lab hosts behind the lab balancer, a steady stream of streaming
chat requests through it, and a sampling change rolled across the four in growing steps within the capacity guard
(one host, two, one), each analysed on live metrics, with the drain.

Judged from the client's side (every answer counted by bench/loadgen.py: non-2xx, cut streams, refused
connections), from the balancer's (its own counters: each router went out of rotation and came back) and from
each host (prefill and decode restarted onto the new defaults, the router did not).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import labtools
import pytest
import testinfra
from faultcases import RESTART
from labtools import CHAT, Hold, ask, cut_ssh, leaked, pids, readiness, uncut

from conftest import ROOT, deploy, flat, host_state, lab_secret, runs_from_disk, text

HOSTS = ("dsv4-traf-1", "dsv4-traf-2", "dsv4-traf-3", "dsv4-traf-4")
BALANCER = 25000
SOCKET = "/var/lib/sglang-dsv4-lab/balancer/traffic.sock"
RATE = 20
# A rollout across the four hosts takes about 5 minutes here, and three times that on a 2-core machine that runs the
# other scenarios' lanes beside it: the run's timeout is only a guard against a hang, and the load runs until the
# test stops it (SIGTERM), so that it never ends before the rollout does.
ROLLOUT_TIMEOUT = 2400
# The rollout's steps: the canary, then half the hosts, then the rest; the guard lets two of the four out at once.
STEPS = {"sglang_rollout_steps": [1, "50%"], "sglang_rollout_max_unavailable": 2}
STEP_OF = {"dsv4-traf-1": 1, "dsv4-traf-2": 2, "dsv4-traf-3": 2, "dsv4-traf-4": 3}


def balancer_stats() -> dict[str, dict[str, str]]:
    """HAProxy's own counters per router of this fleet."""
    return {name: row for name, row in labtools.balancer_stats(SOCKET).items() if name in HOSTS}


def lab_host(name: str):
    inventory = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")
    return testinfra.get_host(f"ansible://{name}", ansible_inventory=inventory)


def load(seconds: float, *keys: str) -> subprocess.Popen:
    """Steady load through the balancer with the lab's client key (or these keys: a 401 to one is asked again with
    the next, as a client does while a rotated key reaches the routers one host at a time)."""
    keys = keys or (lab_secret("sglang_services_api_key"),)
    argv = [sys.executable, str(ROOT / "bench/loadgen.py"), "--port", str(BALANCER)]
    for key in keys:
        argv += ["--key", key]
    argv += ["--rate", str(RATE), "--seconds", str(seconds)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tally(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rollout():
    hosts = {name: lab_host(name) for name in HOSTS}
    before = {name: host_state(h) for name, h in hosts.items()}
    stats = balancer_stats()
    client = load(ROLLOUT_TIMEOUT + 60)
    time.sleep(3)
    started = int(time.time())
    out = deploy("-e", json.dumps({"sglang_genconfig_temperature": 0.65, **STEPS}), timeout=ROLLOUT_TIMEOUT)
    # The last host back in rotation gets traffic again before the load stops.
    time.sleep(3)
    client.send_signal(signal.SIGTERM)
    counted = tally(client)
    yield {
        "out": out,
        "tally": counted,
        "before": before,
        "after": {name: host_state(h) for name, h in hosts.items()},
        "stats": (stats, balancer_stats()),
        "started": started,
    }
    # Back to the inventory with no load running: an analysis without traffic has no data and fails (by design), so
    # this one goes without.
    back = deploy("-e", json.dumps({"sglang_rollout_analysis": False}), timeout=ROLLOUT_TIMEOUT)
    assert back.returncode == 0, text(back)[-3000:]


def test_the_balancer_spreads_steady_load_over_every_router_and_loses_nothing():
    counted = tally(load(5))
    assert counted["lost"] == 0 and counted["ok"] >= 4 * RATE, counted
    stats = balancer_stats()
    assert set(stats) == set(HOSTS) and all(row["status"] == "UP" for row in stats.values()), stats


# Two runs at once on the two halves of the fleet, each a sampling change of its own (the second value where the
# half already holds the first: a test run again), with room for one host out.
HALVES = {"dsv4-traf-1,dsv4-traf-2": (0.75, 0.76), "dsv4-traf-3,dsv4-traf-4": (0.8, 0.81)}
ONE_OUT = {
    "sglang_rollout_max_unavailable": 1,
    "sglang_rollout_steps": [1],
    "sglang_rollout_analysis": False,
    "sglang_rollout_reservation_poll": 1,
}
# The step reservations live on the inventory's first serving host (sglang_rollout_reservation_host's default).
RESERVATIONS = "/run/sglang-dsv4-reservations.json"
# The task where a step counts, chooses and reserves (playbooks/tasks/step.yml).
CHOICE = "TASK [Count the inventory's hosts out of rotation and the other runs' reserved ones"


def text_of(run) -> str:
    return "".join(labtools.printed(run))


def router_ports() -> dict[str, int]:
    return {
        name: int(re.search(r"--port (\d+)", lab_host(name).check_output("systemctl cat sglang-dsv4-router")).group(1))
        for name in HOSTS
    }


def changes() -> dict[str, float]:
    """Each half's new temperature: one its first host does not hold yet."""
    found = {}
    for limit, (one, other) in HALVES.items():
        state = host_state(lab_host(limit.split(",", maxsplit=1)[0]))
        found[limit] = other if (state["units"]["prefill"]["logged"] or {}).get("temperature") == one else one
    return found


def two_runs_at_once(hosts: dict, tmp_path, temperatures: dict[str, float]) -> dict:
    """The first half's run held right after its step's reservation until the second half's run waits at its own
    choice, then both to their end: what each printed, by its --limit."""
    first, second = temperatures.items()
    hold = Hold(tmp_path / "first", "Print this step")
    first_settings = {**ONE_OUT, "sglang_genconfig_temperature": first[1]}
    first_run = labtools.start("deploy.yml", "--limit", first[0], "-e", json.dumps(first_settings), env=hold.env)
    second_run, waiting = None, ""
    try:
        hold.reached(first_run)
        held = json.loads(hosts["dsv4-traf-1"].file(RESERVATIONS).content_string)
        assert [(e["hosts"], e["step"]) for e in held["entries"]] == [(["dsv4-traf-1"], 1)], held
        second_settings = {**ONE_OUT, "sglang_genconfig_temperature": second[1]}
        # Unbuffered: what it printed so far says where it is.
        second_run = labtools.start(
            "deploy.yml", "--limit", second[0], "-e", json.dumps(second_settings), env={"PYTHONUNBUFFERED": "1"}
        )
        # The second run gets to its step's choice, and waits there: the first run holds the one place.
        deadline = time.monotonic() + 600
        while CHOICE not in waiting:
            assert second_run.poll() is None, text_of(second_run)[-3000:]
            assert time.monotonic() < deadline, "the second run never reached its step's choice"
            time.sleep(0.5)
            waiting = labtools.printed(second_run)[0]
        time.sleep(3)
        waiting = labtools.printed(second_run)[0].split(CHOICE, 1)[1]
        assert second_run.poll() is None and "TASK [Print this step]" not in waiting, waiting[-3000:]
    finally:
        hold.release()
        outs = {first[0]: labtools.finish(first_run, timeout=ROLLOUT_TIMEOUT)}
        if second_run is not None:
            outs[second[0]] = labtools.finish(second_run, timeout=ROLLOUT_TIMEOUT)
    return outs


def test_two_runs_on_the_two_halves_never_take_two_hosts_out_at_once_and_both_finish(tmp_path):
    """Two runs started together on disjoint --limits of the four hosts, the guard at one host out: the first run's
    chosen host is reserved fleet-wide before its drain, so the second run's guard counts it as out and waits for
    it (not luck: the first run is held right after its reservation until the second is at its own). Every router's
    /readiness, sampled every 0.2 s, never shows two hosts out at once; both runs finish; each half holds its own
    run's change and nothing of the other's. The hosts are left so (the rollout below changes all four again)."""
    hosts = {name: lab_host(name) for name in HOSTS}
    ports, samples, stop, temperatures = router_ports(), [], threading.Event(), changes()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), {name: readiness(port) for name, port in ports.items()}))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        outs = two_runs_at_once(hosts, tmp_path, temperatures)
    finally:
        stop.set()
        sampler.join()
    for limit, out in outs.items():
        assert out.returncode == 0, f"{limit}: {text(out)[-4000:]}"
    # The second run said whom it waited for; the runs took turns host by host.
    said = flat(outs[list(HALVES)[1]])
    waited = r"waited [0-9.]+ s for room other runs held \(runs [0-9]{8}T[0-9]{6}Z-[0-9]+\)"
    assert re.search(waited, said), said[-4000:]
    # Judged on the routers: never two hosts out at once, and every host seen out in its step (the sampler reads).
    out_at = [(when, sorted(n for n, code in codes.items() if code != 200)) for when, codes in samples]
    assert len(samples) > 50, len(samples)
    assert max(len(out) for _when, out in out_at) <= 1, [o for o in out_at if len(o[1]) > 1][:10]
    assert {n for _when, out in out_at for n in out} == set(HOSTS), out_at[-20:]
    # Each half holds its own run's change and none of the other's; every service runs from its files.
    for limit, temperature in temperatures.items():
        for name in limit.split(","):
            state = host_state(hosts[name])
            assert runs_from_disk(state) == [], name
            assert {(state["units"][u]["logged"] or {}).get("temperature") for u in ("prefill", "decode")} == {
                temperature
            }, name
    # Every place was given back.
    left = json.loads(hosts["dsv4-traf-1"].file(RESERVATIONS).content_string)
    assert [e for e in left["entries"] if e["until"] > time.time()] == [], left


def test_a_rollout_across_four_hosts_under_load_loses_no_request_and_cuts_no_stream(rollout):
    # On failure: every analysis round's line (its values: which evidence was missing), then the run's end.
    rounds = re.findall(r"step [0-9][^:]{0,40}analysis of \S+ round [0-9]+/[0-9]+: .*?\}", flat(rollout["out"]))
    assert rollout["out"].returncode == 0, "\n".join(rounds) + "\n" + text(rollout["out"])[-3000:]
    # Growing steps within the guard (the canary, two hosts, the last one), each judged on live metrics before the
    # next started: all three rounds ran at every step, and the ones that passed had real data that found the
    # change sound (every answer served, defaults in effect, no transfer failure, no repetition). The analysis
    # allows one failed round (sglang_rollout_canary_failure_limit), as the lab sets it: a p99 of ~80 requests is
    # their slowest one or two, at the mercy of a loaded controller.
    plan = flat(rollout["out"])
    assert (
        "step 1: dsv4-traf-1 (1 of 4); analysis of dsv4-traf-1 against dsv4-traf-2, dsv4-traf-3, dsv4-traf-4"
        " (not yet changed)" in plan
    ), plan[:6000]
    assert "step 2: dsv4-traf-2, dsv4-traf-3 (2 of 4); analysis of dsv4-traf-2, dsv4-traf-3 against dsv4-traf-4" in plan
    assert "the guard: at most 2 of the inventory's 4 serving host(s) out of rotation at once" in plan
    # The last step has no host left unchanged to compare latencies with; every other check still runs.
    assert "step 3: dsv4-traf-4 (1 of 4); analysis of dsv4-traf-4 without latency comparison" in plan
    assert "after 10 s, 3 rounds of 15 s, at most 1 failed" in plan
    for name, number in STEP_OF.items():
        # Each round's line, with its values as JSON (quotes escaped where the run printed its results as JSON).
        label = rf"step {number}{' [(]the canary[)]' if number == 1 else ''} analysis of {name}"
        rounds = re.findall(label + r' round ([0-9])/3: (ok|FAILED: .*?) (\{\\?"up_prefill\\?": [^}]*\})', plan)
        assert [n for n, _verdict, _values in rounds] == ["1", "2", "3"], (name, rounds)
        passed = [json.loads(values.replace('\\"', '"')) for _n, verdict, values in rounds if verdict == "ok"]
        assert len(passed) >= 2, rounds
        for values in passed:
            assert [values[f"up_{target}"] for target in ("prefill", "decode", "router", "node")] == [1, 1, 1, 1]
            assert values["requests"] > 0 and values["success"] >= 0.99, rounds
            assert 0 <= values["defaults_age"] <= 300, rounds
            assert values["defaults_in_effect"] == 1 and values["transfer_failures"] == 0, rounds
            assert values["ttft_p99"] > 0 and values["itl_p99"] > 0 and 0 <= values["repetition"] <= 0.5, rounds
            # The last step's latencies are recorded, not compared: no host was left unchanged.
            assert (values["ttft_p99_stable"] is None) == (number == 3), values
    counted = rollout["tally"]
    assert counted["ok"] >= 100, counted
    assert (counted["non_2xx"], counted["truncated"], counted["failed"]) == (0, 0, 0), counted


@pytest.mark.parametrize("name", HOSTS)
def test_the_balancer_took_each_router_out_and_back(rollout, name):
    before, after = (stats[name] for stats in rollout["stats"])
    assert int(after["chkdown"]) > int(before["chkdown"]), (before["chkdown"], after["chkdown"])
    assert after["status"] == "UP"
    assert int(after["stot"]) > int(before["stot"])


@pytest.mark.parametrize("name", HOSTS)
def test_each_host_restarted_prefill_and_decode_onto_the_new_defaults_and_kept_its_router(rollout, name):
    before, after = rollout["before"][name]["units"], rollout["after"][name]["units"]
    for unit in ("prefill", "decode"):
        assert after[unit]["pid"] != before[unit]["pid"]
        assert (after[unit]["logged"] or {}).get("temperature") == 0.65
    assert after["router"]["pid"] == before["router"]["pid"]


def test_every_host_was_drained_and_put_back_step_by_step(rollout):
    output = text(rollout["out"])
    # The hosts each restart call took out (one call per host, the step's hosts at once: drain, restart, put back):
    # every host once, never more at once than the guard lets out (2), in the steps the plan announced.
    chunks = re.split(r"(?:RUNNING HANDLER|TASK) \[", output)
    drained = [
        re.findall(r"^(?:changed|ok): \[(dsv4-traf-\d)\]", chunk, re.MULTILINE)
        for chunk in chunks
        if chunk.startswith("dsv4.sglang.sglang_services : Drain, restart what does not run from its inputs")
    ]
    # (Sorted: the hosts of one step answer in any order.)
    assert [sorted(hosts) for hosts in drained] == [["dsv4-traf-1"], ["dsv4-traf-2", "dsv4-traf-3"], ["dsv4-traf-4"]]
    assert output.count("changed: [dsv4-traf-") >= len(HOSTS)
    for name in HOSTS:
        host = lab_host(name)
        assert not host.file("/run/sglang-dsv4/drain.json").exists
        # Judged on the host: its router was told to remove its workers during the rollout (the call's drain).
        journal = host.run(
            f"journalctl -u sglang-dsv4-router --since @{rollout['started']} -o cat --no-pager | grep -c 'DELETE'"
        ).stdout.strip()
        assert int(journal or 0) >= 1, name


def test_a_fault_on_a_host_of_the_second_step_rolls_that_step_back_and_the_hosts_after_it_are_untouched(
    rollout, tmp_path
):
    """A change every host's own verification passes, with a fault only one host of the second step shows, and only
    under load (its first token 1 s late): the canary passes its analysis and keeps the change; the second step
    (two hosts: the guard is 2 here) fails its analysis on that host, so both of its hosts are rolled back, the
    host after it never changes, and the clients lose nothing."""
    hosts = {name: lab_host(name) for name in HOSTS}
    before = {name: host_state(h) for name, h in hosts.items()}
    fault = tmp_path / "fault.yml"
    fault.write_text("sglang_dsv4:\n  hosts:\n    dsv4-traf-3:\n      sglang_lab_first_token_seconds: 1.0\n")
    client = load(ROLLOUT_TIMEOUT + 60)
    time.sleep(3)
    settings = {
        "sglang_genconfig_temperature": 0.7,
        "sglang_rollout_steps": [1, 2],
        "sglang_rollout_max_unavailable": 2,
    }
    out = deploy("-i", str(fault), "-e", json.dumps(settings), timeout=ROLLOUT_TIMEOUT)
    time.sleep(3)
    client.send_signal(signal.SIGTERM)
    counted = tally(client)
    after = {name: host_state(h) for name, h in hosts.items()}
    # The canary back to the state the key rotation below starts from (the others are there already), before any
    # assertion: a failed one must not leave the next test a fleet in another state.
    back = deploy("-e", json.dumps({"sglang_rollout_analysis": False, **AFTER_ROLLOUT}), timeout=ROLLOUT_TIMEOUT)
    output = flat(out)
    assert out.returncode != 0
    assert back.returncode == 0 and "apply to 1 of 4 host(s): dsv4-traf-1" in text(back), text(back)[-3000:]
    assert (
        "step 2: dsv4-traf-2, dsv4-traf-3 (2 of 4); analysis of dsv4-traf-2, dsv4-traf-3 against dsv4-traf-4" in output
    )
    assert re.search(r"step 1 \(the canary\) analysis of dsv4-traf-1 round 3/3", output), output[-6000:]
    assert "step 2 failed its analysis: dsv4-traf-3: " in output and "time to first token p99" in output, output[-6000:]
    assert "step 2 failed on dsv4-traf-2, dsv4-traf-3" in output and "1 host(s) not changed: dsv4-traf-4" in output
    # The canary kept the change and runs from it.
    assert after["dsv4-traf-1"]["files"] != before["dsv4-traf-1"]["files"]
    assert runs_from_disk(after["dsv4-traf-1"]) == []
    # The second step, both hosts: files byte for byte as before, every service running from them.
    for name in ("dsv4-traf-2", "dsv4-traf-3"):
        assert f"{name} was rolled back to its state before this run" in output, name
        assert after[name]["files"] == before[name]["files"], name
        assert runs_from_disk(after[name]) == [], name
    # The host after it: files and processes untouched.
    assert after["dsv4-traf-4"]["files"] == before["dsv4-traf-4"]["files"]
    assert pids(after["dsv4-traf-4"]) == pids(before["dsv4-traf-4"])
    assert (counted["non_2xx"], counted["truncated"], counted["failed"]) == (0, 0, 0), counted


# The two hosts whose keys rotate (of the four behind the balancer): the others keep serving on the old keys.
ROTATED = HOSTS[:2]
# The state the rollout above left on every host (and the fault's step rolled back, its canary put back): a rotation
# changes only keys.
AFTER_ROLLOUT = {"sglang_genconfig_temperature": 0.65}


def answers(host, path: str, key: str) -> int:
    """The status the host's router gives this key for GET /workers or a chat request, asked from the controller
    (the lab hosts share its loopback; a key on a command line run on the host would be logged in its journal)."""
    port = re.search(r"--port (\d+)", host.check_output("systemctl cat sglang-dsv4-router")).group(1)
    return ask(f"http://127.0.0.1:{port}{path}", key, CHAT if path.startswith("/v1/") else None)


def rotate(settings: dict, keys: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, dict, dict, dict]:
    hosts = {name: lab_host(name) for name in ROTATED}
    before = {name: host_state(h) for name, h in hosts.items()}
    client = load(ROLLOUT_TIMEOUT + 60, *keys)
    time.sleep(3)
    limit = ",".join(ROTATED)
    extra = {"sglang_rollout_analysis": False, **AFTER_ROLLOUT, **settings}
    out = deploy("--limit", limit, "-e", json.dumps(extra), timeout=ROLLOUT_TIMEOUT)
    time.sleep(3)
    client.send_signal(signal.SIGTERM)
    counted = tally(client)
    return out, counted, before, {name: host_state(h) for name, h in hosts.items()}


@pytest.mark.usefixtures("rollout")
def test_keys_rotated_under_load_lose_nothing_restart_only_what_takes_them_and_refuse_the_old(request):
    """The admin key, then the client key, rotated on two hosts under steady load through the balancer. The drain
    speaks to each running router with the key it runs with; the new key takes over at the router's restart. The
    admin key restarts only the router, and nothing is lost; the client key restarts prefill, decode and the
    router, and nothing is cut or refused by a restart (the clients know both keys, a second try can still meet a
    host of the other key). The old keys are refused afterwards."""
    old_client, old_admin = lab_secret("sglang_services_api_key"), lab_secret("sglang_services_admin_key")
    new_admin, new_client = "rotated-admin-key-under-load-0123456789", "rotated-client-key-under-load-012345"
    request.addfinalizer(back_to_inventory)

    out, counted, before, after = rotate({"sglang_services_admin_key": new_admin}, (old_client,))
    assert out.returncode == 0, text(out)[-4000:]
    assert (counted["non_2xx"], counted["truncated"], counted["failed"]) == (0, 0, 0), counted
    for name in ROTATED:
        host = lab_host(name)
        assert runs_from_disk(after[name]) == [], name
        assert after[name]["units"]["router"]["pid"] != before[name]["units"]["router"]["pid"], name
        assert all(after[name]["units"][u]["pid"] == before[name]["units"][u]["pid"] for u in ("prefill", "decode"))
        assert answers(host, "/workers", new_admin) == 200 and answers(host, "/workers", old_admin) == 401

    both = {"sglang_services_admin_key": new_admin, "sglang_services_api_key": new_client}
    out, counted, before, after = rotate(both, (old_client, new_client))
    assert out.returncode == 0, text(out)[-4000:]
    # sglang-router holds one client key: while two hosts run the new one and two the old, a client's second try
    # can reach a host of the other key (measured: 570 of 2775 requests ended 401 after 895 second tries). What
    # the rotation must not cost is a request cut or refused by a restart: no stream cut, no connection failed,
    # and every answer that is not 200 is the key's refusal, never a 5xx of a host out of rotation.
    assert (counted["truncated"], counted["failed"]) == (0, 0), counted
    assert set(counted["statuses"]) <= {"200", "401"} and counted["ok"] > 0, counted
    for name in ROTATED:
        host = lab_host(name)
        assert runs_from_disk(after[name]) == [], name
        assert all(after[name]["units"][u]["pid"] != before[name]["units"][u]["pid"] for u in after[name]["units"])
        assert answers(host, "/v1/chat/completions", new_client) == 200
        assert answers(host, "/v1/chat/completions", old_client) == 401
        assert leaked(host, new_admin, new_client, old_admin, old_client) == [], name
    assert new_admin not in text(out) and new_client not in text(out)


def back_to_inventory() -> None:
    back = deploy("-e", json.dumps({"sglang_rollout_analysis": False}), timeout=ROLLOUT_TIMEOUT)
    assert back.returncode == 0, text(back)[-3000:]


def test_an_analysis_without_client_traffic_fails_and_rolls_the_canary_back():
    """No load: the balancer's probes and the analysis' own prompts are no client traffic, so the canary's rounds
    have nothing to judge and fail, saying so; the canary is rolled back and nothing else changes."""
    hosts = {name: lab_host(name) for name in HOSTS}
    before = {name: host_state(h) for name, h in hosts.items()}
    settings = {"sglang_genconfig_temperature": 0.66, "sglang_rollout_steps": [1], "sglang_rollout_max_unavailable": 1}
    out = deploy("-e", json.dumps(settings), timeout=ROLLOUT_TIMEOUT)
    after = {name: host_state(h) for name, h in hosts.items()}
    output = flat(out)
    assert out.returncode != 0
    assert "step 1 (the canary) failed its analysis: dsv4-traf-1: " in output, output[-6000:]
    assert "no client traffic: the canary's router routed no inference request in the window" in output
    assert "dsv4-traf-1 was rolled back to its state before this run" in output
    assert (
        "rollout: 0 changed, 1 rolled back, 0 failed and NOT rolled back, 0 lost, 3 untouched, of 4;"
        " rolled back: dsv4-traf-1; untouched: dsv4-traf-2, dsv4-traf-3, dsv4-traf-4" in output
    ), output[-3000:]
    assert after["dsv4-traf-1"]["files"] == before["dsv4-traf-1"]["files"]
    assert runs_from_disk(after["dsv4-traf-1"]) == []
    for name in HOSTS[1:]:
        assert after[name]["files"] == before[name]["files"] and pids(after[name]) == pids(before[name]), name


def test_a_host_lost_right_after_its_drain_fails_its_step_names_it_and_the_next_run_heals_it(request, tmp_path):
    """Under load, a step of two hosts; the controller loses dsv4-traf-2 (its ssh port cut) right after its router
    was drained. Ansible runs no rescue for an unreachable host: the run fails, names it as lost and NOT rolled back
    (possibly drained, locked, the command that ends it), rolls the other host of the step back, and never calls
    the lost host rolled back. The restart's one call the controller lost finishes on the host (drain, restart,
    undrain): back in rotation by itself, serving the step's files. Once it can be reached, the command the run
    printed heals it: its files as before, every service running from them. The clients lose nothing."""
    lost, other = "dsv4-traf-2", "dsv4-traf-1"
    hosts = {name: lab_host(name) for name in HOSTS}
    before = {name: host_state(h) for name, h in hosts.items()}
    ssh = {entry["instance"]: int(entry["port"]) for entry in labtools.instances()}[lost]
    request.addfinalizer(lambda: uncut(ssh))
    router = int(re.search(r"--port (\d+)", hosts[lost].check_output("systemctl cat sglang-dsv4-router")).group(1))
    assert readiness(router) == 200
    client = load(ROLLOUT_TIMEOUT + 60)
    time.sleep(3)
    settings = {
        "sglang_genconfig_temperature": 0.67,
        "sglang_rollout_steps": [2],
        "sglang_rollout_max_unavailable": 2,
        "sglang_rollout_analysis": False,
    }
    # Both hosts' restart calls are held right after their drain until the ssh port is cut: the cut lands after the
    # drain and before the restart, however slowly the machine runs (a watcher polling for the drain could miss it).
    hold = Hold(tmp_path, f"{RESTART}>after_drain", seconds=ROLLOUT_TIMEOUT)
    rollout = labtools.start("deploy.yml", "-e", json.dumps(settings), env=hold.env)
    try:
        hold.reached(rollout, hosts=2, seconds=ROLLOUT_TIMEOUT)
        drained = readiness(router)
        cut_ssh(ssh)
    finally:
        hold.release()
        out = labtools.finish(rollout, timeout=ROLLOUT_TIMEOUT)
    # Its router had said 503 to the balancer: drained when the controller lost it.
    assert drained == 503, drained
    output = flat(out)
    assert out.returncode != 0
    run_id = re.search(rf"{lost}: LOST in step 1 .*?sglang_rollout_break_lock=([0-9]{{8}}T[0-9]{{6}}Z-[0-9]+)", output)
    assert run_id, output[-6000:]
    said = run_id.group(0)
    assert f"{lost}: LOST in step 1 (unreachable, or it never reached its step's end): NOT rolled back" in said
    assert "possibly OUT OF ROTATION (drained) until its lease on" in said and "the lock stays held by run" in said
    assert f"ansible-playbook deploy.yml --limit {lost} -e sglang_rollout_break_lock=" in said
    assert f"step 1 lost {lost} (unreachable: not rolled back, see the end of the run). Every host" in output
    assert f"{other} was rolled back to its state before this run" in output
    assert f"{lost} was rolled back" not in output
    assert (
        "rollout: 0 changed, 1 rolled back, 0 failed and NOT rolled back, 1 lost, 2 untouched, of 4;"
        f" rolled back: {other}; lost: {lost}; untouched: dsv4-traf-3, dsv4-traf-4" in output
    ), output[-3000:]
    # The other host of the step, judged on the host: files byte for byte as before, every service from them.
    rolled = host_state(hosts[other])
    assert rolled["files"] == before[other]["files"] and runs_from_disk(rolled) == []

    # The call the controller lost ends on the host: the workers go back without any controller, within the
    # restart's bounds (the lab's start, the balancer's notice twice).
    deadline = time.monotonic() + 180
    while readiness(router) != 200:
        assert time.monotonic() < deadline, "the lost host's restart call did not put its workers back"
        time.sleep(1)

    uncut(ssh)
    heal = deploy(
        "--limit", lost, "-e", json.dumps({"sglang_rollout_break_lock": run_id.group(1)}), timeout=ROLLOUT_TIMEOUT
    )
    time.sleep(3)
    client.send_signal(signal.SIGTERM)
    counted = tally(client)
    assert heal.returncode == 0, text(heal)[-4000:]
    healed = host_state(lab_host(lost))
    assert healed["files"] == before[lost]["files"] and runs_from_disk(healed) == []
    assert not lab_host(lost).file("/run/sglang-dsv4/drain.json").exists and readiness(router) == 200
    for name in ("dsv4-traf-3", "dsv4-traf-4"):
        assert pids(host_state(hosts[name])) == pids(before[name]), name
    assert (counted["non_2xx"], counted["truncated"], counted["failed"]) == (0, 0, 0), counted
