"""Merging sampling defaults into generation_config.json, and healing it (module_utils/sglang_sampling_defaults.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_files as files
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_sampling_defaults as sd

ROOT = Path(__file__).resolve().parents[2]

PLANTED = (ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text()

PROJECT = {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None}


def test_merge_sets_only_the_managed_keys_and_keeps_the_rest_in_order():
    original = json.loads(PLANTED)
    merged = sd.merge(original, PROJECT)
    assert list(merged)[: len(original)] == list(original)
    assert {k: v for k, v in merged.items() if k not in ("temperature", "top_p", "do_sample")} == {
        k: v for k, v in original.items() if k != "do_sample"
    }
    assert (merged["temperature"], merged["top_p"], merged["do_sample"]) == (0.6, 0.95, True)
    assert "top_k" not in merged


def test_render_is_stable():
    once = sd.render(sd.merge(json.loads(PLANTED), PROJECT))
    twice = sd.render(sd.merge(json.loads(once), PROJECT))
    assert once == twice and once.endswith("}\n")


def test_greedy_sets_do_sample_false():
    assert sd.merge({}, {"temperature": 0})["do_sample"] is False


@pytest.mark.parametrize(
    "sampling,needle",
    [
        ({"temperature": 2.5}, "temperature=2.5 must be between 0 and 2"),
        ({"temperature": -0.1}, "temperature=-0.1 must be between 0 and 2"),
        ({"temperature": "0.6"}, "temperature='0.6' must be a number"),
        ({"temperature": True}, "temperature=True must be a number"),
        ({"top_p": 0}, "top_p=0 must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p=1.5 must be in (0, 1]"),
        ({"top_k": 0}, "top_k=0 must be an integer, -1 or at least 1"),
        ({"top_k": 2.5}, "top_k=2.5 must be an integer"),
        ({"min_p": 1.5}, "min_p=1.5 must be in [0, 1]"),
        ({"repetition_penalty": 0}, "repetition_penalty=0 must be above 0"),
        ({"temperature": 0}, "temperature=0 means greedy decoding"),
        ({"temperature": 1e-300}, "temperature=1e-300 means greedy decoding"),
        ({"temperature": 9.99e-07}, "temperature=9.99e-07 means greedy decoding"),
        ({"repetition_penalty": float("inf")}, "repetition_penalty=inf must be a finite number"),
        ({"top_p": float("nan")}, "top_p=nan must be a finite number"),
        ({"min_p": float("-inf")}, "min_p=-inf must be a finite number"),
        ({"typical_p": 0.9}, "typical_p is not a sampling default SGLang reads"),
    ],
)
def test_validate_names_key_and_value(sampling, needle):
    errors = sd.validate(sampling)
    assert any(needle in e for e in errors), errors


def test_validate_accepts_the_project_defaults_and_allowed_greedy():
    assert sd.validate(PROJECT) == []
    assert sd.validate({"temperature": 0}, allow_greedy=True) == []
    # The smallest temperature SGLang samples with (srt/sampling/sampling_params.py, _SAMPLING_EPS).
    assert sd.validate({"temperature": 1e-6}) == []


def test_heal_restores_drifted_file_and_keeps_owner_and_mode(tmp_path):
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    target = tmp_path / "generation_config.json"
    target.write_text(PLANTED)
    os.chmod(target, 0o640)
    assert sd.heal(str(managed), str(target)) is True
    assert json.loads(target.read_text())["temperature"] == 0.6
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert sd.heal(str(managed), str(target)) is False


def test_heal_creates_a_missing_file(tmp_path):
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    target = tmp_path / "generation_config.json"
    assert sd.heal(str(managed), str(target)) is True
    assert json.loads(target.read_text()) == {"temperature": 0.6, "top_p": 0.95, "do_sample": True}


def test_a_link_at_generation_config_is_refused_by_load_and_heal(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text('{"temperature": 1}')
    target = tmp_path / "generation_config.json"
    target.symlink_to(secret)
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    with pytest.raises(files.UnsafeFileError, match="is a symbolic link"):
        files.load(str(target))
    with pytest.raises(files.UnsafeFileError):
        sd.heal(str(managed), str(target))
    assert secret.read_text() == '{"temperature": 1}'
