"""module_utils/sglang_reservation.py: the fleet's step reservations on the reservation host. A compare-and-set under
an exclusive flock (two runs that read the same version: exactly one reserves), each host given back on its own, a
lease that ends a killed run's hold, and a file that cannot be read never taken for "no reservation"."""

from __future__ import annotations

import json
import os
import threading

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_reservation as res


@pytest.fixture
def path(tmp_path):
    os.chmod(tmp_path, 0o700)
    return str(tmp_path / "reservations.json")


def test_no_file_is_version_zero_with_no_entries_and_a_read_writes_nothing(path, tmp_path):
    assert res.read(path, now=100.0) == {"version": 0, "entries": [], "now": 100.0}
    assert list(tmp_path.iterdir()) == []


def test_a_run_reserves_only_on_the_version_its_choice_read(path):
    done = res.reserve(path, "run-a", "ops@ctl", 1, ["h1"], 0, 600, now=100.0)
    assert done["reserved"] and done["version"] == 1
    assert [(e["run"], e["hosts"], e["left"]) for e in done["entries"]] == [("run-a", ["h1"], 600)]
    # Another run that chose on version 0 never writes: it reads, counts and chooses again.
    stale = res.reserve(path, "run-b", "ops@ctl2", 1, ["h3"], 0, 600, now=101.0)
    assert not stale["reserved"] and stale["version"] == 1
    assert [e["run"] for e in res.read(path, now=102.0)["entries"]] == ["run-a"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_two_runs_that_read_the_same_version_at_once_never_both_reserve(path):
    barrier, results = threading.Barrier(8), []

    def one(number: int) -> None:
        barrier.wait()
        results.append(res.reserve(path, f"run-{number}", "", 1, [f"h{number}"], 0, 600)["reserved"])

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]
    assert len(res.read(path)["entries"]) == 1


def test_each_host_gives_its_place_back_and_an_empty_entry_goes(path):
    res.reserve(path, "run-a", "", 2, ["h1", "h2"], 0, 600, now=100.0)
    res.reserve(path, "run-b", "", 1, ["h3"], 1, 600, now=100.0)
    one = res.release(path, "run-a", ["h1"], now=110.0)
    assert one["released"] == ["h1"] and one["version"] == 3
    assert {e["run"]: e["hosts"] for e in one["entries"]} == {"run-a": ["h2"], "run-b": ["h3"]}
    two = res.release(path, "run-a", ["h2"], now=111.0)
    assert [e["run"] for e in two["entries"]] == ["run-b"]
    # Giving back what a run does not hold changes nothing (no new version).
    assert res.release(path, "run-a", ["h2"], now=112.0)["version"] == two["version"]
    # Every host of a run at once (an operator clearing a dead run's hold).
    assert res.release(path, "run-b", None, now=113.0)["entries"] == []


def test_a_killed_runs_hold_ends_with_its_lease(path):
    res.reserve(path, "run-dead", "", 1, ["h1"], 0, 60, now=100.0)
    assert [e["run"] for e in res.read(path, now=159.0)["entries"]] == ["run-dead"]
    assert res.read(path, now=160.0)["entries"] == []
    # The next reservation drops it from the file.
    res.reserve(path, "run-b", "", 1, ["h2"], 1, 60, now=161.0)
    assert [e["run"] for e in json.loads(open(path).read())["entries"]] == ["run-b"]


def test_other_runs_hosts_are_out_with_who_holds_them_and_for_how_long(path):
    res.reserve(path, "run-a", "ops@ctl", 3, ["h1", "h2"], 0, 600, now=100.0)
    res.reserve(path, "run-b", "me@here", 1, ["h3"], 1, 600, now=100.0)
    entries = res.read(path, now=130.0)["entries"]
    out = res.reserved_by_others(entries, "run-b")
    assert sorted(out) == ["h1", "h2"]
    assert out["h1"] == "reserved by run run-a (ops@ctl) for its step 3, its lease ends in 570 s"
    assert res.reserved_by_others(entries, "run-c").keys() == {"h1", "h2", "h3"}


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("not json", "is not JSON"),
        ('{"entries": []}', "version None is not a count"),
        ('{"version": 1, "entries": [{"run": "a"}]}', "entry field 'owner' is missing"),
        (
            '{"version": 1, "entries": [{"run": "a", "owner": "", "step": 1, "hosts": [1], "taken": 1, "until": 2}]}',
            "are not host names",
        ),
        ("[]", "not a mapping with a list of entries"),
    ],
)
def test_a_file_that_cannot_be_read_fails_naming_it_never_no_reservation(path, content, why):
    with open(path, "w") as handle:
        handle.write(content)
    for call in (lambda: res.read(path), lambda: res.reserve(path, "r", "", 1, ["h"], 1, 60)):
        with pytest.raises(res.ReservationError, match=why) as error:
            call()
        assert path in str(error.value)


def test_never_through_a_link_or_in_a_folder_others_may_write(path, tmp_path):
    os.symlink("/etc/hostname", path)
    with pytest.raises(res.ReservationError, match="symbolic link"):
        res.read(path)
    os.unlink(path)
    os.chmod(tmp_path, 0o777)  # noqa: S103 - the folder others may write, on purpose
    with pytest.raises(res.ReservationError, match="writable by group or others"):
        res.reserve(path, "r", "", 1, ["h"], 0, 60)
    assert not os.path.exists(path)
    with pytest.raises(res.ReservationError, match="not a normalized absolute path"):
        res.read("relative/reservations.json")


def test_a_dead_runs_entries_go_with_the_next_reservation_and_hold_nothing(path):
    res.reserve(path, "run-dead", "x", 1, ["h1"], 0, 600, now=100.0)
    entries = res.read(path, now=101.0)["entries"]
    assert res.reserved_by_others(entries, "run-b", ["run-dead"]) == {}
    res.reserve(path, "run-b", "", 1, ["h2"], 1, 600, now=102.0, dead_runs=["run-dead"])
    assert [e["run"] for e in res.read(path, now=103.0)["entries"]] == ["run-b"]
