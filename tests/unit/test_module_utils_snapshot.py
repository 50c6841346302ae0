"""The snapshot (plugins/module_utils/sglang_snapshot.py): byte for byte back, never through a link."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_snapshot as snapshot


@pytest.fixture
def files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    config = model / "generation_config.json"
    config.write_text('{"temperature": 0.6}\n')
    os.chmod(config, 0o640)
    return config, model / "absent.json", tmp_path / "snap" / "run-1"


def test_restore_puts_every_file_back_byte_for_byte_and_removes_new_ones(files):
    config, absent, snap = files
    assert snapshot.save(snap, [str(config), str(absent)]) == {"saved": [str(config)], "missing": [str(absent)]}
    config.write_text('{"temperature": 0.7}\n')
    os.chmod(config, 0o644)
    absent.write_text("new")
    assert snapshot.restore(snap) == {"restored": [str(config)], "removed": [str(absent)]}
    assert config.read_text() == '{"temperature": 0.6}\n' and oct(config.stat().st_mode & 0o777) == "0o640"
    assert not absent.exists()
    assert snapshot.restore(snap) == {"restored": [], "removed": []}
    assert json.loads((snap / "manifest.json").read_text())["sha256"][str(config)]


def test_a_link_planted_at_a_managed_path_is_replaced_not_written_through(files, tmp_path):
    config, _absent, snap = files
    snapshot.save(snap, [str(config)])
    victim = tmp_path / "victim"
    victim.write_text("root must not write here")
    config.unlink()
    config.symlink_to(victim)
    snapshot.restore(snap)
    assert victim.read_text() == "root must not write here"
    assert not config.is_symlink() and config.read_text() == '{"temperature": 0.6}\n'


def test_the_old_fixed_temporary_name_is_no_trap(files, tmp_path):
    config, _absent, snap = files
    snapshot.save(snap, [str(config)])
    config.write_text("{}")
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (config.parent / ".generation_config.json.rollback").symlink_to(victim)
    snapshot.restore(snap)
    assert victim.read_text() == "untouched" and config.read_text() == '{"temperature": 0.6}\n'


def test_save_refuses_a_link_or_a_fifo(files, tmp_path):
    config, _absent, snap = files
    config.unlink()
    config.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(snapshot.SnapshotError, match="symbolic link"):
        snapshot.save(snap, [str(config)])
    config.unlink()
    os.mkfifo(config)
    with pytest.raises(snapshot.SnapshotError, match="not a regular file"):
        snapshot.save(snap, [str(config)])


def test_a_chown_since_the_snapshot_is_undone(files):
    config, _absent, snap = files
    os.chown(config, 0, 0)
    snapshot.save(snap, [str(config)])
    os.chown(config, 65534, 65534)  # the bytes and the mode unchanged: only the owner and group differ
    assert snapshot.restore(snap) == {"restored": [str(config)], "removed": []}
    assert (config.stat().st_uid, config.stat().st_gid) == (0, 0)
    assert snapshot.restore(snap) == {"restored": [], "removed": []}
