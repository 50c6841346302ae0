"""The rollout lock as a lease (module_utils/sglang_lock.py)."""

from __future__ import annotations

import time

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock as lock


def test_one_run_takes_the_lock_and_another_is_told_who_holds_it(tmp_path):
    path = str(tmp_path / "lock")
    assert lock.acquire(path, "run-a", "alice@ctl", 600) == (True, None)
    taken, holder = lock.acquire(path, "run-b", "bob@ctl", 600)
    assert not taken
    assert holder["run_id"] == "run-a" and holder["owner"] == "alice@ctl" and not holder["expired"]
    assert "held by alice@ctl (run run-a)" in lock.describe(holder)


def test_the_holder_renews_and_releases_and_nobody_else_can(tmp_path):
    path = str(tmp_path / "lock")
    lock.acquire(path, "run-a", "alice", 60)
    assert lock.renew(path, "run-b", 600)["run_id"] == "run-a"
    assert not lock.release(path, "run-b")
    assert lock.renew(path, "run-a", 600) is None
    assert lock.inspect(path)["run_id"] == "run-a"
    assert lock.release(path, "run-a")
    assert lock.inspect(path) is None


def test_a_killed_run_leaves_an_expired_lease_that_is_reported_not_taken(tmp_path):
    path = str(tmp_path / "lock")
    lock.acquire(path, "run-dead", "carol", 1)
    holder = lock.inspect(path, now=time.time() + 5)
    assert holder["expired"] and "EXPIRED" in lock.describe(holder)
    taken, _unused = lock.acquire(path, "run-new", "dave", 600)
    assert not taken


def test_force_breaks_a_lock(tmp_path):
    path = str(tmp_path / "lock")
    lock.acquire(path, "run-dead", "carol", 1)
    assert lock.acquire(path, "run-new", "dave", 600, force=True) == (True, None)
    assert lock.inspect(path)["run_id"] == "run-new"
