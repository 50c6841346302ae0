"""What restarts, and when (module_utils/sglang_plan.py) and the start records it reads."""

from __future__ import annotations

import json

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_files, sglang_records
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_plan as plan

RUNNING = {"active": "active", "invocation": "inv-1", "need_reload": False}
GROUPS = {"sglang-dsv4-prefill": "servers", "sglang-dsv4-decode": "servers", "sglang-dsv4-router": "router"}


def status(unit=None, record_digest="d-now", desired="d-now", current="d-now", invocation="inv-1"):
    record = {"digest": record_digest, "invocation": invocation} if record_digest else None
    return plan.unit_status(RUNNING if unit is None else unit, record, desired, current)


def test_a_service_started_from_what_its_inputs_will_be_is_current():
    assert status() == plan.CURRENT


def test_a_file_this_run_changes_restarts_the_service():
    assert status(desired="d-next") == "its inputs change in this run"


def test_a_change_a_killed_run_left_behind_restarts_the_service():
    # The file already holds the new content (no change in this run), the process still the old one.
    assert status(record_digest="d-old") == "started from inputs that have changed since"


def test_no_record_or_a_record_of_another_start_is_unknown():
    assert status(record_digest=None) == plan.UNKNOWN
    assert status(invocation="inv-0") == plan.UNKNOWN


def test_stopped_and_unloaded_units_restart():
    assert status(unit={**RUNNING, "active": "failed"}).startswith("not running")
    assert status(unit={**RUNNING, "need_reload": True}) == "unit file changed on disk and is not loaded"


def test_nothing_to_do_is_an_empty_plan():
    decided = plan.decide([], dict.fromkeys(GROUPS, plan.CURRENT), GROUPS)
    assert decided["empty"] and decided["restart"] == {"servers": [], "router": []}


def test_one_server_restarts_both_through_its_group_and_leaves_the_router():
    statuses = {**dict.fromkeys(GROUPS, plan.CURRENT), "sglang-dsv4-decode": "its inputs change in this run"}
    decided = plan.decide(["/srv/models/m/generation_config.json"], statuses, GROUPS)
    assert decided["restart"]["servers"] == ["sglang-dsv4-decode: its inputs change in this run"]
    assert decided["restart"]["router"] == []
    assert not decided["empty"]


def test_unknown_evidence_restarts_only_when_the_light_proof_fails():
    statuses = {**dict.fromkeys(GROUPS, plan.UNKNOWN)}
    assert plan.decide([], statuses, GROUPS)["empty"]
    failed = plan.decide([], statuses, GROUPS, {"servers": ["prefill: /health answered 503"], "router": []})
    assert failed["restart"]["servers"] == [
        "sglang-dsv4-decode: no start record, and the light proof failed",
        "sglang-dsv4-prefill: no start record, and the light proof failed",
    ]
    assert failed["restart"]["router"] == []


def test_a_failed_light_proof_with_current_evidence_still_restarts_the_group_once():
    decided = plan.decide([], dict.fromkeys(GROUPS, plan.CURRENT), GROUPS, {"router": ["router: 503"], "servers": []})
    assert decided["restart"]["router"] == ["light proof: router: 503"]


def test_unmet_preconditions_make_the_plan_non_empty_and_are_data():
    facts = {"missing_users": ["sglang"], "disabled_units": ["sglang-dsv4-router"]}
    decided = plan.decide([], dict.fromkeys(GROUPS, plan.CURRENT), GROUPS, facts=facts)
    assert not decided["empty"]
    assert decided["missing_users"] == ["sglang"] and decided["disabled_units"] == ["sglang-dsv4-router"]
    assert decided["other"] == ["create user sglang", "enable sglang-dsv4-router"]


def test_the_reason_names_the_inputs_that_changed_since_the_start():
    statuses = {**dict.fromkeys(GROUPS, plan.CURRENT), "sglang-dsv4-prefill": plan.STALE}
    details = {"sglang-dsv4-prefill": {"changed_since_start": ["runtime /opt/sglang/venv (sglang 0.5.22 -> 0.5.23)"]}}
    decided = plan.decide([], statuses, GROUPS, details=details)
    assert decided["restart"]["servers"] == [
        "sglang-dsv4-prefill: started from inputs that have changed since: "
        "runtime /opt/sglang/venv (sglang 0.5.22 -> 0.5.23)"
    ]
    assert decided["restart_servers"] and not decided["restart_router"]


def test_a_restart_with_inputs_held_outside_the_tags_is_a_conflict():
    statuses = {**dict.fromkeys(GROUPS, plan.CURRENT), "sglang-dsv4-prefill": plan.CHANGING}
    details = {
        "sglang-dsv4-prefill": {"held_inputs": ["/etc/sglang-dsv4/prefill.env"]},
        "sglang-dsv4-router": {"held_inputs": ["/etc/sglang-dsv4/router.env"]},
    }
    decided = plan.decide(["/srv/m/generation_config.json"], statuses, GROUPS, details=details)
    # Only the group that restarts conflicts; the router, current, keeps its held input for a later run.
    assert decided["held_conflicts"] == ["sglang-dsv4-prefill: /etc/sglang-dsv4/prefill.env"]


def test_a_failing_server_proof_restarts_the_servers_not_the_router():
    failures = {"servers": ["prefill: 503"], "router": ["router: /readiness 503"]}
    decided = plan.decide([], dict.fromkeys(GROUPS, plan.CURRENT), GROUPS, failures)
    assert decided["restart"]["servers"] == ["light proof: prefill: 503"] and decided["restart"]["router"] == []


def test_record_holds_the_digest_of_its_inputs_and_the_defaults(tmp_path, monkeypatch):
    config = tmp_path / "generation_config.json"
    config.write_text(json.dumps({"temperature": 0.6, "top_p": 0.95, "eos_token_id": 1}))
    unit = tmp_path / "x.service"
    unit.write_text("[Service]\n")
    missing = tmp_path / "credential"
    monkeypatch.setenv("INVOCATION_ID", "inv-9")
    entry = sglang_records.record(str(tmp_path / "run/x.json"), [str(unit), str(config), str(missing)])
    assert entry["invocation"] == "inv-9"
    assert entry["defaults"] == {"temperature": 0.6, "top_p": 0.95}
    assert entry["inputs"][str(missing)] is None
    digests = {p: sglang_files.file_digest(p) for p in (str(unit), str(config), str(missing))}
    assert entry["digest"] == sglang_records.inputs_digest(digests)
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
    assert json.loads((tmp_path / "run/x.json").read_text())["digest"] == entry["digest"]


def test_touching_a_file_keeps_its_digest_and_an_edit_changes_it(tmp_path):
    path = tmp_path / "f"
    path.write_text("a")
    before = sglang_records.inputs_digest({str(path): sglang_files.file_digest(str(path))})
    path.touch()
    assert sglang_records.inputs_digest({str(path): sglang_files.file_digest(str(path))}) == before
    path.write_text("b")
    assert sglang_records.inputs_digest({str(path): sglang_files.file_digest(str(path))}) != before


# --- a PD pool across hosts (xPyD): a host's servers restart with their pool's --------------------------------


def test_a_hosts_servers_restart_with_their_pool_where_nothing_of_their_own_asks_for_it():
    current = {"sglang-dsv4-prefill": plan.CURRENT}
    prefill_only = {"sglang-dsv4-prefill": "servers"}
    why = ["d1 restarts its servers (sglang-dsv4-decode: its inputs change in this run)"]
    decided = plan.decide([], current, prefill_only, pool=why)
    assert decided["restart"]["servers"] == [f"pool: {why[0]}"]
    assert decided["restart_servers"] and not decided["empty"]
    # Its own reasons stand alone where it has them.
    own = plan.decide([], {"sglang-dsv4-prefill": "its inputs change in this run"}, prefill_only, pool=why)
    assert own["restart"]["servers"] == ["sglang-dsv4-prefill: its inputs change in this run"]
    router_only = plan.decide([], {"sglang-dsv4-router": plan.CURRENT}, {"sglang-dsv4-router": "router"}, pool=why)
    # The pool's router host (no servers of its own) drains the pool's workers around their restart instead.
    assert router_only["drain_pool"] and not router_only["empty"] and not router_only["restart_servers"]
    assert router_only["other"] == [f"drain the pool's workers while its servers restart ({why[0]})"]
    assert not decided["drain_pool"]
    # No pool: as before.
    assert plan.decide([], current, prefill_only)["empty"]
