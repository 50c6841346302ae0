"""The restart module's cleaning of what a rolled-back first deploy left (module_utils/sglang_restart.py)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_restart as restart

from tests.unit.fake_module import FailedError


def test_enable_links_whose_unit_file_is_gone_are_removed_and_their_empty_wants_folders(tmp_path):
    unit_dir = tmp_path / "system"
    (unit_dir / "multi-user.target.wants").mkdir(parents=True)
    (unit_dir / "sglang-dsv4.target.wants").mkdir()
    # The restore removed the unit files; the links systemctl enable made are left dangling.
    os.symlink(unit_dir / "sglang-dsv4.target", unit_dir / "multi-user.target.wants/sglang-dsv4.target")
    os.symlink(
        unit_dir / "sglang-dsv4-prefill.service", unit_dir / "sglang-dsv4.target.wants/sglang-dsv4-prefill.service"
    )
    # Someone else's unit, and a link of ours whose unit file is still there: both kept.
    (unit_dir / "other.service").write_text("[Unit]\n")
    os.symlink(unit_dir / "other.service", unit_dir / "multi-user.target.wants/other.service")
    (unit_dir / "sglang-dsv4-router.service").write_text("[Unit]\n")
    os.symlink(unit_dir / "sglang-dsv4-router.service", unit_dir / "multi-user.target.wants/sglang-dsv4-router.service")
    removed = restart.unlink_dangling(
        str(unit_dir), ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4.target"]
    )
    assert sorted(removed) == sorted(
        [
            str(unit_dir / "multi-user.target.wants/sglang-dsv4.target"),
            str(unit_dir / "sglang-dsv4.target.wants/sglang-dsv4-prefill.service"),
            str(unit_dir / "sglang-dsv4.target.wants"),
        ]
    )
    assert sorted(os.listdir(unit_dir / "multi-user.target.wants")) == ["other.service", "sglang-dsv4-router.service"]
    assert restart.unlink_dangling(str(unit_dir), ["sglang-dsv4-prefill", "sglang-dsv4.target"]) == []


class Host:
    """A module on a host whose router has a start job still running (queued by an earlier call) until it is stopped,
    or, with `stubborn`, after that too."""

    def __init__(self, stubborn: bool = False) -> None:
        self.params = {"fence": None}
        self.check_mode = False
        self.job = "300"
        self.stubborn = stubborn
        self.commands: list[list[str]] = []

    def run_command(self, argv, check_rc=False):
        self.commands.append(list(argv))
        if argv[:2] == ["systemctl", "stop"] and not self.stubborn:
            self.job = ""
        if argv[:2] != ["systemctl", "show"]:
            return 0, "", ""
        units = [a for a in argv[2:] if not a.startswith("--")]
        return 0, "\n\n".join(self.show(name) for name in units), ""

    def show(self, name: str) -> str:
        job = self.job if name == "sglang-dsv4-router" else ""
        state = "ActiveState=activating\nSubState=start-post" if job else "ActiveState=active\nSubState=running"
        return f"Id={name}.service\nLoadState=loaded\n{state}\nInactiveExitTimestampMonotonic=1\nJob={job}\n"

    def fail_json(self, **result):
        raise FailedError(result)


PARAMS = {
    "daemon_reload": False,
    "enable": [],
    "restart": [["sglang-dsv4-prefill", "sglang-dsv4-decode"], ["sglang-dsv4-router"]],
    "start": [],
    "wait": [],
    "timeout": 60,
    "margin": 0,
    "orphans": [],
    "unit_dir": "/nonexistent",
    "secret_files": [],
}


def systemctl(host: Host, verb: str) -> list[list[str]]:
    return [c for c in host.commands if c[:2] == ["systemctl", verb]]


def test_a_start_an_earlier_call_queued_and_that_still_runs_is_stopped_before_the_restart_is_queued():
    """A rollback right after a call that queued the router's restart: queued onto that running job, systemd would
    merge the new restart into it and re-run it, killing that start while this call waits (a moment of "failed" the
    wait would take for this call's own)."""
    host = Host()
    result = restart.restart(host, PARAMS)
    assert systemctl(host, "stop") == [["systemctl", "stop", "sglang-dsv4-router"]]
    assert systemctl(host, "restart") == [
        ["systemctl", "restart", "--no-block", "sglang-dsv4-prefill", "sglang-dsv4-decode"],
        ["systemctl", "restart", "--no-block", "sglang-dsv4-router"],
    ]
    assert host.commands.index(systemctl(host, "stop")[0]) < host.commands.index(systemctl(host, "reset-failed")[0])
    assert result["interrupted"] == {"sglang-dsv4-router": "job 300 (activating/start-post)"}
    assert result["changed"] is True
    # Without a job running on them, nothing is stopped.
    host = Host()
    host.job = ""
    assert restart.restart(host, PARAMS)["interrupted"] == {} and systemctl(host, "stop") == []


def test_a_job_that_runs_on_after_its_unit_was_stopped_fails_the_restart_naming_the_unit_and_restarts_nothing():
    host = Host(stubborn=True)
    with pytest.raises(FailedError) as failed:
        restart.restart(host, PARAMS)
    assert failed.value.args[0]["msg"] == (
        "a systemd job an earlier call queued still runs after stopping the unit; nothing restarted: "
        "sglang-dsv4-router has job 300 (activating/start-post)"
    )
    assert systemctl(host, "restart") == [] and systemctl(host, "reset-failed") == []
