"""Rollouts that fail safe, judged on the host: each step of the apply made to fail, and other ways a run goes wrong.

For each step of the apply, the lab fault injector (molecule/shared/fault_plugins/lab_fault.py, a lab tool) makes
the step fail. Invariants, read on the host (files byte for byte, start records of the current invocations, their
journals, MainPIDs), never from Ansible's output: the host's files are as before the run and every service runs
from exactly them; the next plain run converges the host, and the run after it is changed=0 and restarts nothing.
Then a failed rollback, a change that fails verification, a key rotation, a drop-in, planted links, tags, and
--check --diff. The runs cut short (killed, a lease broken, an unreadable lock) are in the scenario interrupted;
the shared helpers in molecule/shared/faultcases.py.
"""

from __future__ import annotations

import json
import re

import pytest
from faultcases import (
    AFTER_DRAIN,
    BEFORE_DRAIN,
    DRAIN,
    GENCONFIG,
    LAB_ENV,
    MODEL,
    STEPS,
    change,
    converges,
    guard_looked,
    guard_said,
    host_clock,
    in_rotation,
    pids,
    run,
    temperatures,
)
from labtools import CHAT, Hold, ask, finish, leaked, long_stream, start

from conftest import deploy, flat, host_state, lab_secret, runs_from_disk, text

HOST = "dsv4-fs-1"
ROUTER = "http://127.0.0.1:26010"


@pytest.mark.parametrize(("step", "task"), STEPS, ids=[s[0] for s in STEPS])
def test_a_failed_step_leaves_the_host_as_before_and_the_next_run_converges(host, cases, step, task):
    case = cases()
    before = host_state(host)
    assert runs_from_disk(before) == []
    out = run(change(case), fault=f"fail:{task}")
    assert out.returncode != 0
    assert f"lab fault injected at {task.split('#')[0]}" in text(out)
    assert f"{HOST} was rolled back to its state before this run" in text(out), text(out)[-3000:]
    after = host_state(host)
    assert after["files"] == before["files"], step
    assert runs_from_disk(after) == [], step
    assert temperatures(after) == temperatures(before)
    assert not after["lock"]
    rollout = json.loads(host.file("/var/lib/sglang-dsv4/rollout.json").content_string)
    assert rollout["outcome"] == "rolled back" and not rollout["success"]
    converges(host, change(case))


def test_a_failed_rollback_says_so_loudly_and_the_next_run_converges(host, cases):
    case = cases()
    wrong = {**change(case), "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95}}
    out = run(wrong, fault=f"fail:{AFTER_DRAIN}#2")
    assert out.returncode != 0
    assert f"ROLLBACK FAILED on {HOST}: the host is NOT back to its state before this run" in text(out)
    assert "was rolled back to its state" not in text(out)
    # Its router was asked: the rollback's restart failed after its drain, so the host is out of rotation, said so
    # from the router's and the drain's answers, and so it is on the host.
    said = flat(out)
    kept = rf"The host is OUT OF ROTATION: drained[^:]*: its router.s workers are kept in {re.escape(DRAIN)}"
    assert re.search(kept, said), said[-3000:]
    assert "The host is in rotation" not in said and not in_rotation(host, ROUTER)
    rollout = json.loads(host.file("/var/lib/sglang-dsv4/rollout.json").content_string)
    assert rollout["outcome"] == "rollback failed" and not rollout["rolled_back"]
    assert not host_state(host)["lock"]
    converges(host, change(case))


def test_a_change_that_starts_but_fails_verification_is_undone_on_disk_and_in_the_processes(host, cases):
    case = cases()
    before = host_state(host)
    wrong = {**change(case), "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95}}
    out = run(wrong)
    assert out.returncode != 0
    assert f"logged {{'temperature': {change(case)['sglang_genconfig_temperature']}" in text(out)
    assert f"{HOST} was rolled back to its state before this run" in text(out)
    after = host_state(host)
    assert after["files"] == before["files"]
    assert runs_from_disk(after) == []
    # The servers started from the new files, then again from the restored ones: new processes, old defaults.
    assert temperatures(after) == temperatures(before)
    assert all(after["units"][u]["pid"] != before["units"][u]["pid"] for u in ("prefill", "decode"))
    converges(host, change(case))


def test_an_analysis_whose_prometheus_cannot_be_reached_rolls_the_canary_back(host, cases, tmp_path):
    """The canary's analysis cannot read its evidence: the Prometheus host it asks from cannot be reached. That is
    no data, which fails the round; the analysis fails and the canary is rolled back and unlocked like any failed
    host (before, Ansible dropped the host as unreachable: no rescue, no rollback, no unlock)."""
    case = cases()
    before = host_state(host)
    ghost = tmp_path / "prometheus-host.yml"
    ghost.write_text("all:\n  hosts:\n    dsv4-fs-prometheus:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n")
    analysed = {
        **change(case),
        "sglang_rollout_analysis": True,
        "sglang_rollout_canary_prometheus_host": "dsv4-fs-prometheus",
        "sglang_rollout_canary_prometheus_url": "http://127.0.0.1:9",
        "sglang_rollout_canary_initial_delay": 0,
        "sglang_rollout_canary_interval": 5,
        "sglang_rollout_canary_sample_seconds": 2,
        "sglang_rollout_canary_count": 1,
        "sglang_rollout_canary_failure_limit": 0,
    }
    out = run(analysed, "-i", str(ghost))
    assert out.returncode != 0, text(out)[-3000:]
    message = flat(out)
    assert "no data: the Prometheus host dsv4-fs-prometheus cannot be reached" in message, message[-3000:]
    assert "step 1 (the canary) failed its analysis" in message
    assert f"{HOST} was rolled back to its state before this run" in text(out)
    after = host_state(host)
    assert after["files"] == before["files"]
    assert runs_from_disk(after) == []
    assert not after["lock"] and in_rotation(host, ROUTER)
    rollout = json.loads(host.file("/var/lib/sglang-dsv4/rollout.json").content_string)
    assert rollout["outcome"] == "rolled back" and not rollout["success"]
    converges(host, change(case))


def router_answers(host, key: str) -> int:
    """The HTTP status the router gives a client with this key (asked from the controller, on the shared loopback:
    a key on a command line run on the host would be logged in its journal)."""
    return ask(f"{ROUTER}/v1/chat/completions", key, CHAT)


def test_a_rotated_key_that_fails_verification_leaves_the_router_on_the_old_key(host, at_inventory):
    old = lab_secret("sglang_services_api_key")
    before = host_state(host)
    assert router_answers(host, old) == 200
    rotated = {
        "sglang_services_api_key": "rotated-client-key-0123456789",
        "sglang_verify_api_key": "a-key-nobody-has-000",
    }
    out = run(rotated)
    assert out.returncode != 0 and f"{HOST} was rolled back to its state before this run" in text(out)
    after = host_state(host)
    assert after["files"] == before["files"]
    assert runs_from_disk(after) == []
    assert after["units"]["router"]["pid"] != before["units"]["router"]["pid"]
    assert router_answers(host, old) == 200
    assert router_answers(host, "rotated-client-key-0123456789") == 401


def test_a_drop_in_is_an_input_and_restarts_prefill_and_decode_together(host, at_inventory):
    dropin = "/etc/systemd/system/sglang-dsv4-decode.service.d"
    before = host_state(host)
    host.run_test(f"mkdir -p {dropin} && printf '[Service]\\nEnvironment=DSV4_DROPIN=1\\n' > {dropin}/lab.conf")
    try:
        out = deploy()
        assert out.returncode == 0, text(out)[-3000:]
        after = host_state(host)
        assert runs_from_disk(after) == []
        assert all(after["units"][u]["pid"] != before["units"][u]["pid"] for u in ("prefill", "decode"))
        assert after["units"]["router"]["pid"] == before["units"]["router"]["pid"]
        assert "DSV4_DROPIN=1" in host.check_output("systemctl show -p Environment sglang-dsv4-decode")
    finally:
        host.run(f"rm -rf {dropin}")
    out = deploy()
    assert out.returncode == 0, text(out)[-3000:]
    assert runs_from_disk(host_state(host)) == []
    assert "DSV4_DROPIN" not in host.check_output("systemctl show -p Environment sglang-dsv4-decode")


def test_root_never_writes_through_a_link_planted_in_the_model_directory(host, cases):
    case = cases()
    host.run_test(f"echo untouched > /root/victim && ln -sfn /root/victim {MODEL}/.generation_config.json.rollback")
    before = host_state(host)
    wrong = {**change(case), "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95}}
    out = run(wrong)
    assert out.returncode != 0 and "was rolled back" in text(out)
    assert host.file("/root/victim").content_string == "untouched\n"
    assert host_state(host)["files"] == before["files"]
    host.run_test(f"rm -f {MODEL}/.generation_config.json.rollback /root/victim")
    # A link in place of generation_config.json itself is refused by the plan, naming the path.
    host.run_test(f"cp {GENCONFIG} /root/genconfig && ln -sfn /root/genconfig {GENCONFIG}")
    try:
        refused = run(change(case))
        assert refused.returncode != 0 and f"{GENCONFIG} is a symbolic link" in text(refused)
        assert host.file("/root/genconfig").content_string == host.file(GENCONFIG).content_string
    finally:
        host.run_test(f"rm -f {GENCONFIG} && mv /root/genconfig {GENCONFIG}")
    # A model directory another account can write is refused too.
    host.run_test(f"chmod o+w {MODEL}")
    try:
        refused = run(change(case))
        assert refused.returncode != 0 and f"{MODEL} is writable by every account" in text(refused)
    finally:
        host.run_test(f"chmod o-w {MODEL}")
    converges(host, change(case))


def test_tags_never_cost_a_needless_model_reload(host, cases, at_inventory):
    case = cases()
    before = host_state(host)
    env_change = {"sglang_services_environment": {**LAB_ENV, "DSV4_CASE": f"tags-{case}"}}
    # A pending env change, and --tags genconfig: nothing of the servers is written, so nothing restarts.
    out = run(env_change, "--tags", "genconfig")
    assert out.returncode == 0, text(out)[-3000:]
    assert "held (outside --tags): /etc/sglang-dsv4/prefill.env" in flat(out)
    assert pids(host_state(host)) == pids(before) and host_state(host)["files"] == before["files"]
    # A pending temperature change, and --tags services: the servers keep running on the file on disk.
    temperature = {"sglang_genconfig_temperature": 0.7 if temperatures(before)["prefill"] != 0.7 else 0.65}
    out = run(temperature, "--tags", "services")
    assert out.returncode == 0, text(out)[-3000:]
    assert pids(host_state(host)) == pids(before) and host_state(host)["files"] == before["files"]
    # Both pending, and --tags genconfig: its restart would start the servers on a half-written state: refused.
    out = run({**env_change, **temperature}, "--tags", "genconfig")
    assert out.returncode != 0
    assert "whose inputs also have changes outside these tags" in flat(out) and "would restart services" in flat(out)
    assert re.search(r"sglang-dsv4-(prefill|decode): /etc/sglang-dsv4/(prefill|decode)\.env", flat(out))
    assert pids(host_state(host)) == pids(before) and host_state(host)["files"] == before["files"]
    # --tags genconfig with only a temperature change restarts both servers and verifies what is on disk.
    out = run(temperature, "--tags", "genconfig")
    assert out.returncode == 0, text(out)[-3000:]
    after = host_state(host)
    assert runs_from_disk(after) == [] and set(temperatures(after).values()) == set(temperature.values())


def test_check_diff_shows_what_changes_but_never_an_env_file_or_a_key(host, at_inventory):
    before = host_state(host)
    settings = {
        "sglang_services_environment": {**LAB_ENV, "HF_TOKEN": "hf-token-never-shown-0123"},
        "sglang_services_api_key": "rotated-key-never-shown-0123",
        "sglang_genconfig_temperature": 0.7,
    }
    out = run(settings, "--check", "--diff")
    assert out.returncode == 0, text(out)[-3000:]
    assert "changes /etc/sglang-dsv4/prefill.env" in flat(out) and '"temperature": 0.7' in text(out)
    assert "hf-token-never-shown-0123" not in text(out) and "rotated-key-never-shown-0123" not in text(out)
    assert host_state(host)["files"] == before["files"]


def control_plane_answers(key: str) -> int:
    """The status the router's control plane (GET /workers) gives this key."""
    return ask(f"{ROUTER}/workers", key)


def test_an_admin_key_rotation_drains_with_the_running_key_and_restarts_only_the_router(host, at_inventory):
    """The drain asks the running router with the key it runs with (its credential, read on the host); the new key
    takes over at the router's restart; prefill and decode keep running; no key reaches the journal or the output."""
    old, client = lab_secret("sglang_services_admin_key"), lab_secret("sglang_services_api_key")
    new = "rotated-admin-key-0123456789abcdefghijkl"
    before = host_state(host)
    assert control_plane_answers(old) == 200
    out = run({"sglang_services_admin_key": new}, "-vvv")
    assert out.returncode == 0, text(out)[-3000:]
    after = host_state(host)
    assert runs_from_disk(after) == []
    assert after["units"]["router"]["pid"] != before["units"]["router"]["pid"]
    assert all(after["units"][u]["pid"] == before["units"][u]["pid"] for u in ("prefill", "decode"))
    assert control_plane_answers(new) == 200 and control_plane_answers(old) == 401
    assert not host.file("/run/sglang-dsv4/drain.json").exists
    assert leaked(host, new, old, client) == []
    # Ansible's own output at -vvv: the new key was given on its command line (-e), never printed back.
    assert text(out).count(new) == 0 and old not in text(out) and client not in text(out)


def test_a_failed_first_deploy_leaves_nothing_running_or_enabled(host, at_inventory):
    """A host with no units before the run, and a verification that cannot hold: the rollback removes the new unit
    files and stops what they had started, so no process, unit or link is left, and the next run deploys."""
    host.run_test(
        "systemctl disable --now sglang-dsv4.target sglang-dsv4-router.service"
        " && systemctl stop sglang-dsv4-prefill sglang-dsv4-decode"
        " && rm -rf /etc/systemd/system/sglang-dsv4* && systemctl daemon-reload && rm -rf /run/sglang-dsv4"
    )
    assert host.run("pgrep -u sglang").rc == 1
    out = run({"sglang_verify_api_key": "a-key-nobody-has-000"}, "-vvv")
    assert out.returncode != 0
    assert f"{HOST} was rolled back to its state before this run" in text(out), text(out)[-3000:]
    # A failed rollout at -vvv: no key in Ansible's output, in the host's journal or in any file it left.
    keys = (lab_secret("sglang_services_api_key"), lab_secret("sglang_services_admin_key"))
    assert [k for k in keys if k in text(out)] == [] and leaked(host, *keys) == []
    assert "ROLLBACK FAILED" not in text(out)
    assert host.run("pgrep -u sglang").rc == 1, host.run("ps -u sglang -o pid,args").stdout
    units = host.run("systemctl list-units --all --no-legend --plain 'sglang-dsv4*'").stdout
    assert [line for line in units.splitlines() if " active " in f" {line} "] == [], units
    assert host.run("find /etc/systemd/system -name 'sglang-dsv4*' -o -lname '*sglang-dsv4*'").stdout.strip() == ""
    assert not host.file("/run/sglang-dsv4/drain.json").exists
    # The next plain run is the host's first deploy again, and it converges.
    out = deploy()
    assert out.returncode == 0, text(out)[-3000:]
    assert runs_from_disk(host_state(host)) == []


def test_a_drain_that_times_out_inside_the_rollback_names_the_host_out_of_rotation(host, cases, tmp_path):
    """The change fails its verification; the rollback's drain finds a long request in flight and times out
    (sglang_services_drain_on_timeout=stop). The run ends naming the host as OUT OF ROTATION and why; the host's
    guard never puts the rejected settings back; the next plain run converges it and puts it back into rotation."""
    case = cases()
    settings = {
        **change(case),
        # Each token takes 0.1 s: a 400-token stream is in flight for 40 s.
        "sglang_services_environment": {**LAB_ENV, "DSV4_CASE": str(case), "SGLANG_LAB_TOKEN_SECONDS": "0.1"},
        "sglang_services_drain_timeout": 3,
        "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95},
    }
    # The rollback's restart call (the second of the run) is held right before its drain until a long request is
    # in flight: the drain finds it there, however slowly the machine runs.
    hold = Hold(tmp_path, f"{BEFORE_DRAIN}#2")
    rollout = start("deploy.yml", "-e", json.dumps(settings), env=hold.env)
    try:
        hold.reached(rollout, seconds=900)
        stream = long_stream(f"{ROUTER}/v1/chat/completions", lab_secret("sglang_services_api_key"), 400)
        assert stream.wait(60), "the long request never started streaming"
    finally:
        hold.release()
        out = finish(rollout, timeout=900)
    ended = host_clock(host)
    assert out.returncode != 0
    message = flat(out)
    assert f"ROLLBACK FAILED on {HOST}" in message, message[-3000:]
    assert "did not drain within sglang_services_drain_timeout=3 s" in message
    # Asked of the router and the drain's state, not read from a file's absence.
    assert re.search(
        rf"The host is OUT OF ROTATION: drained[^:]*: its router.s workers are kept in {re.escape(DRAIN)}", message
    )
    assert host.file(DRAIN).exists and not in_rotation(host, ROUTER)
    # No run holds the host any more, but its services run the settings the run rejected: the guard's next look
    # keeps it out.
    said = guard_looked(host, ended)
    assert "does not run from the files on disk" in said, said
    assert host.file(DRAIN).exists, guard_said(host)
    out = deploy()
    assert out.returncode == 0, text(out)[-3000:]
    assert runs_from_disk(host_state(host)) == [] and in_rotation(host, ROUTER)
