"""What operators really do to a rollout, on one lab host: every listed tag, --check, a run cut short with Ctrl-C,
a change a killed run left behind, two runs at once, a stale lock, and a server that never gets ready.

Each test leaves the host as converged (temperature 0.6) for the next.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtools import Hold, finish, host_state, pids, start

from conftest import GENCONFIG, ROOT, deploy, inventory, lab_secret, recap, text

BIN = Path(sys.executable).parent
LOCK = "/run/sglang-dsv4-deploy"
SERVERS = ("prefill", "decode")
TEMPERATURE = '{{"sglang_genconfig_temperature": {}}}'
# The services role's first write: it starts after the sampling defaults' call, whether or not it has files to write.
SERVICES_WRITE = "Write the credentials, the settings (env files) and the health gate"
# The apply's first host-side call (module sglang_rollout_open): the lock, the snapshot, the read under the lock.
OPEN = "Take the lock, snapshot what this run may change and read the host again, in one call"


def logged(host, unit: str) -> str:
    invocation = host.service(f"sglang-dsv4-{unit}").systemd_properties["InvocationID"]
    out = host.run(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation} | grep -F 'Using default chat'")
    return out.stdout


def main_pids(host) -> dict[str, str]:
    return {u: host.service(f"sglang-dsv4-{u}").systemd_properties["MainPID"] for u in (*SERVERS, "router")}


def break_args(host) -> list[str]:
    """What an operator passes to clear a lock a killed run left: --limit the host, and the holder's run id."""
    if not host.file(LOCK).exists:
        return []
    owner = host.run(f"cat {LOCK}/owner.json")
    run_id = json.loads(owner.stdout).get("run_id") if owner.rc == 0 and owner.stdout.startswith("{") else None
    return ["--limit", host.check_output("hostname"), "-e", f"sglang_rollout_break_lock={run_id or 'true'}"]


def converged(host) -> None:
    """Back to the inventory's state (a full run), and proven; a lock a failed test left is cleared first."""
    out = deploy(*break_args(host))
    assert out.returncode == 0, out.stdout[-3000:]
    assert all("'temperature': 0.6" in logged(host, u) for u in SERVERS)
    assert not host.file(LOCK).exists


@pytest.fixture(autouse=True)
def back_to_converged(host):
    yield
    converged(host)


def test_a_no_op_run_goes_through_the_plan_only(host):
    before = main_pids(host)
    out = deploy()
    assert out.returncode == 0, out.stdout[-3000:]
    assert "apply to 0 of 1 host(s): none" in out.stdout
    assert "light proof: ok" in out.stdout
    assert "Take the rollout lock" not in out.stdout
    assert "changed=0" in recap(out.stdout)
    assert main_pids(host) == before


def test_tag_preflight_checks_and_plans_but_changes_nothing(host):
    before = host.check_output(f"sha256sum {GENCONFIG}")
    out = deploy("--tags", "preflight", "-e", TEMPERATURE.format(0.7))
    assert out.returncode == 0, out.stdout[-3000:]
    assert "its inputs change in this run" in out.stdout and "Validating arguments against arg spec" in out.stdout
    assert "Take the rollout lock" not in out.stdout
    assert host.check_output(f"sha256sum {GENCONFIG}") == before


def test_tag_verify_runs_the_full_proof_and_changes_nothing(host):
    before = main_pids(host)
    out = deploy("--tags", "verify")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "answers                4 of 4 different" in out.stdout
    assert "Take the rollout lock" not in out.stdout
    assert main_pids(host) == before


def test_tag_verify_fails_when_the_host_is_not_as_the_inventory_says(host):
    out = deploy("--tags", "verify", "-e", TEMPERATURE.format(0.7))
    assert out.returncode != 0
    assert "logged {'temperature': 0.6, 'top_p': 0.95} at its current start; expected" in text(out)


def test_tag_genconfig_changes_the_file_and_still_restarts_both_servers(host):
    before = main_pids(host)
    out = deploy("--tags", "genconfig", "-e", TEMPERATURE.format(0.65))
    assert out.returncode == 0, out.stdout[-3000:]
    after = main_pids(host)
    assert after["prefill"] != before["prefill"] and after["decode"] != before["decode"]
    assert after["router"] == before["router"]
    assert all("'temperature': 0.65" in logged(host, u) for u in SERVERS)
    assert "sglang_services : Install" not in out.stdout and "sglang_runtime : Install" not in out.stdout


def test_tag_services_changes_only_settings_and_restarts_what_they_feed(host):
    lab = {"SGLANG_LAB_STARTUP_SECONDS": "1", "SGLANG_LAB_DRAIN_POLL_SECONDS": "1", "SGLANG_LAB_FAIL_START": "0"}
    env = {"sglang_services_environment": {**lab, "X": "1"}}
    before = main_pids(host)
    out = deploy("--tags", "services", "-e", json.dumps(env))
    assert out.returncode == 0, out.stdout[-3000:]
    assert "X=1" in host.file("/etc/sglang-dsv4/prefill.env").content_string
    assert "sglang_genconfig : Merge" not in out.stdout and "sglang_runtime : Install" not in out.stdout
    after = main_pids(host)
    assert all(after[u] != before[u] for u in (*SERVERS, "router"))


def test_tag_runtime_with_nothing_to_do_does_nothing(host):
    before = main_pids(host)
    out = deploy("--tags", "runtime")
    assert out.returncode == 0, out.stdout[-3000:]
    assert main_pids(host) == before and "changed=0" in recap(out.stdout)


def test_a_change_left_by_a_killed_run_is_repaired_by_the_next_run(host):
    # Staged as a run that died right after writing the file: the file holds 0.7, the servers still 0.6.
    stage = subprocess.run(
        [
            str(BIN / "ansible"),
            "-i",
            inventory(),
            "all",
            "-m",
            "dsv4.sglang.sglang_generation_config",
            "-a",
            json.dumps({"path": GENCONFIG, "sampling": {"temperature": 0.7, "top_p": 0.95}}),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stage.returncode == 0, stage.stdout
    out = deploy("-e", TEMPERATURE.format(0.7))
    assert out.returncode == 0, out.stdout[-3000:]
    assert "started from inputs that have changed since" in out.stdout
    assert all("'temperature': 0.7" in logged(host, u) for u in SERVERS)


def test_ctrl_c_after_the_file_change_leaves_a_lock_that_is_reported_then_repaired(host, tmp_path):
    # Held at the services role's first write, right after the file's (the lab fault injector holds the controller
    # there until released, which this test never does), so the Ctrl-C lands after the change and before the run
    # could end, however slowly the machine runs.
    hold = Hold(tmp_path, SERVICES_WRITE)
    run = start("deploy.yml", "-e", TEMPERATURE.format(0.7), env=hold.env)
    hold.reached(run)
    assert '"temperature": 0.7' in host.file(GENCONFIG).content_string
    os.killpg(run.pid, signal.SIGINT)
    finish(run, timeout=120)
    assert host.file(LOCK).exists
    run_id = json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"]
    blocked = deploy("-e", TEMPERATURE.format(0.7))
    assert blocked.returncode != 0
    assert (
        "held by" in text(blocked) and "its lease is live" in text(blocked) and "Nothing was changed" in text(blocked)
    )
    # The lease is live: only naming the run breaks it, and only on the hosts named in --limit.
    assert f"--limit dsv4-mol-1 -e sglang_rollout_break_lock={run_id}" in text(blocked)
    plain = deploy("-e", TEMPERATURE.format(0.7), "--limit", "dsv4-mol-1", "-e", "sglang_rollout_break_lock=true")
    assert plain.returncode != 0 and "a live lease is broken only by naming its run" in text(plain)
    unlimited = deploy("-e", TEMPERATURE.format(0.7), "-e", f"sglang_rollout_break_lock={run_id}")
    assert unlimited.returncode != 0 and "only with --limit naming the hosts whose lock to break" in text(unlimited)
    assert json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"] == run_id
    repaired = deploy(
        "-e", TEMPERATURE.format(0.7), "--limit", "dsv4-mol-1", "-e", f"sglang_rollout_break_lock={run_id}"
    )
    assert repaired.returncode == 0, repaired.stdout[-3000:]
    assert re.search(r"(its inputs change in this run|started from inputs that have changed since)", repaired.stdout)
    assert all("'temperature': 0.7" in logged(host, u) for u in SERVERS)


def unchanged(before: dict, after: dict) -> None:
    """Files byte for byte, and every service the same process of the same invocation."""
    assert after["files"] == before["files"]
    assert pids(after) == pids(before)


def test_runs_at_once_only_the_lock_holder_changes_anything_in_either_order_they_meet_the_lock(host, tmp_path):
    """Three runs, their order decided by the test (each held at a named point until released), not by the machine:

    - `late` plans first (no lock yet: its plan finds the host free) and is held at the start of its open;
    - `first` then takes the lock and is held right after it, inside its open;
    - `second` plans while `first` holds the lock: its plan finds the lease live and stops there;
    - `late` is released: its open finds the lock taken meanwhile and is refused.

    Both refused runs fail, name the holder, change nothing on the host (files byte for byte, every service's MainPID
    and InvocationID, the lock still the holder's) and never say that a host changed; then `first` goes on and
    completes."""
    late = Hold(tmp_path / "late", OPEN)
    late_run = start("deploy.yml", "-e", TEMPERATURE.format(0.8), env=late.env)
    hold = Hold(tmp_path / "first", f"{OPEN}>after_lock")
    first = None
    try:
        late.reached(late_run)
        assert not host.file(LOCK).exists
        first = start("deploy.yml", "-e", TEMPERATURE.format(0.7), env=hold.env)
        hold.reached(first)
        holder = json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"]
        before = host_state(host)
        second = deploy("-e", TEMPERATURE.format(0.75))
        late.release()
        refused = finish(late_run, timeout=600)
        after = host_state(host)
        still = json.loads(host.file(f"{LOCK}/owner.json").content_string)["run_id"]
    finally:
        late.release()
        hold.release()
        if late_run.returncode is None:
            finish(late_run, timeout=600)
        first_done = finish(first, timeout=600) if first else None
    unchanged(before, after)
    assert still == holder
    # The second run stops in its plan: it never opens an apply.
    said = " ".join(text(second).split())
    assert second.returncode != 0
    assert f"(run {holder})" in said and "held by" in said and "Nothing was changed" in said, said[-3000:]
    assert "Take the rollout lock" not in second.stdout and OPEN not in second.stdout
    # The late run planned an apply, and its open was refused.
    said = " ".join(text(refused).split())
    assert refused.returncode != 0, said[-3000:]
    assert "apply to 1 of 1 host(s): dsv4-mol-1" in said
    assert f"(run {holder})" in said and "held by" in said and "nothing was changed" in said, said[-3000:]
    # Its last line is the recap: nothing changed, the host failed; no line of the run says a host changed.
    last = refused.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"dsv4-mol-1 +: ok=\d+ +changed=0 +unreachable=0 +failed=1 .*", last.strip()), last
    assert not re.search(r"every host changed|rollout: [1-9]\d* changed", said), said[-3000:]
    assert first_done.returncode == 0, text(first_done)[-3000:]
    assert all("'temperature': 0.7" in logged(host, u) for u in SERVERS)
    assert '"temperature": 0.7' in host.file(GENCONFIG).content_string


def test_a_stale_lock_is_reported_with_holder_age_and_how_to_clear_it(host):
    stale = {"run_id": "20260101T000000Z-1", "owner": "someone@elsewhere", "taken": time.time() - 7200}
    stale["lease_until"] = stale["taken"] + 60
    host.run(f"mkdir -p {LOCK} && echo '{json.dumps(stale)}' > {LOCK}/owner.json")
    noop = deploy()
    assert noop.returncode == 0, "a host with nothing to do does not need the lock"
    blocked = deploy("-e", TEMPERATURE.format(0.7))
    assert blocked.returncode != 0
    assert "someone@elsewhere" in text(blocked) and "has EXPIRED" in text(blocked)
    assert re.search(r"for 7[12]\d\d s", text(blocked))
    assert host.file(LOCK).exists
    cleared = deploy("--limit", "dsv4-mol-1", "-e", "sglang_rollout_break_lock=true")
    assert cleared.returncode == 0, cleared.stdout[-3000:]
    assert not host.file(LOCK).exists


def test_a_server_that_never_gets_ready_fails_the_run_within_one_start_timeout(host):
    # -v: every restart's result, with what it waited, is printed (not only the failed one's).
    never_ready = {"sglang_services_timeout_start_sec": 20, "sglang_lab_fail_start": "never_ready"}
    out = deploy("-v", "-e", json.dumps(never_ready))
    assert out.returncode != 0
    assert re.search(r"sglang-dsv4-(prefill|decode) did not start", text(out)), text(out)[-3000:]
    # Judged on what the restarts report, not on the wall clock (which a loaded controller stretches): exactly one
    # restart's result says its start timeout ran out (the rollback's restart, onto the old files, comes up), and what
    # it waited is bounded by the 20 s start timeout plus the module's 15 s margin. (A successful restart's total
    # wait, drain and undrain included, is no evidence of a timeout: on a loaded machine it passed 20 s.)
    results = re.split(r"\n(?=(?:fatal|failed|changed|ok): \[|\[ERROR\]|TASK \[|RUNNING HANDLER \[|PLAY )", text(out))
    timed_out = [
        block
        for block in results
        if block.startswith(("fatal", "failed"))
        and re.search(r"did not start|not ready within the start timeout", block)
        and re.search(r"\"?waited\"?: [0-9.]+", block)
    ]
    assert len(timed_out) == 1, timed_out
    waited = [float(w) for w in re.findall(r"\"?waited\"?: ([0-9.]+)", timed_out[0])]
    assert waited and all(w <= 20 + 15 for w in waited), waited
    assert "was rolled back to its state before this run" in text(out)
    assert not host.file(LOCK).exists


def test_a_server_whose_defaults_hold_a_key_the_file_does_not_set_fails_the_proof_and_rolls_back(host):
    """Exactly the intended defaults: servers whose defaults take transformers' class defaults for the keys the file
    leaves out (the lab's imitation of sglang issue 11574) still log temperature 0.6 and top_p 0.95, and the
    verification fails naming each leaked key, its value and where SGLang took it from; the host is rolled back and
    its servers run again with exactly the file's defaults."""
    out = deploy("-e", json.dumps({"sglang_lab_transformers_class_defaults": True}))
    said = " ".join(text(out).split())
    assert out.returncode != 0
    assert (
        "top_k=50 is in the server's defaults, but generation_config.json sets no top_k: SGLang took it from"
        " transformers' GenerationConfig (a class default its to_dict() fills in), not from the file" in said
    ), said[-4000:]
    assert "repetition_penalty=1.0 is in the server's defaults" in said
    assert "was rolled back to its state before this run" in said
    for unit in SERVERS:
        line = logged(host, unit)
        assert "'temperature': 0.6" in line and "'top_p': 0.95" in line and "top_k" not in line, line


def served_weight_version(host, unit: str) -> str:
    """The weight_version a server reports in effect (its /model_info), asked on the host with the client key."""
    port = re.search(r" --port (\d+)", host.file(f"/etc/systemd/system/sglang-dsv4-{unit}.service").content_string)
    ask = (
        "import json, sys, urllib.request as u;"
        " r = u.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]});"
        " print(u.urlopen(r, timeout=10).read().decode())"
    )
    url = f"http://127.0.0.1:{port.group(1)}/model_info"
    out = host.check_output(f'python3 -c "{ask}" {url} {lab_secret("sglang_services_api_key")}')
    return json.loads(out)["weight_version"]


def test_new_weights_are_a_planned_restart_of_both_servers_and_each_server_reports_their_version(host):
    """Which weights each server runs: --weight-version is the digest of the model directory's weights manifest
    (names, sizes, times of the weight files), written by each start's record step; new weights are an input
    that changed, so the plan restarts prefill and decode together (never the router), and the verification
    proves that each server reports the version of the weights on disk."""
    shard = "/srv/models/DeepSeek-V4-Flash/model-00001-of-00001.safetensors"
    env = "/run/sglang-dsv4/sglang-dsv4-{}.weights.env"
    old = {u: served_weight_version(host, u) for u in SERVERS}
    assert set(old.values()) == {host.file(env.format("prefill")).content_string.split("=", 1)[1].strip()}
    (old_version,) = set(old.values())
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", old_version), old_version
    # New weights, as a copy of a new checkpoint lands: another file of another size, in place.
    host.check_output(f"cp -p {shard} /root/shard.bak && printf 'new' >> {shard}")
    try:
        # Until a deploy restarts them, the servers run other weights than the directory holds: the proof says so.
        out = deploy("--tags", "verify")
        said = " ".join(text(out).split())
        assert out.returncode != 0
        assert f"sglang-dsv4-prefill on dsv4-mol-1 reports weight_version='{old_version}' (its /model_info)" in said
        before = main_pids(host)
        out = deploy()
        assert out.returncode == 0, out.stdout[-3000:]
        said = " ".join(out.stdout.split())
        assert f"started from: sglang-dsv4-decode {old_version}, sglang-dsv4-prefill {old_version}" in said
        assert f"weights /srv/models/DeepSeek-V4-Flash ({old_version} -> sha256:" in said
        after = main_pids(host)
        assert after["prefill"] != before["prefill"] and after["decode"] != before["decode"]
        assert after["router"] == before["router"]
        new = {u: served_weight_version(host, u) for u in SERVERS}
        (new_version,) = set(new.values())
        assert new_version != old_version
        assert host.file(env.format("decode")).content_string == f"SGLANG_DSV4_WEIGHT_VERSION={new_version}\n"
        # The next plan sees the servers on the weights the directory holds: nothing to do.
        out = deploy()
        assert out.returncode == 0 and "apply to 0 of 1 host(s): none" in out.stdout, out.stdout[-3000:]
        assert f"weights {new_version} (2 weight files), running" in " ".join(out.stdout.split())
    finally:
        host.check_output(f"cp -p /root/shard.bak {shard}")
