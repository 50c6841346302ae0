"""The sampling defaults' one call (modules/sglang_generation_config.py): generation_config.json merged (every other
key kept), then the role's other files; the fence checked before each write; the lab fault point between them."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lab_fault, sglang_lock
from ansible_collections.dsv4.sglang.plugins.modules import sglang_generation_config as genconfig

from tests.unit.fake_module import exits, fails

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the files are root-owned and the lock root's: run as root")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A model folder with a generation_config.json, the layout's folders, this run's lock, and the lab marker."""
    os.chmod(tmp_path, 0o755)  # noqa: S103 - folders like the host's, root-owned and not group-writable
    model = tmp_path / "model"
    model.mkdir()
    config = model / "generation_config.json"
    config.write_text(json.dumps({"bos_token_id": 0, "temperature": 1.0}))
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    lock = str(run / "deploy")
    assert sglang_lock.acquire(lock, "R1", "root@ctl", 600)[0]
    marker = tmp_path / "lab-host"
    marker.write_text("lab\n")
    monkeypatch.setattr(sglang_lab_fault, "LAB_MARKER", str(marker))
    monkeypatch.setattr(sglang_lab_fault, "REACHED", str(tmp_path / "reached.json"))
    conf = tmp_path / "etc/sglang-dsv4"
    params = {
        "path": str(config),
        "sampling": {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None},
        "allow_greedy": False,
        "backup": False,
        "files": [{"path": str(conf / "sampling-defaults.json"), "mode": "0644", "content": '{"temperature": 0.6}\n'}],
        "directories": [{"path": str(conf), "mode": "0755"}],
        "fence": {"path": lock, "run_id": "R1", "lease": 600},
        "lab_fault": None,
    }
    return {"params": params, "config": config, "managed": conf / "sampling-defaults.json", "lock": lock}


def done(params, check_mode: bool = False) -> dict:
    return exits(genconfig.apply, params, check_mode)


def failed(params) -> dict:
    return fails(genconfig.apply, params)


def test_one_call_merges_the_file_and_writes_the_roles_files_and_a_second_call_changes_nothing(host):
    result = done(host["params"])
    assert result["changed"] and result["written"] == [str(host["managed"])]
    assert json.loads(host["config"].read_text()) == {
        "bos_token_id": 0,
        "temperature": 0.6,
        "top_p": 0.95,
        "do_sample": True,
    }
    assert host["managed"].read_text() == '{"temperature": 0.6}\n'
    again = done(host["params"])
    assert not again["changed"] and again["written"] == [] and again["removed"] == []


def test_check_mode_writes_nothing_and_says_what_it_would(host):
    before = host["config"].read_text()
    result = done(host["params"], check_mode=True)
    assert result["changed"] and result["written"] == [str(host["managed"])]
    assert host["config"].read_text() == before and not host["managed"].exists()


def test_a_lost_lock_fails_the_call_before_any_write(host):
    before = host["config"].read_text()
    assert sglang_lock.release(host["lock"], "R1") and sglang_lock.acquire(host["lock"], "R2", "root@other", 600)[0]
    result = failed(host["params"])
    assert result.get("lost") and "R2" in json.dumps(result)
    assert host["config"].read_text() == before and not host["managed"].exists()


def test_a_bad_file_path_is_refused_before_the_file_changes(host):
    before = host["config"].read_text()
    result = failed({**host["params"], "files": [{"path": "relative.json", "mode": "0644", "content": "{}"}]})
    assert "every file needs an absolute path, got 'relative.json'" in result["msg"]
    assert host["config"].read_text() == before


def test_the_lab_fault_point_lies_between_the_files_write_and_the_roles_files(host):
    fault = {"point": "after_generation_config", "action": "fail", "seconds": 0, "label": "merge>after"}
    result = failed({**host["params"], "lab_fault": fault})
    assert result["msg"] == "lab fault injected at merge>after"
    assert json.loads(host["config"].read_text())["temperature"] == 0.6
    assert not host["managed"].exists()


def test_the_lab_fault_is_refused_off_the_lab_and_for_a_point_the_call_does_not_have(host, tmp_path, monkeypatch):
    before = host["config"].read_text()
    wrong = {"point": "after_drain", "action": "fail"}
    assert "point one of after_generation_config" in failed({**host["params"], "lab_fault": wrong})["msg"]
    monkeypatch.setattr(sglang_lab_fault, "LAB_MARKER", str(tmp_path / "absent"))
    fault = {"point": "after_generation_config", "action": "fail"}
    assert "refused on a host that is not a lab host" in failed({**host["params"], "lab_fault": fault})["msg"]
    assert host["config"].read_text() == before and not host["managed"].exists()
