"""Merging sampling defaults into generation_config.json (module_utils/sglang_sampling_defaults.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
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
        ({"typical_p": 0.9}, "typical_p is not a sampling default SGLang reads"),
    ],
)
def test_validate_names_key_and_value(sampling, needle):
    errors = sd.validate(sampling)
    assert any(needle in e for e in errors), errors


def test_validate_accepts_the_project_defaults_and_allowed_greedy():
    assert sd.validate(PROJECT) == []
    assert sd.validate({"temperature": 0}, allow_greedy=True) == []


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
    assert sd.main(["heal", str(tmp_path / "status"), str(managed), str(target)]) == 0
    assert json.loads(target.read_text()) == {"temperature": 0.6, "top_p": 0.95, "do_sample": True}


def test_load_refuses_non_objects(tmp_path):
    target = tmp_path / "generation_config.json"
    target.write_text("[1, 2]")
    with pytest.raises(ValueError, match="does not hold a JSON object"):
        sd.load(str(target))


def _metrics(tmp_path, monkeypatch, config, units, journal="", state=None):
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    target = tmp_path / "generation_config.json"
    if config is not None:
        target.write_text(json.dumps(config))
    monkeypatch.setattr(sd, "_unit_state", lambda unit: (state or {}).get(unit, {}))
    monkeypatch.setattr(sd, "_journal", lambda invocation: journal if invocation == "inv-1" else "")
    text = sd.metrics(str(tmp_path / "status"), str(managed), str(target), units, now=100.0)
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
    return values, str(target)


LOGGED = "Using default chat sampling params from model generation config: {'temperature': 0.6, 'top_p': 0.95}"
ACTIVE = {"ActiveState": "active", "InvocationID": "inv-1", "ExecMainStartTimestamp": "@1700000000.5"}


def test_metrics_say_in_sync_and_in_effect_when_file_and_startup_line_hold_the_defaults(tmp_path, monkeypatch):
    config = sd.merge(json.loads(PLANTED), PROJECT)
    units = {"p.service": "prefill", "r.service": "router"}
    values, target = _metrics(tmp_path, monkeypatch, config, units, LOGGED, {"p.service": ACTIVE, "r.service": ACTIVE})
    assert values[f'sglang_dsv4_generation_config_in_sync{{path="{target}"}}'] == 1
    assert values['sglang_dsv4_server_defaults_in_effect{unit="p.service",role="prefill"}'] == 1
    assert values['sglang_dsv4_server_start_time_seconds{unit="p.service",role="prefill"}'] == 1700000000.5
    assert values['sglang_dsv4_managed_sampling_default{key="temperature"}'] == 0.6
    assert values["sglang_dsv4_defaults_check_timestamp_seconds"] == 100.0
    # The router does not read the file: only whether it is up.
    assert 'sglang_dsv4_server_up{unit="r.service",role="router"}' in values
    assert not any("r.service" in key and "in_effect" in key for key in values)


def test_metrics_see_a_hand_edit_by_content_and_a_start_without_the_line(tmp_path, monkeypatch):
    config = {**sd.merge(json.loads(PLANTED), PROJECT), "temperature": 0.0}
    values, target = _metrics(
        tmp_path, monkeypatch, config, {"p.service": "prefill"}, "no such line", {"p.service": ACTIVE}
    )
    assert values[f'sglang_dsv4_generation_config_in_sync{{path="{target}"}}'] == 0
    assert values['sglang_dsv4_generation_config_sampling_value{key="temperature"}'] == 0.0
    assert values['sglang_dsv4_server_defaults_in_effect{unit="p.service",role="prefill"}'] == 0


def test_metrics_formatting_alone_is_not_drift(tmp_path, monkeypatch):
    config = sd.merge(json.loads(PLANTED), PROJECT)
    _unused, target = _metrics(tmp_path, monkeypatch, None, {}, "")
    Path(target).write_text(json.dumps(config, indent=7, sort_keys=True))
    monkeypatch.setattr(sd, "_unit_state", lambda unit: {})
    text = sd.metrics(str(tmp_path / "status"), str(tmp_path / "managed.json"), target, {}, now=1.0)
    assert f'sglang_dsv4_generation_config_in_sync{{path="{target}"}} 1.0' in text


def test_metrics_report_an_inactive_server_and_a_missing_file(tmp_path, monkeypatch):
    values, target = _metrics(tmp_path, monkeypatch, None, {"d.service": "decode"}, LOGGED, {})
    assert values[f'sglang_dsv4_generation_config_in_sync{{path="{target}"}}'] == 0
    assert values['sglang_dsv4_server_up{unit="d.service",role="decode"}'] == 0
    assert values['sglang_dsv4_server_defaults_in_effect{unit="d.service",role="decode"}'] == 0


def test_heal_and_rollout_results_reach_the_metrics(tmp_path, monkeypatch):
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    target = tmp_path / "generation_config.json"
    target.write_text(PLANTED)
    assert sd.main(["heal", str(tmp_path / "status"), str(managed), str(target)]) == 0
    sd.write_status(str(tmp_path / "status"), "rollout.json", {"time": 50.0, "success": False, "run": "r1"})
    values, _unused = _metrics(tmp_path, monkeypatch, json.loads(target.read_text()), {})
    assert values["sglang_dsv4_last_heal_rewrote"] == 1
    assert values["sglang_dsv4_last_rollout_success"] == 0
    assert values["sglang_dsv4_last_rollout_timestamp_seconds"] == 50.0


def test_metrics_command_writes_the_textfile_atomically(tmp_path, monkeypatch):
    monkeypatch.setattr(sd, "_unit_state", lambda unit: {})
    out = tmp_path / "sglang_dsv4.prom"
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    status = str(tmp_path / "status")
    assert (
        sd.main(["metrics", status, str(out), str(managed), str(tmp_path / "missing.json"), "a.service=prefill"]) == 0
    )
    assert "sglang_dsv4_managed_defaults_present 1.0" in out.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert sd.main(["metrics", status, str(out), str(managed)]) == 2


def test_a_link_at_generation_config_is_refused_by_load_and_heal(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text('{"temperature": 1}')
    target = tmp_path / "generation_config.json"
    target.symlink_to(secret)
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    with pytest.raises(sd.UnsafeFileError, match="is a symbolic link"):
        sd.load(str(target))
    with pytest.raises(sd.UnsafeFileError):
        sd.heal(str(managed), str(target))
    assert secret.read_text() == '{"temperature": 1}'


def test_a_fifo_at_generation_config_is_refused_without_blocking(tmp_path):
    target = tmp_path / "generation_config.json"
    os.mkfifo(target)
    with pytest.raises(sd.UnsafeFileError, match="is not a regular file"):
        sd.load(str(target))
    assert sd.file_digest(str(target)).startswith("not-a-file:")


def test_write_atomic_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    path = tmp_path / "generation_config.json"
    path.symlink_to(victim)
    sd.write_atomic(str(path), "{}\n", like=str(path))
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and path.read_text() == "{}\n"


def test_a_drop_in_folder_is_an_input_by_name_and_content(tmp_path):
    folder = tmp_path / "x.service.d"
    spec = str(folder) + "/"
    assert sd.input_digest(spec) is None
    folder.mkdir()
    assert sd.input_digest(spec) is None
    (folder / "notes.txt").write_text("ignored")
    assert sd.input_digest(spec) is None
    (folder / "override.conf").write_text("[Service]\nEnvironment=A=1\n")
    first = sd.input_digest(spec)
    (folder / "override.conf").write_text("[Service]\nEnvironment=A=2\n")
    assert first is not None and sd.input_digest(spec) != first


def test_the_runtime_input_follows_installed_distribution_names_and_versions(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang_router-0.3.1.dist-info").mkdir(parents=True)
    spec = f"distributions:{tmp_path / 'venv'}"
    before = sd.input_digest(spec)
    assert sd.distributions(str(tmp_path / "venv")) == {"sglang_router": "0.3.1"}
    (site / "sglang_router-0.3.1.dist-info").rename(site / "sglang_router-0.3.2.dist-info")
    assert sd.input_digest(spec) != before
    (site / "some_module.py").write_text("")  # not a distribution: no change
    after = sd.input_digest(spec)
    assert sd.input_digest(spec) == after


def test_record_keeps_the_runtime_it_started_from(tmp_path, monkeypatch):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang-0.5.23.dist-info").mkdir(parents=True)
    monkeypatch.setenv("INVOCATION_ID", "inv-9")
    entry = sd.record(str(tmp_path / "run/x.json"), [f"distributions:{tmp_path / 'venv'}"])
    assert entry["runtime"] == {str(tmp_path / "venv"): {"sglang": "0.5.23"}}
