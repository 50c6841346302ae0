"""The sampling-defaults metrics (module_utils/sglang_metrics.py) and the helper's command line that writes them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_files as files
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_metrics
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_sampling_defaults as sd

ROOT = Path(__file__).resolve().parents[2]

PLANTED = (ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text()

# The helper's command line (a host program of roles/sglang_common), as the units and the timer run it.
SPEC = importlib.util.spec_from_file_location("sglang_helper", ROOT / "host/programs/sglang_helper.py")
helper = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(helper)
PROJECT = {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None}


def _metrics(tmp_path, monkeypatch, config, units, journal="", state=None):
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    target = tmp_path / "generation_config.json"
    if config is not None:
        target.write_text(json.dumps(config))
    monkeypatch.setattr(sglang_metrics, "_unit_state", lambda unit: (state or {}).get(unit, {}))
    monkeypatch.setattr(sglang_metrics, "_journal", lambda invocation: journal if invocation == "inv-1" else "")
    text = sglang_metrics.metrics(str(tmp_path / "status"), str(managed), str(target), units, now=100.0)
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
    monkeypatch.setattr(sglang_metrics, "_unit_state", lambda unit: {})
    text = sglang_metrics.metrics(str(tmp_path / "status"), str(tmp_path / "managed.json"), target, {}, now=1.0)
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
    assert helper.main(["heal", str(tmp_path / "status"), str(managed), str(target)]) == 0
    files.write_status(str(tmp_path / "status"), "rollout.json", {"time": 50.0, "success": False, "run": "r1"})
    values, _unused = _metrics(tmp_path, monkeypatch, json.loads(target.read_text()), {})
    assert values["sglang_dsv4_last_heal_rewrote"] == 1
    assert values["sglang_dsv4_last_rollout_success"] == 0
    assert values["sglang_dsv4_last_rollout_timestamp_seconds"] == 50.0


def test_metrics_command_writes_the_textfile_atomically(tmp_path, monkeypatch):
    monkeypatch.setattr(sglang_metrics, "_unit_state", lambda unit: {})
    out = tmp_path / "sglang_dsv4.prom"
    managed = tmp_path / "managed.json"
    managed.write_text(json.dumps(PROJECT))
    status = str(tmp_path / "status")
    assert (
        helper.main(["metrics", status, str(out), str(managed), str(tmp_path / "missing.json"), "a.service=prefill"])
        == 0
    )
    assert "sglang_dsv4_managed_defaults_present 1.0" in out.read_text()
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert helper.main(["metrics", status, str(out), str(managed)]) == 2
