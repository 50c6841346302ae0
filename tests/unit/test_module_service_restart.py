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
    """A module on a host whose router has a start job still running (queued by an earlier call) for the first
    `busy` looks at the units together."""

    def __init__(self, busy: int) -> None:
        self.params = {"fence": None}
        self.check_mode = False
        self.busy = busy
        self.looks = 0
        self.looks_before_restart: int | None = None
        self.commands: list[list[str]] = []

    def run_command(self, argv, check_rc=False):
        self.commands.append(list(argv))
        if argv[1] == "restart":
            self.looks_before_restart = self.looks if self.looks_before_restart is None else self.looks_before_restart
        if argv[:2] != ["systemctl", "show"]:
            return 0, "", ""
        units = [a for a in argv[2:] if not a.startswith("--")]
        out = "\n\n".join(self.show(name) for name in units)
        self.looks += len(units) > 1
        return 0, out, ""

    def show(self, name: str) -> str:
        job = "300" if name == "sglang-dsv4-router" and self.looks < self.busy else ""
        state = "ActiveState=activating\nSubState=start-post" if job else "ActiveState=active\nSubState=running"
        return f"LoadState=loaded\n{state}\nInactiveExitTimestampMonotonic=1\nJob={job}\n"

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


def test_no_restart_is_queued_while_a_job_queued_earlier_still_runs_on_a_unit_it_restarts(monkeypatch):
    """A rollback right after a call that queued the router's restart: systemd would merge the new restart into the
    running one and re-run it, killing that start (a moment of "failed" the wait would take for this call's own)."""
    monkeypatch.setattr(restart.sglang_ready, "POLL", 0)
    host = Host(busy=3)
    result = restart.restart(host, PARAMS)
    queued = [c for c in host.commands if c[1] == "restart"]
    assert queued == [
        ["systemctl", "restart", "--no-block", "sglang-dsv4-prefill", "sglang-dsv4-decode"],
        ["systemctl", "restart", "--no-block", "sglang-dsv4-router"],
    ]
    # Three looks at the units saw the router's job; the fourth saw none, and only then was anything restarted.
    assert host.looks_before_restart == 4
    assert result["changed"] is True


def test_a_job_queued_earlier_that_does_not_end_fails_the_restart_naming_the_unit_and_restarts_nothing(monkeypatch):
    monkeypatch.setattr(restart.sglang_ready, "POLL", 0.05)
    host = Host(busy=10**6)
    with pytest.raises(FailedError) as failed:
        restart.restart(host, {**PARAMS, "timeout": 0})
    said = failed.value.args[0]
    assert said["msg"] == (
        "a systemd job queued earlier did not end within the start timeout of 0 s; nothing restarted: "
        "sglang-dsv4-router has job 300 (activating/start-post)"
    )
    assert not [c for c in host.commands if c[1] in ("restart", "reset-failed", "start")]
