"""The host read of the plan (module_utils/sglang_host_read.py, which modules sglang_host_state and
sglang_rollout_open run) and the concerns it reads through: bounded commands (module_utils/sglang_commands.py),
refused writers and the GPU count (sglang_host_checks.py), runtime changes (sglang_started.py), releases
(sglang_release.py) and the probe of what a server runs with (sglang_probe.py)."""

from __future__ import annotations

import os
import time

from ansible_collections.dsv4.sglang.plugins.module_utils import (
    sglang_commands,
    sglang_host_checks,
    sglang_probe,
    sglang_release,
    sglang_started,
)
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_host_read as state


class Module:
    """What the host read's file comparison uses of AnsibleModule: its params and _diff (set by each test)."""


def test_a_wedged_nvidia_smi_fails_the_plan_within_seconds_naming_the_command(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nsleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sglang_commands, "COMMAND_TIMEOUT", 2)
    started = time.monotonic()
    errors = sglang_host_checks.check_errors({"gpus": 8})
    assert time.monotonic() - started < 30  # bounded: 2 s, then SIGKILL 2 s later (never the 600 s it asks for)
    assert errors == [
        "nvidia-smi did not answer within 2 s (sglang_services_check_gpu_count): "
        "the driver is wedged or the GPUs are hung"
    ]


def test_a_bounded_command_that_ignores_sigterm_is_killed_with_its_children_and_named(tmp_path, monkeypatch):
    """The bound is the module's own (no coreutils timeout around the command): past it, the command's whole process
    group gets SIGTERM, then SIGKILL; a child it started does not outlive the call."""
    pidfile = tmp_path / "child.pid"
    stubborn = tmp_path / "journalctl"
    stubborn.write_text(f"#!/bin/sh\ntrap '' TERM\nsleep 600 &\necho $! > {pidfile}\nwait\n")
    stubborn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sglang_commands, "KILL_AFTER", 1)
    rc, out, err = sglang_commands.bounded(["journalctl", "-n", "1"], seconds=1)
    assert (rc, out, err) == (124, "", "journalctl did not answer within 1 s")
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)  # the kernel reaps the orphaned child once init collects it
    assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z"


def test_a_bounded_command_returns_its_rc_and_output_and_a_missing_one_is_named():
    assert sglang_commands.bounded(["sh", "-c", "printf 'a\\n'; printf 'b' >&2; exit 3"]) == (3, "a\n", "b")
    rc, out, err = sglang_commands.bounded(["sglang-no-such-command"])
    assert (rc, out) == (127, "") and err.startswith("sglang-no-such-command: ")


def test_a_model_directory_another_account_can_write_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "generation_config.json").write_text("{}")
    assert sglang_host_checks.check_errors({"model_path": str(model), "model_files": ["config.json"]}) == []
    model.chmod(0o777)
    errors = sglang_host_checks.check_errors({"model_path": str(model), "writers": ["nobody"]})
    assert errors and f"{model} is writable by every account" in errors[0] and "sglang_common_model_path" in errors[0]
    model.chmod(0o755)
    os.chown(model / "generation_config.json", 65534, 65534)
    errors = sglang_host_checks.check_errors({"model_path": str(model), "writers": []})
    assert errors and "generation_config.json is owned by uid 65534" in errors[0]


def test_the_plan_names_the_distributions_that_changed_since_the_start(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang-0.5.23.dist-info").mkdir(parents=True)
    venv = str(tmp_path / "venv")
    unit = {"inputs": [f"distributions:{venv}"]}
    record = {"inputs": {f"distributions:{venv}": "old"}, "runtime": {venv: {"sglang": "0.5.22", "gone": "1.0"}}}
    current = {f"distributions:{venv}": "new"}
    assert sglang_started.changed_since_start(unit, record, current) == [
        f"runtime {venv} (gone 1.0 -> -, sglang 0.5.22 -> 0.5.23)"
    ]


def test_releases_found_counts_finished_releases_once_across_the_folders_of_the_desired_ones(tmp_path):
    folder = tmp_path / "releases"
    for rid, finished in (("r1", True), ("r2", True), ("r3", False)):
        (folder / rid).mkdir(parents=True)
        if finished:
            (folder / rid / "sglang-release.json").write_text(f'{{"id": "{rid}"}}')
    desired = [{"path": str(folder / "r1")}, {"path": str(folder / "r9")}]
    # r3 has no manifest (an unfinished build): the prune would not count it either.
    assert sglang_release.releases_found(desired) == 2
    assert sglang_release.releases_found([]) == 0
    assert sglang_release.releases_found([{"path": str(tmp_path / "absent/r1")}]) == 0


def test_a_key_file_is_compared_by_its_hmac_and_its_inputs_digest_stays_the_files_own(tmp_path):
    import hashlib

    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import keyed_digest

    key_file = tmp_path / "router-admin"
    key_file.write_text("dsv4-admin:operators:admin:the-running-key-0123")
    module = Module()
    module.params = {"digest_key": "run-key"}
    module._diff = False
    same = {"path": str(key_file), "sha256": keyed_digest(key_file.read_bytes(), "run-key"), "mode": None}
    changes, desired = state.file_changes(module, [same], [], "run-key")
    assert changes == [] and desired[str(key_file)] == hashlib.sha256(key_file.read_bytes()).hexdigest()
    rotated = {**same, "sha256": keyed_digest(b"dsv4-admin:operators:admin:a-new-key-000000", "run-key")}
    changes, desired = state.file_changes(module, [rotated], [], "run-key")
    assert changes == [str(key_file)] and desired[str(key_file)] == rotated["sha256"]


def test_the_probe_reads_only_the_current_invocations_startup_line_and_names_what_it_could_not_read(
    tmp_path, monkeypatch
):
    """One probe for the light proof and the verification: the startup line of this invocation only, and a server
    whose /server_info cannot be read is named with why (never taken as the model's defaults)."""
    journal = tmp_path / "journalctl"
    journal.write_text(
        '#!/bin/sh\ncase "$4" in *=inv-2) echo \'x\'; echo "Using default chat sampling params from model generation'
        " config: {'temperature': 0.6, 'top_p': 0.95}\";; *) echo \"Using default chat sampling params from model"
        " generation config: {'temperature': 0.1}\";; esac\n"
    )
    journal.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert sglang_probe.logged_defaults("inv-2") == {"temperature": 0.6, "top_p": 0.95}
    assert sglang_probe.logged_defaults("") is None
    mode, why = sglang_probe.sampling_mode("http://127.0.0.1:9/health", "k", timeout=2)
    assert mode is None and why.startswith("http://127.0.0.1:9/server_info answered nothing")


def test_weights_that_cannot_be_read_are_a_check_error_naming_the_path_and_a_router_host_reads_none(tmp_path):
    """A server host's plan reads its weight version; a share not mounted makes it unknown: no version, a check error
    of the read naming the variable and the path (beside the read's other checks: the run stops in its plan, before
    anything changes), and the inputs' digest of the weights unknown (None), never the empty manifest's. A host that
    runs no server (a pool's router host) loads no weights and reads none."""
    gone = str(tmp_path / "not-mounted")
    servers = {"sglang-dsv4-prefill": "servers", "sglang-dsv4-router": "router"}
    state_now = {"sglang-dsv4-prefill": {"weight_version": "sha256:0123456789abcdef"}}
    weights = state.plan_weights(gone, state_now, servers)
    assert weights["version"] is None and weights["files"] == 0
    assert weights["unreadable"].startswith(f"sglang_common_model_path={gone}: the model directory {gone} cannot be")
    assert "Mount the share or fix its permissions" in weights["unreadable"]
    assert state.unreadable_weights(weights) == [weights["unreadable"]]
    assert state.known_digest(f"weights:{gone}") is None
    assert state.plan_weights(gone, {}, {"sglang-dsv4-router": "router"}) is None
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w")
    read = state.plan_weights(str(model), state_now, servers)
    assert read["unreadable"] == "" and read["files"] == 1 and read["version"].startswith("sha256:")
    # Readable weights, and a host without servers, add no check error (not even an empty one).
    assert state.unreadable_weights(read) == [] and state.unreadable_weights(None) == []
