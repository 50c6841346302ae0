"""Rollouts that fail safe, judged on the host: the fault matrix and the ways a run goes wrong.

For each step of the apply, the step is made to fail (a) and the controller is killed there (b), by the lab fault
injector (molecule/shared/fault_plugins/lab_fault.py, a lab tool). Invariants, read on the host (files byte for byte,
start records of the current invocations, their journals, MainPIDs), never from Ansible's output:
  after (a)        the host's files are as before the run and every service runs from exactly them;
  after (a), (b)   the next plain run converges the host (every service runs from the files on disk, the desired
                   ones), and the run after it is changed=0 and restarts nothing;
  after (b)        a run that does not hold the lease (no break) changes nothing.
Each test leaves the host converged for the next (the inventory's state is restored at the end of the module).
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from conftest import ROOT, deploy, flat, host_state, lab_secret, recap, runs_from_disk, text

HOST = "dsv4-fs-1"
LOCK = "/run/sglang-dsv4-deploy"
MODEL = "/srv/models/DeepSeek-V4-Flash"
GENCONFIG = f"{MODEL}/generation_config.json"
ROUTER = "http://127.0.0.1:26010"
LAB_ENV = {"SGLANG_LAB_STARTUP_SECONDS": "1", "SGLANG_LAB_DRAIN_POLL_SECONDS": "1", "SGLANG_LAB_FAIL_START": "0"}
FAULTS = {
    "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "molecule/shared/fault_plugins"),
    "ANSIBLE_CALLBACKS_ENABLED": "lab_fault",
}
RESTART = "Restart what does not run from its inputs (prefill and decode together, the router on its own)"

# Each step of the apply, as the task that starts right after it (or is it, for the restart and the verification).
STEPS = [
    ("after the lock", "Snapshot the files this rollout may change", 0),
    ("after the snapshot", "Read the host's state and compute its plan#2", 0),  # the read under the lock
    ("after the generation_config.json write", "Create the folders of the managed defaults and the helper", 0),
    ("after the env files' write", "Stage the units and the target", 0),
    (
        "after the units' write",
        "Restart prefill and decode if the host's state says they do not run from their inputs",
        0,
    ),
    ("at the restart request", RESTART, 1.5),
    ("during the verification", "Read /server_info of prefill and decode", 0),
]


def change(case: int) -> dict:
    """A change of every kind of input (generation_config.json, env files, units), different for each case."""
    return {
        "sglang_genconfig_temperature": (0.7, 0.65)[case % 2],
        "sglang_services_environment": {**LAB_ENV, "DSV4_CASE": str(case)},
        "sglang_services_timeout_start_sec": 121 + case % 2,
    }


def run(settings: dict | None = None, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    extra = ["-e", json.dumps(settings)] if settings else []
    return deploy(*extra, *args, env={**FAULTS, "DSV4_LAB_FAULT": fault} if fault else None)


def temperatures(state: dict) -> dict:
    return {u: (state["units"][u]["logged"] or {}).get("temperature") for u in ("prefill", "decode")}


def pids(state: dict) -> dict:
    return {u: (e["pid"], e["invocation"]) for u, e in state["units"].items()}


def break_args(host) -> list[str]:
    owner = host.run(f"cat {LOCK}/owner.json")
    run_id = json.loads(owner.stdout)["run_id"] if owner.rc == 0 and owner.stdout.startswith("{") else "true"
    return ["--limit", HOST, "-e", f"sglang_rollout_break_lock={run_id}"]


def converges(host, settings: dict, *args: str) -> dict:
    """The next plain run converges the host, and the run after it changes and restarts nothing."""
    out = run(settings, *args)
    assert out.returncode == 0, text(out)[-4000:]
    state = host_state(host)
    assert runs_from_disk(state) == []
    assert set(temperatures(state).values()) == {settings["sglang_genconfig_temperature"]}, temperatures(state)
    assert not state["lock"]
    again = run(settings)
    assert again.returncode == 0, text(again)[-3000:]
    assert "apply to 0 of 1 host(s): none" in again.stdout and "changed=0" in recap(again.stdout)
    assert pids(host_state(host)) == pids(state)
    return state


@pytest.fixture(scope="module", autouse=True)
def back_to_the_inventory(host):
    yield
    out = deploy(*(break_args(host) if host.file(LOCK).exists else []))
    assert out.returncode == 0, text(out)[-3000:]


@pytest.fixture
def at_inventory(host):
    """The host as the inventory says, so that the only pending change is the one the test makes."""
    out = deploy(*(break_args(host) if host.file(LOCK).exists else []))
    assert out.returncode == 0, text(out)[-3000:]
    assert runs_from_disk(host_state(host)) == []


@pytest.fixture(scope="module")
def cases():
    """Numbers each case, so that every case's change differs from the state the previous one left."""
    counter = iter(range(1, 1000))
    return lambda: next(counter)


@pytest.mark.parametrize(("step", "task", "_delay"), STEPS, ids=[s[0] for s in STEPS])
def test_a_failed_step_leaves_the_host_as_before_and_the_next_run_converges(host, cases, step, task, _delay):
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


@pytest.mark.parametrize(("step", "task", "delay"), STEPS, ids=[s[0] for s in STEPS])
def test_a_run_killed_at_a_step_is_repaired_by_the_next_run(host, cases, step, task, delay):
    case = cases()
    out = run(change(case), fault=f"kill:{task}" + (f"@{delay}" if delay else ""))
    assert out.returncode != 0 and "PLAY RECAP" not in out.stdout, step
    time.sleep(2)  # what the killed controller had already asked of the host settles
    left = host_state(host)
    assert left["lock"], "a run killed after taking the lock leaves it"
    # A run that does not hold the lease changes nothing.
    blocked = run(change(case + 500))
    assert blocked.returncode != 0 and "Nothing was changed" in text(blocked)
    assert host_state(host)["files"] == left["files"]
    converges(host, change(case), *break_args(host))


def test_a_failed_rollback_says_so_loudly_and_the_next_run_converges(host, cases):
    case = cases()
    wrong = {**change(case), "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95}}
    out = run(wrong, fault=f"fail:{RESTART}#2")
    assert out.returncode != 0
    assert f"ROLLBACK FAILED on {HOST}: the host is NOT back to its state before this run" in text(out)
    assert "was rolled back to its state" not in text(out)
    rollout = json.loads(host.file("/var/lib/sglang-dsv4/rollout.json").content_string)
    assert rollout["outcome"] == "rollback failed" and not rollout["rolled_back"]
    assert not host_state(host)["lock"]
    converges(host, change(case))


@pytest.mark.parametrize(
    "task",
    ["Put this run's snapshot back (checked byte for byte)", f"{RESTART}#2"],
    ids=["before", "after the restore"],
)
def test_a_run_killed_during_its_rollback_is_repaired_by_the_next_run(host, cases, task):
    case = cases()
    wrong = {**change(case), "sglang_verify_expected_sampling": {"temperature": 0.8, "top_p": 0.95}}
    out = run(wrong, fault=f"kill:{task}")
    assert out.returncode != 0 and "PLAY RECAP" not in out.stdout
    time.sleep(2)
    assert host_state(host)["lock"]
    converges(host, change(case), *break_args(host))


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


ASK_ROUTER = (
    "import json, sys, urllib.request, urllib.error\n"
    "body = json.dumps({'model': 'deepseek-ai/DeepSeek-V4-Flash', 'max_tokens': 4,"
    " 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()\n"
    "headers = {'Authorization': 'Bearer ' + sys.argv[2], 'Content-Type': 'application/json'}\n"
    "request = urllib.request.Request(sys.argv[1], data=body, headers=headers)\n"
    "try:\n    print(urllib.request.urlopen(request, timeout=30).status)\n"
    "except urllib.error.HTTPError as error:\n    print(error.code)\n"
)


def router_answers(host, key: str) -> int:
    """The HTTP status the router gives a client with this key (asked on the host, as a client there would)."""
    import shlex

    return int(
        host.check_output(f"python3 -c {shlex.quote(ASK_ROUTER)} {ROUTER}/v1/chat/completions {shlex.quote(key)}")
    )


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


@pytest.mark.parametrize(
    "plant",
    [
        f"mkfifo {LOCK}",
        f"mkdir -m 0700 {LOCK} && mkfifo {LOCK}/owner.json",
        f"mkdir -m 0700 {LOCK} && echo '{{\"run_id\": 7}}' > {LOCK}/owner.json",
    ],
    ids=["fifo", "fifo-owner", "non-number"],
)
def test_an_unreadable_lock_is_reported_in_bounded_time_and_cleared_only_by_a_limited_break(host, cases, plant):
    case = cases()
    host.run_test(plant)
    started = time.monotonic()
    blocked = run(change(case))
    assert time.monotonic() - started < 120, "reading the lock must never hang the plan"
    assert blocked.returncode != 0
    assert (
        "unreadable lock" in text(blocked)
        and "holder unknown" in text(blocked)
        and "Nothing was changed" in text(blocked)
    )
    converges(host, change(case), "--limit", HOST, "-e", "sglang_rollout_break_lock=true")


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


def test_a_run_whose_live_lease_was_broken_stops_and_touches_nothing_more(host, cases):
    evicted_case, case = cases(), cases()
    fence = "Check that this run still holds the lock, and renew its lease#3"  # before the generation_config write
    evicted = subprocess.Popen(
        [*deploy_argv(), "-e", json.dumps(change(evicted_case))],
        cwd=ROOT,
        # Paused long enough for the other run to break its lease and finish (plan, apply, and a no-op run).
        env=fault_env(f"pause:{fence}@75"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not host.file(f"{LOCK}/owner.json").exists:
        assert time.monotonic() < deadline and evicted.poll() is None, "the first run never took the lock"
        time.sleep(0.5)
    run_id = json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"]
    plain = run(change(case), "--limit", HOST, "-e", "sglang_rollout_break_lock=true")
    assert plain.returncode != 0 and "a live lease is broken only by naming its run" in text(plain)
    state = converges(host, change(case), "--limit", HOST, "-e", f"sglang_rollout_break_lock={run_id}")
    output, _unused = evicted.communicate(timeout=300)
    assert evicted.returncode != 0
    assert f"this run lost the lock of {HOST} to another run and touched nothing more there" in output, output[-3000:]
    after = host_state(host)
    assert after["files"] == state["files"] and pids(after) == pids(state)
    assert temperatures(after) == {"prefill": change(case)["sglang_genconfig_temperature"]} | {
        "decode": change(case)["sglang_genconfig_temperature"]
    }
    assert not after["lock"]


def deploy_argv() -> list[str]:
    import sys
    from pathlib import Path

    from conftest import inventory

    return [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory(), "deploy.yml"]


def fault_env(fault: str) -> dict:
    import os

    return {**os.environ, "ANSIBLE_NOCOLOR": "1", **FAULTS, "DSV4_LAB_FAULT": fault}


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
