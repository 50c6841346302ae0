"""The rollout lock as a lease (module_utils/sglang_lock.py): taken once, read safely, broken only by name."""

from __future__ import annotations

import json
import os
import time

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock as lock


@pytest.fixture
def path(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o755)
    return str(folder / "sglang-dsv4-deploy")


def test_one_run_takes_the_lock_and_another_is_told_who_holds_it(path):
    assert lock.acquire(path, "run-a", "alice@ctl", 600) == (True, None, "")
    taken, holder, why = lock.acquire(path, "run-b", "bob@ctl", 600)
    assert not taken
    assert holder["run_id"] == "run-a" and holder["owner"] == "alice@ctl" and not holder["expired"]
    assert "held by alice@ctl (run run-a)" in why
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"


def test_the_holder_renews_and_releases_and_nobody_else_can(path):
    lock.acquire(path, "run-a", "alice@ctl", 600)
    assert lock.renew(path, "run-a", 600) is None
    assert lock.renew(path, "run-b", 600)["run_id"] == "run-a"
    assert lock.release(path, "run-b") is False and os.path.isdir(path)
    assert lock.release(path, "run-a") is True and not os.path.exists(path)


def test_a_killed_run_leaves_an_expired_lease_that_is_reported_not_taken(path):
    lock.acquire(path, "run-dead", "carol@ctl", 1)
    holder = lock.inspect(path, now=time.time() + 5)
    assert holder["expired"] and "EXPIRED" in lock.describe(holder)
    taken, _holder, _why = lock.acquire(path, "run-new", "dave@ctl", 600)
    assert not taken


def test_a_plain_break_clears_an_expired_lease_but_never_a_live_one(path):
    lock.acquire(path, "20260101T000000Z-1", "carol@ctl", 600)
    taken, _holder, why = lock.acquire(path, "run-new", "dave@ctl", 600, break_lock="true")
    assert (
        not taken
        and "a live lease is broken only by naming its run: sglang_rollout_break_lock=20260101T000000Z-1" in why
    )
    taken, _holder, why = lock.acquire(path, "run-new", "dave@ctl", 600, break_lock="20991231T000000Z-9")
    assert not taken and "does not name that run" in why
    assert lock.acquire(path, "run-new", "dave@ctl", 600, break_lock="20260101T000000Z-1") == (True, None, "")
    # The evicted run's next fencing check fails: it no longer holds the lock.
    assert lock.renew(path, "20260101T000000Z-1", 600)["run_id"] == "run-new"


def test_a_plain_break_clears_an_expired_lock(path):
    lock.acquire(path, "run-dead", "carol@ctl", 600)
    owner = json.loads(open(os.path.join(path, "owner.json")).read())
    owner["lease_until"] = time.time() - 1
    with open(os.path.join(path, "owner.json"), "w") as handle:
        json.dump(owner, handle)
    assert lock.acquire(path, "run-new", "dave@ctl", 600, break_lock="true") == (True, None, "")


@pytest.mark.parametrize(
    "plant, reason",
    [
        (lambda p: os.mkfifo(os.path.join(p, "owner.json")), "owner.json is not a small regular file"),
        (lambda p: os.symlink("/etc/shadow", os.path.join(p, "owner.json")), "owner.json"),
        (lambda p: open(os.path.join(p, "owner.json"), "w").write('{"run_id": "x", "taken": "soon"}'), "lacks run_id"),
        (lambda p: open(os.path.join(p, "owner.json"), "w").write("not json"), "is not JSON"),
        (lambda p: open(os.path.join(p, "owner.json"), "w").write(" " * 5000), "not a small regular file"),
        (lambda p: None, "no owner file"),
    ],
)
def test_an_unreadable_lock_is_reported_with_holder_unknown_never_a_hang_or_traceback(path, plant, reason):
    os.mkdir(path, 0o700)
    plant(path)
    holder = lock.inspect(path)
    assert holder["unreadable"] and holder["run_id"] is None
    assert reason in holder["owner"] and "holder unknown" in lock.describe(holder)
    taken, _holder, _why = lock.acquire(path, "run-new", "dave@ctl", 600)
    assert not taken
    # Unreadable: no lease can be proven live, so a plain break clears it.
    assert lock.acquire(path, "run-new", "dave@ctl", 600, break_lock="true") == (True, None, "")


def test_a_link_or_a_file_at_the_lock_path_is_unreadable_and_never_followed(path, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, path)
    holder = lock.inspect(path)
    assert holder["unreadable"] and "is not a folder" in holder["owner"]
    assert lock.acquire(path, "run-new", "dave@ctl", 600, break_lock="true") == (True, None, "")
    assert target.is_dir() and not os.path.islink(path)


def test_a_lock_in_a_folder_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # noqa: S103 - the world-writable folder under test
    taken, holder, why = lock.acquire(str(shared / "lock"), "run-a", "alice@ctl", 600)
    assert not taken and holder is None and "is not a folder only root can write" in why


def _break_expired(path: str, run_id: str, start, results) -> None:
    start.wait()
    results.put((run_id, lock.acquire(path, run_id, f"{run_id}@ctl", 600, "true")[0]))


def test_two_runs_breaking_the_same_expired_lock_at_once_exactly_one_wins(path):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for _attempt in range(5):
        lock.acquire(path, "run-dead", "carol@ctl", -1)
        assert lock.inspect(path)["expired"]
        start, results = context.Event(), context.Queue()
        breakers = [context.Process(target=_break_expired, args=(path, f"run-{i}", start, results)) for i in range(4)]
        for process in breakers:
            process.start()
        start.set()
        for process in breakers:
            process.join(30)
        won = sorted(run_id for run_id, taken in (results.get(timeout=5) for _breaker in breakers) if taken)
        assert len(won) == 1, won
        assert lock.inspect(path)["run_id"] == won[0]
        assert lock.release(path, won[0])
