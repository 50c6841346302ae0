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


def test_a_digest_follows_a_link_only_to_what_its_owner_could_read(tmp_path):
    """The Hub's cache: model files are links into its blobs, followed. A link planted by another account to a
    0600 file of root's yields no digest of that file's content."""
    import hashlib

    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import file_digest

    blob = tmp_path / "blob"
    blob.write_text('{"model_type": "deepseek_v4"}')
    os.chmod(blob, 0o644)
    (tmp_path / "config.json").symlink_to(blob)
    assert file_digest(str(tmp_path / "config.json")) == hashlib.sha256(blob.read_bytes()).hexdigest()
    secret = tmp_path / "shadow"
    secret.write_text("root's own secret")
    os.chmod(secret, 0o600)
    planted = tmp_path / "tokenizer.json"
    planted.symlink_to(secret)
    os.lchown(planted, 65534, 65534)
    digest = file_digest(str(planted))
    assert digest.startswith("unreadable:link-to-a-file-its-owner-cannot-read")
    assert hashlib.sha256(secret.read_bytes()).hexdigest() not in digest


def test_a_file_that_never_ends_gets_a_bounded_digest(tmp_path):
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import file_digest

    big = tmp_path / "tokenizer.json"
    big.write_bytes(b"x" * 5000)
    assert file_digest(str(big), limit=4096) == "too-large:over-4096-bytes"
    assert file_digest("/dev/zero").startswith("not-a-file:")
