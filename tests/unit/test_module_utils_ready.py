"""The one wait for the services (module_utils/sglang_ready.py), of the restart and of the verification: ready means
active, running and the URL answering 200; a unit restarted by this call counts only once its new start began; a
failed start fails at once, naming the unit and quoting its journal with keys masked; a wait is bounded."""

from __future__ import annotations

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_ready as ready

KEY = "sk-lab-0123456789abcdef0123"


class Host:
    """systemctl show and journalctl of a host whose units go through the given states, one per look."""

    def __init__(self, states: dict[str, list[dict]], journal: str = "") -> None:
        self.states = states
        self.journal = journal
        self.looks: dict[str, int] = {}
        self.shows = 0

    def __call__(self, argv: list, **_kwargs) -> tuple[int, str, str]:
        if argv[0] == "journalctl":
            return 0, self.journal, ""
        self.shows += 1
        return 0, "\n".join(self.show(name) for name in argv[2:] if not name.startswith("--")), ""

    def show(self, name: str) -> str:
        unit_id = name if name.endswith(".service") else f"{name}.service"
        if name not in self.states:
            return f"Id={unit_id}\nLoadState=not-found\nActiveState=inactive\n"
        seen = self.looks.get(name, 0)
        self.looks[name] = seen + 1
        state = self.states[name][min(seen, len(self.states[name]) - 1)]
        return "".join(f"{k}={v}\n" for k, v in {"Id": unit_id, "LoadState": "loaded", **state}.items())


RUNNING = {"ActiveState": "active", "SubState": "running", "InactiveExitTimestampMonotonic": "500"}
UNIT = {"name": "sglang-dsv4-prefill", "health_url": "http://127.0.0.1:1/health"}


def test_a_unit_is_ready_once_active_running_and_its_url_answers_200(monkeypatch):
    answers = iter([503, 200])
    monkeypatch.setattr(ready, "call", lambda url, timeout: (next(answers), "", b""))
    monkeypatch.setattr(ready, "POLL", 0)
    host = Host({"sglang-dsv4-prefill": [{"ActiveState": "activating", "SubState": "start"}, RUNNING]})
    result = ready.wait_ready(host, [UNIT, {"name": "not-installed", "health_url": "x"}], 60, 0, [])
    assert result["failure"] is None
    assert result["units"] == {
        "sglang-dsv4-prefill": {"url": UNIT["health_url"], "active": "active", "sub": "running", "status": 200}
    }
    assert host.looks["sglang-dsv4-prefill"] == 3


class Reversed(Host):
    """A systemctl that prints the units' blocks in another order than asked."""

    def __call__(self, argv: list, **kwargs) -> tuple[int, str, str]:
        if argv[0] == "journalctl":
            return super().__call__(argv, **kwargs)
        units = [name for name in argv[2:] if not name.startswith("--")]
        return super().__call__([*argv[:2], *reversed(units)], **kwargs)


def test_each_units_properties_are_its_own_whatever_order_systemctl_prints_them_in():
    host = Reversed(
        {
            "sglang-dsv4-decode": [{"ActiveState": "failed", "SubState": "failed"}],
            "sglang-dsv4-prefill": [RUNNING],
        }
    )
    looked = ready.units_props(host, ["sglang-dsv4-decode", "sglang-dsv4-prefill"])
    assert looked["sglang-dsv4-decode"]["ActiveState"] == "failed"
    assert looked["sglang-dsv4-prefill"]["ActiveState"] == "active"
    # Both in the one `systemctl show`.
    assert host.shows == 1


def test_a_unit_systemctl_printed_no_block_for_is_asked_alone():
    class Short(Host):
        def __call__(self, argv: list, **kwargs) -> tuple[int, str, str]:
            units = [name for name in argv[2:] if not name.startswith("--")]
            return super().__call__([*argv[:2], *units[:1]], **kwargs)

    host = Short({"sglang-dsv4-decode": [RUNNING], "sglang-dsv4-prefill": [RUNNING]})
    looked = ready.units_props(host, ["sglang-dsv4-decode", "sglang-dsv4-prefill"])
    assert looked["sglang-dsv4-prefill"]["ActiveState"] == "active" and host.shows == 2


def test_a_unit_this_call_restarted_counts_only_after_its_new_start_began(monkeypatch):
    monkeypatch.setattr(ready, "call", lambda url, timeout: (200, "", b""))
    monkeypatch.setattr(ready, "POLL", 0)
    # The old process still runs (left inactive at 500 us, before the restart was issued at 1000 us).
    host = Host({"sglang-dsv4-prefill": [RUNNING, RUNNING, {**RUNNING, "InactiveExitTimestampMonotonic": "2000"}]})
    result = ready.wait_ready(host, [UNIT], 60, 0, [], frozenset({"sglang-dsv4-prefill"}), 1000)
    assert result["failure"] is None
    # One look to see that it is installed, one at the old process (skipped), one at the new start.
    assert host.looks["sglang-dsv4-prefill"] == 3
    # Not restarted by this call: the running process counts at once.
    host = Host({"sglang-dsv4-prefill": [RUNNING]})
    assert ready.wait_ready(host, [UNIT], 60, 0, [])["failure"] is None
    assert host.looks["sglang-dsv4-prefill"] == 2


def test_a_failed_start_fails_at_once_naming_the_unit_with_its_journal_masked(monkeypatch):
    monkeypatch.setattr(ready, "call", lambda url, timeout: (200, "", b""))
    host = Host(
        {"sglang-dsv4-prefill": [{"ActiveState": "activating", "SubState": "auto-restart"}]},
        journal=f"error: bad --api-key {KEY}\n",
    )
    monkeypatch.setattr(ready, "secrets_of", lambda paths: [KEY] if paths == ["/etc/key"] else [])
    result = ready.wait_ready(host, [UNIT], 600, 15, ["/etc/key"])
    assert result["failure"].startswith("sglang-dsv4-prefill did not start: it is activating (auto-restart)")
    assert "error: bad --api-key" in result["failure"] and KEY not in result["failure"]


def test_a_unit_that_never_gets_ready_fails_the_wait_when_its_start_timeout_ends(monkeypatch):
    monkeypatch.setattr(ready, "call", lambda url, timeout: (503, "", b""))
    monkeypatch.setattr(ready, "POLL", 0.05)
    host = Host({"sglang-dsv4-prefill": [RUNNING]})
    result = ready.wait_ready(host, [UNIT], 0, 1, [])
    assert result["failure"] == (
        "not ready within the start timeout of 0 s (+1 s): "
        "sglang-dsv4-prefill (active/running, http://127.0.0.1:1/health -> 503)"
    )
    assert 1 <= result["waited"] < 5


def test_units_waited_for_together_are_looked_at_in_one_systemctl_show_per_look(monkeypatch):
    """The restart waits for prefill and decode at once: one `systemctl show` process per look, not one per unit."""
    monkeypatch.setattr(ready, "call", lambda url, timeout: (200, "", b""))
    monkeypatch.setattr(ready, "POLL", 0)
    starting = {"ActiveState": "activating", "SubState": "start"}
    host = Host({"sglang-dsv4-prefill": [starting, starting, RUNNING], "sglang-dsv4-decode": [starting, RUNNING]})
    decode = {"name": "sglang-dsv4-decode", "health_url": "http://127.0.0.1:2/health"}
    result = ready.wait_ready(host, [UNIT, decode], 60, 0, [])
    assert result["failure"] is None and set(result["units"]) == {"sglang-dsv4-prefill", "sglang-dsv4-decode"}
    # `installed` looks at each unit first (two processes); then the first look of the wait asks both units in one
    # process (decode is ready), the second asks prefill alone.
    assert host.looks == {"sglang-dsv4-prefill": 3, "sglang-dsv4-decode": 2}
    assert host.shows == 2 + 2


def test_the_units_a_job_still_runs_on_are_named_with_their_job_in_one_look():
    starting = {"ActiveState": "activating", "SubState": "start-post", "Job": "300"}
    host = Host({"sglang-dsv4-router": [starting], "sglang-dsv4-decode": [{**RUNNING, "Job": ""}]})
    assert ready.busy(host, ["sglang-dsv4-router", "sglang-dsv4-decode"]) == {
        "sglang-dsv4-router": "job 300 (activating/start-post)"
    }
    assert host.shows == 1
    # Nothing to ask of: not one systemctl show (without a unit it would print the manager's properties).
    host = Host({})
    assert ready.busy(host, []) == {} and host.shows == 0


def test_a_systemctl_that_does_not_answer_is_never_read_as_no_job():
    def failing(argv, **_kwargs):
        return 1, "", "Failed to connect to bus: No such file or directory"

    with pytest.raises(ready.CommandError, match=r"rc 1: Failed to connect to bus.*whether an earlier job"):
        ready.busy(failing, ["sglang-dsv4-router"])
    # An answer for fewer units than asked is no answer either.
    with pytest.raises(ready.CommandError, match="did not answer for each unit"):
        ready.busy(lambda argv, **_k: (0, "Id=a.service\nActiveState=active\nJob=\n", ""), ["a", "b"])


def test_the_nudge_sees_each_unit_whose_new_start_has_begun_while_it_is_starting(monkeypatch):
    monkeypatch.setattr(ready, "call", lambda url, timeout: (200, "", b""))
    monkeypatch.setattr(ready, "POLL", 0)
    old = {"ActiveState": "active", "SubState": "running", "InactiveExitTimestampMonotonic": "500"}
    starting = {"ActiveState": "activating", "SubState": "start-post", "InactiveExitTimestampMonotonic": "2000"}
    host = Host(
        {
            "sglang-dsv4-router": [
                old,
                old,
                starting,
                starting,
                {**starting, **RUNNING, "InactiveExitTimestampMonotonic": "2000"},
            ]
        }
    )
    router = {"name": "sglang-dsv4-router", "health_url": "http://127.0.0.1:3/readiness"}
    seen: list[str] = []
    result = ready.wait_ready(host, [router], 60, 0, [], frozenset({"sglang-dsv4-router"}), 1000, seen.append)
    # Not at the old process (before its new start began), twice while it starts, not once it runs.
    assert result["failure"] is None and seen == ["sglang-dsv4-router", "sglang-dsv4-router"]
