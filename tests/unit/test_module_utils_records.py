"""What each start is made of: the inputs' digests and the start record (module_utils/sglang_records.py)."""

from __future__ import annotations

import os
import re

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_records as records


def test_a_drop_in_folder_is_an_input_by_name_and_content(tmp_path):
    folder = tmp_path / "x.service.d"
    spec = str(folder) + "/"
    assert records.input_digest(spec) is None
    folder.mkdir()
    assert records.input_digest(spec) is None
    (folder / "notes.txt").write_text("ignored")
    assert records.input_digest(spec) is None
    (folder / "override.conf").write_text("[Service]\nEnvironment=A=1\n")
    first = records.input_digest(spec)
    (folder / "override.conf").write_text("[Service]\nEnvironment=A=2\n")
    assert first is not None and records.input_digest(spec) != first


def test_the_runtime_input_follows_installed_distribution_names_and_versions(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang_router-0.3.1.dist-info").mkdir(parents=True)
    spec = f"distributions:{tmp_path / 'venv'}"
    before = records.input_digest(spec)
    assert records.distributions(str(tmp_path / "venv")) == {"sglang_router": "0.3.1"}
    (site / "sglang_router-0.3.1.dist-info").rename(site / "sglang_router-0.3.2.dist-info")
    assert records.input_digest(spec) != before
    (site / "some_module.py").write_text("")  # not a distribution: no change
    after = records.input_digest(spec)
    assert records.input_digest(spec) == after


def test_record_keeps_the_runtime_it_started_from(tmp_path, monkeypatch):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang-0.5.23.dist-info").mkdir(parents=True)
    monkeypatch.setenv("INVOCATION_ID", "inv-9")
    entry = records.record(str(tmp_path / "run/x.json"), [f"distributions:{tmp_path / 'venv'}"])
    assert entry["runtime"] == {str(tmp_path / "venv"): {"sglang": "0.5.23"}}


def test_the_weights_input_follows_the_weight_files_names_sizes_and_times_and_nothing_else(tmp_path):
    spec = f"weights:{tmp_path}"
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"a" * 8)
    one = records.input_digest(spec)
    # generation_config.json and the other small files are inputs of their own: a sampling change is no new weights.
    (tmp_path / "generation_config.json").write_text("{}")
    (tmp_path / "config.json").write_text("{}")
    assert records.input_digest(spec) == one
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    two = records.input_digest(spec)
    assert two != one
    shard = tmp_path / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"b" * 9)  # new weights: another size
    assert records.input_digest(spec) != two
    stat = shard.stat()
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # the same size, written again
    assert records.input_digest(spec) not in (two, None)
    # A Hugging Face cache links each file to its blob: the target is what counts.
    (tmp_path / "blob").write_bytes(b"c")
    (tmp_path / "model-00002-of-00002.safetensors").symlink_to(tmp_path / "blob")
    assert [name for name, _size, _mtime in records.weights_manifest(str(tmp_path))] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]


def test_weights_that_cannot_be_read_whole_have_no_version_never_the_empty_manifests(tmp_path, monkeypatch):
    """A share not mounted yet (no weight file), a directory that cannot be listed (a stale handle, root squash) and
    a weight file that cannot be stat'ed (a dangling link) are unknown weights: UnreadableWeightsError, naming the path
    and why, from every reader (the plan's, the verification's, a start's record); never the version of an empty
    manifest, which used to be recorded as --weight-version and compared as if known."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    empty = re.escape(f"the model directory {model} holds no weight file")
    for reader in (records.weights_manifest, records.weights_digest, records.weights_now):
        with pytest.raises(records.UnreadableWeightsError, match=empty):
            reader(str(model))
    with pytest.raises(records.UnreadableWeightsError, match="cannot be listed: No such file or directory"):
        records.input_digest(f"weights:{tmp_path / 'not-mounted'}")
    (model / "model.safetensors").symlink_to(tmp_path / "blob-gone")
    with pytest.raises(records.UnreadableWeightsError, match=r"the weight file .*model\.safetensors cannot be read"):
        records.weights_now(str(model))

    def refused(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(records.os, "listdir", refused)
    with pytest.raises(records.UnreadableWeightsError, match="cannot be listed: Permission denied"):
        records.weights_manifest(str(model))
    monkeypatch.undo()
    # A start refuses to record (and so to start) on weights it cannot read; what runs is not said to run from disk.
    monkeypatch.setenv("INVOCATION_ID", "inv-2")
    with pytest.raises(records.UnreadableWeightsError):
        records.record(str(tmp_path / "run/sglang-dsv4-decode.json"), [f"weights:{model}"])
    assert not (tmp_path / "run/sglang-dsv4-decode.weights.env").exists()
    (tmp_path / "blob-gone").write_bytes(b"w")
    records.record(str(tmp_path / "run/sglang-dsv4-decode.json"), [f"weights:{model}"])
    assert records.runs_from_disk(str(tmp_path / "run/sglang-dsv4-decode.json"), "inv-2")
    (tmp_path / "blob-gone").unlink()
    assert not records.runs_from_disk(str(tmp_path / "run/sglang-dsv4-decode.json"), "inv-2")


def test_a_start_records_its_weight_version_and_hands_it_to_systemd_beside_its_record(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w")
    monkeypatch.setenv("INVOCATION_ID", "inv-1")
    record_path = tmp_path / "run/sglang-dsv4-prefill.json"
    entry = records.record(str(record_path), [f"weights:{model}"])
    version = records.weight_version(records.weights_digest(str(model)))
    assert version.startswith("sha256:") and len(version) == len("sha256:") + 16
    assert entry["weights"] == {str(model): version}
    env = tmp_path / "run/sglang-dsv4-prefill.weights.env"
    assert env.read_text() == f"SGLANG_DSV4_WEIGHT_VERSION={version}\n"
    assert env.stat().st_mode & 0o777 == 0o600
    # A service without weights (the router) gets no such file.
    records.record(str(tmp_path / "run/sglang-dsv4-router.json"), [])
    assert not (tmp_path / "run/sglang-dsv4-router.weights.env").exists()


def test_the_helper_set_and_the_flag_table_name_the_same_variable():
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_flags

    assert records.WEIGHT_ENV == sglang_flags.WEIGHT_ENV


def test_weights_now_is_the_manifests_version_and_file_count_from_one_read(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"w")
    (tmp_path / "nested.bin").mkdir()  # a folder is no weight file
    assert records.weights_now(str(tmp_path)) == {
        "version": records.weight_version(records.weights_digest(str(tmp_path))),
        "files": 1,
    }
