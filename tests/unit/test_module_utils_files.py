"""Files on a host read and written safely: no link, no FIFO, one rename (module_utils/sglang_files.py)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_files as files


def test_load_refuses_non_objects(tmp_path):
    target = tmp_path / "generation_config.json"
    target.write_text("[1, 2]")
    with pytest.raises(ValueError, match="does not hold a JSON object"):
        files.load(str(target))


def test_a_fifo_at_generation_config_is_refused_without_blocking(tmp_path):
    target = tmp_path / "generation_config.json"
    os.mkfifo(target)
    with pytest.raises(files.UnsafeFileError, match="is not a regular file"):
        files.load(str(target))
    assert files.file_digest(str(target)).startswith("not-a-file:")


def test_write_atomic_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    path = tmp_path / "generation_config.json"
    path.symlink_to(victim)
    files.write_atomic(str(path), "{}\n", like=str(path))
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and path.read_text() == "{}\n"
