"""The verification judged in the call that asked (module_utils/sglang_verdict.py), and the apply's close in it
(module_utils/sglang_close.py, module sglang_ask's judge and close): a host that is not proven keeps its lock."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_close, sglang_lab_fault, sglang_lock
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_verdict as verdict
from ansible_collections.dsv4.sglang.plugins.modules import sglang_ask

from tests.unit.fake_module import DoneError, FailedError
from tests.unit.fake_module import Module as FakeModule

MANAGED = {"temperature": 0.6, "top_p": 0.95}
JUDGE = {"managed": MANAGED, "requests": 2, "max_repetition": 0.5, "host": "gpu-1"}
VARIED = ["the keeper climbs the stairs at dusk", "a lamp turns over the cold grey sea tonight"]


def asked(**changes) -> dict:
    result = {
        "modes": {"sglang-dsv4-prefill": "model", "sglang-dsv4-decode": "model"},
        "logged": {"sglang-dsv4-prefill": dict(MANAGED), "sglang-dsv4-decode": dict(MANAGED)},
        "file_sampling": dict(MANAGED),
        "answers": [
            {"status": 200, "msg": "OK", "content": text, "finish_reason": "stop"} for text in [*VARIED, "greedy"]
        ],
    }
    return result | changes


def test_a_proven_host_has_no_failure():
    assert verdict.failures(asked(), JUDGE, "http://127.0.0.1:8000") == []


def test_a_server_that_ignores_the_model_defaults_is_named():
    modes = {"sglang-dsv4-prefill": "openai", "sglang-dsv4-decode": "model"}
    assert verdict.failures(asked(modes=modes), JUDGE, "u") == [
        "sglang-dsv4-prefill on gpu-1 runs with sampling_defaults=openai: it ignores generation_config.json."
    ]


def test_a_server_that_logged_other_defaults_or_none_is_named_with_what_it_logged():
    logged = {"sglang-dsv4-prefill": {"temperature": 0.7, "top_p": 0.95}, "sglang-dsv4-decode": None}
    found = verdict.failures(asked(logged=logged), JUDGE, "u")
    assert found[0].startswith(
        "sglang-dsv4-prefill on gpu-1 logged {'temperature': 0.7, 'top_p': 0.95} at its current start; expected"
        " exactly {'temperature': 0.6, 'top_p': 0.95} and the other sampling keys of the file"
        ' ({"temperature": 0.6, "top_p": 0.95}): '
    )
    assert found[1].startswith("sglang-dsv4-decode on gpu-1 logged no defaults line at its current start")


def test_a_key_the_file_does_not_set_fails_naming_it():
    logged = {name: {**MANAGED, "top_k": 50} for name in ("sglang-dsv4-prefill", "sglang-dsv4-decode")}
    found = verdict.failures(asked(logged=logged), JUDGE, "u")
    assert len(found) == 2 and all("top_k=50" in line for line in found)


def test_a_router_that_did_not_answer_every_request_is_named_with_its_statuses():
    answers = asked()["answers"]
    answers[1] = {"status": 503, "msg": "no workers", "content": None, "finish_reason": None}
    assert verdict.failures(asked(answers=answers), JUDGE, "http://127.0.0.1:8000") == [
        "The router at http://127.0.0.1:8000 on gpu-1 answered [200, 503] to the chat requests (OK; no workers)."
    ]


@pytest.mark.parametrize(
    ("texts", "finish"),
    [
        (["the same answer every time", "the same answer every time"], ["stop", "stop"]),
        (["a b c " * 20, VARIED[1]], ["stop", "length"]),
        (VARIED, ["stop", "abort"]),
    ],
    ids=["greedy", "degenerate", "aborted"],
)
def test_answers_that_look_greedy_degenerate_or_aborted_fail(texts, finish):
    answers = [
        {"status": 200, "msg": "OK", "content": text, "finish_reason": reason}
        for text, reason in zip(texts, finish, strict=True)
    ]
    found = verdict.failures(asked(answers=[*answers, answers[0]]), JUDGE, "u")
    assert len(found) == 1 and found[0].startswith("On gpu-1: ") and "sglang_verify_max_repetition=0.5" in found[0]


def test_the_temperature_0_answer_is_never_judged():
    answers = asked()["answers"]
    answers[-1] = {"status": 500, "msg": "boom", "content": "x x x x x x x x", "finish_reason": "abort"}
    assert verdict.failures(asked(answers=answers), JUDGE, "u") == []


def test_repetition_is_zero_for_varied_text_and_high_for_a_loop():
    assert verdict.repetition(VARIED[0]) == 0.0 and verdict.repetition("a b c " * 20) > 0.9
    assert verdict.repetition("") == 0.0


class Module(FakeModule):
    """The fake module, with the run_command the verification's call uses (it succeeds)."""

    def run_command(self, argv, **_unused):
        return 0, "", ""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A root-only folder like /run and /var/lib, this run's lock in it, the answers the test sets, the lab marker."""
    os.chmod(tmp_path, 0o755)  # noqa: S103 - like /var/lib, root's and not group-writable
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    lock = str(run / "deploy")
    assert sglang_lock.acquire(lock, "R1", "root@ctl", 600)[0]
    world = {"asked": asked()}
    monkeypatch.setattr(
        sglang_ask,
        "served_with",
        lambda module, server: {
            "sampling_defaults": world["asked"]["modes"][server["name"]],
            "preferred_sampling_params": dict(MANAGED),
        },
    )
    monkeypatch.setattr(sglang_ask, "logged_defaults", lambda module, unit: world["asked"]["logged"][unit])
    monkeypatch.setattr(sglang_ask, "ask_all", lambda url, key, timeout, bodies: world["asked"]["answers"])
    marker = tmp_path / "lab-host"
    marker.write_text("lab\n")
    monkeypatch.setattr(sglang_lab_fault, "LAB_MARKER", str(marker))
    monkeypatch.setattr(sglang_lab_fault, "REACHED", str(tmp_path / "reached.json"))
    fence = {"path": lock, "run_id": "R1", "lease": 600}
    params = {
        "servers": [{"name": "sglang-dsv4-prefill"}, {"name": "sglang-dsv4-decode"}],
        "router_url": "http://127.0.0.1:8000",
        "model": "m",
        "api_key": "",
        "questions": ["q", "q", {"prompt": "q", "temperature": 0}],
        "max_tokens": 8,
        "timeout": 5,
        "ready": [],
        "ready_timeout": 5,
        "generation_config": None,
        "model_path": None,
        "generate": None,
        "transfers": [],
        "judge": JUDGE,
        "close": {
            "status_dir": str(tmp_path / "status"),
            "result": {"success": True, "outcome": "success", "run": "R1"},
            "lock": {"path": lock, "run_id": "R1"},
        },
        "fence": fence,
        "lab_fault": None,
    }
    return {"params": params, "world": world, "lock": lock, "tmp": tmp_path}


def call(params) -> tuple[str, dict]:
    try:
        sglang_ask.ask(Module(**params))
    except DoneError as done:
        return "done", done.args[0]
    except FailedError as failed:
        return "failed", failed.args[0]
    raise AssertionError("the module neither exited nor failed")


@pytest.mark.skipif(os.geteuid() != 0, reason="the lock's folder must be root's alone: run as root")
def test_a_proven_host_closes_its_apply_in_the_same_call_result_then_lock(lab):
    how, result = call(lab["params"])
    assert how == "done" and result["changed"] is True and result["closed"]["released"] is True
    written = json.loads((lab["tmp"] / "status" / "rollout.json").read_text())
    assert written["outcome"] == "success" and written["run"] == "R1" and written["time"] > 0
    assert sglang_lock.inspect(lab["lock"]) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="the lock's folder must be root's alone: run as root")
def test_a_host_that_is_not_proven_keeps_its_lock_for_the_rollback_and_writes_no_result(lab):
    lab["world"]["asked"] = asked(modes={"sglang-dsv4-prefill": "openai", "sglang-dsv4-decode": "model"})
    how, result = call(lab["params"])
    assert how == "failed" and "runs with sampling_defaults=openai" in result["msg"] and result["closed"] is None
    assert sglang_lock.inspect(lab["lock"])["run_id"] == "R1"
    assert not (lab["tmp"] / "status").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the lock's folder must be root's alone: run as root")
def test_a_run_that_lost_its_lock_closes_nothing(lab):
    sglang_lock.release(lab["lock"], "R1")
    assert sglang_lock.acquire(lab["lock"], "R2", "bob@ctl", 600)[0]
    how, result = call(lab["params"])
    assert how == "failed" and result["lost"] is True
    assert sglang_lock.inspect(lab["lock"])["run_id"] == "R2" and not (lab["tmp"] / "status").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the lock's folder must be root's alone: run as root")
def test_a_fault_before_the_close_leaves_the_lock_held(lab):
    fault = {"point": "before_close", "action": "fail", "label": "Ask>before_close"}
    how, result = call(lab["params"] | {"lab_fault": fault})
    assert how == "failed" and result["msg"] == "lab fault injected at Ask>before_close"
    assert sglang_lock.inspect(lab["lock"])["run_id"] == "R1" and not (lab["tmp"] / "status").exists()


def test_a_close_without_a_judgement_is_refused(lab):
    how, result = call(lab["params"] | {"judge": None})
    assert how == "failed" and result["msg"].startswith("close needs judge")


@pytest.mark.skipif(os.geteuid() != 0, reason="the status folder must be root's: run as root")
def test_the_close_never_writes_into_a_folder_another_account_could_have_planted(lab):
    planted = lab["tmp"] / "status"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)  # noqa: S103 - the planted, world-writable folder under test
    with pytest.raises(FailedError) as failed:
        sglang_close.close(Module(fence=None), lab["params"]["close"])
    assert "is writable by group or others" in failed.value.args[0]["msg"]
    assert sglang_lock.inspect(lab["lock"])["run_id"] == "R1" and not (planted / "rollout.json").exists()


def test_native_generate_is_held_to_the_managed_defaults_exactly():
    good = asked(
        preferred={"sglang-dsv4-prefill": dict(MANAGED), "sglang-dsv4-decode": {"top_p": 0.95, "temperature": 0.6}},
        generated={"status": 200, "msg": "OK", "resolved": {**MANAGED, "top_k": -1, "min_p": 0.0}},
    )
    assert verdict.failures(good, JUDGE, "u") == []
    wrong = asked(
        preferred={"sglang-dsv4-prefill": {**MANAGED, "top_k": 50}, "sglang-dsv4-decode": None},
        generated={"status": 200, "msg": "OK", "resolved": {"temperature": 1.0, "top_p": 1.0}},
    )
    found = verdict.generate_failures(wrong, MANAGED, "gpu-1", "u")
    named = [line.split(" runs with ")[0] for line in found[:2]]
    assert named == ["sglang-dsv4-prefill on gpu-1", "sglang-dsv4-decode on gpu-1"]
    assert '"top_k": 50' in found[0] and "preferred_sampling_params=null" in found[1]
    assert found[2] == (
        'On gpu-1, a /generate request without sampling parameters was sampled with {"temperature": 1.0, "top_p": 1.0}:'
        " temperature=1.0, expected 0.6, top_p=1.0, expected 0.95."
    )


def test_a_router_that_does_not_answer_generate_is_named():
    unanswered = asked(generated={"status": 404, "msg": "Not Found", "resolved": None})
    assert verdict.generate_failures(unanswered, MANAGED, "gpu-1", "http://r") == [
        "The router at http://r on gpu-1 answered 404 to a /generate request without sampling parameters (Not Found)."
    ]


def test_a_server_that_runs_other_weights_than_the_directory_holds_is_named_with_both_versions():
    weights = {
        "model_path": "/srv/models/DeepSeek-V4-Flash",
        "expected": "sha256:bbbb",
        "files": 2,
        "servers": {"sglang-dsv4-prefill": "sha256:bbbb", "sglang-dsv4-decode": "sha256:aaaa"},
    }
    (failure,) = verdict.failures(asked(weights=weights), JUDGE, "http://127.0.0.1:8000")
    assert failure.startswith("sglang-dsv4-decode on gpu-1 reports weight_version='sha256:aaaa' (its /model_info)")
    assert "/srv/models/DeepSeek-V4-Flash are 'sha256:bbbb' (2 weight files)" in failure
    matching = {**weights, "servers": dict.fromkeys(weights["servers"], "sha256:bbbb")}
    assert verdict.failures(asked(weights=matching), JUDGE, "http://127.0.0.1:8000") == []
