"""The host's one desired-state document (plugins/plugin_utils/sglang_desired.py), from the roles' settings."""

from __future__ import annotations

import json

import pytest
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_desired import ROLES, desired_state

from tests.unit.test_plugin_utils_units import LAYOUT, SETTINGS, TOPOLOGY

RUNTIME = {
    "releases": {
        "servers": {"id": "s1", "path": "/opt/r/s1", "python": "/opt/r/s1/bin/python", "lock": "pkg==1 --hash=x"},
        "router": {"id": "r1", "path": "/opt/r/r1", "python": "/opt/r/r1/bin/python", "lock": "router==1"},
    },
    "release_size_mb": {"servers": "900", "router": 60},
    "parts": ["servers", "router"],
    "user": "sglang",
}
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None}
GENCONFIG = {"sampling": SAMPLING, "model_path": "/srv/models/DeepSeek-V4-Flash"}


def services(api_key: str = "client-key", **extra: object) -> dict:
    return {
        "topology": TOPOLOGY,
        "unit_settings": {**SETTINGS, "api_key": bool(api_key)},
        "api_key": api_key,
        "admin_key": "admin-key",
        "served_model_name": "dsv4",
        "router_tls": False,
        "check_gpus": True,
        **extra,
    }


def render(template: str, template_vars: dict) -> str:
    """Stands for Ansible's template lookup: says which template, for which unit, among which units."""
    unit = template_vars.get("unit", {}).get("name", "-")
    return f"{template} {unit} {[u['name'] for u in template_vars['units']]}\n"


def program(name: str) -> str:
    return f"# {name}\n"


def document(**settings: dict | None) -> dict:
    return desired_state(LAYOUT, settings, render, program=program)


def test_every_role_gives_its_files_each_with_its_role_in_one_order():
    doc = document(runtime=RUNTIME, genconfig=GENCONFIG, services=services())
    assert doc["roles"] == list(ROLES)
    roles = [f["role"] for f in doc["files"]]
    assert roles == sorted(roles, key=ROLES.index) and set(roles) == set(ROLES)
    paths = [f["path"] for f in doc["files"]]
    assert len(paths) == len(set(paths))
    assert LAYOUT["secret_launcher"] in paths and LAYOUT["helper"] in paths and LAYOUT["wait_healthy"] in paths
    assert {f["unit"] for f in doc["files"] if "unit" in f} == {
        "sglang-dsv4-prefill.service",
        "sglang-dsv4-decode.service",
        "sglang-dsv4-router.service",
        "sglang-dsv4.target",
    }


def test_the_units_are_rendered_from_their_template_with_every_unit_known():
    doc = document(services=services())
    prefill = next(f for f in doc["files"] if f.get("unit") == "sglang-dsv4-prefill.service")
    names = "['sglang-dsv4-prefill', 'sglang-dsv4-decode', 'sglang-dsv4-router']"
    assert prefill["content"] == f"sglang-dsv4.service.j2 sglang-dsv4-prefill {names}\n"
    assert prefill["mode"] == "0644"
    env = next(f for f in doc["files"] if f["path"] == f"{LAYOUT['conf_dir']}/decode.env")
    assert env["private"] and env["mode"] == "0600"
    target = next(f for f in doc["files"] if f.get("unit") == "sglang-dsv4.target")
    assert target["content"] == f"sglang-dsv4.target.j2 - {names}\n"


def test_keys_are_secret_files_and_an_unset_client_key_means_its_files_must_not_exist():
    creds = LAYOUT["credentials_dir"]
    with_key = {f["path"]: f for f in document(services=services())["files"] if f.get("secret")}
    assert json.loads(with_key[f"{creds}/prefill"]["content"]) == {"api-key": "client-key"}
    assert with_key[f"{creds}/router"]["content"] == "client-key"
    assert with_key[f"{creds}/router-admin"]["content"] == "dsv4-admin:operators:admin:admin-key"
    assert all(f["mode"] == "0600" for f in with_key.values())
    without = {f["path"]: f for f in document(services=services(api_key=""))["files"] if f.get("secret")}
    assert without[f"{creds}/prefill"]["content"] is None and without[f"{creds}/router"]["content"] is None
    assert without[f"{creds}/router-admin"]["content"] is not None


def test_the_managed_defaults_are_the_sampling_as_sorted_json_and_the_model_file_gets_the_same():
    doc = document(genconfig=GENCONFIG)
    managed = next(f for f in doc["files"] if f["path"] == LAYOUT["managed_defaults"])
    assert managed["content"] == json.dumps(SAMPLING, indent=4, sort_keys=True) + "\n"
    assert doc["generation_config"] == {"path": LAYOUT["generation_config"], "sampling": SAMPLING}
    assert doc["checks"] == {"model_path": GENCONFIG["model_path"], "model_files": ["config.json", "tokenizer.json"]}


def test_releases_leave_their_lock_text_and_carry_their_size():
    doc = document(runtime=RUNTIME)
    assert doc["releases"] == [
        {"id": "s1", "path": "/opt/r/s1", "python": "/opt/r/s1/bin/python", "size_mb": 900},
        {"id": "r1", "path": "/opt/r/r1", "python": "/opt/r/r1/bin/python", "size_mb": 60},
    ]
    assert doc["checks"] == {"writers": ["sglang"]}


@pytest.mark.parametrize(
    ("parts", "ids"), [(["servers"], ["s1"]), (["router"], ["r1"]), (["router", "servers"], ["s1", "r1"])]
)
def test_a_host_needs_only_the_releases_of_the_parts_it_runs(parts, ids):
    # An xPyD pool's server-only host builds no router release, its router-only host no servers' release.
    doc = document(runtime={**RUNTIME, "parts": parts})
    assert [r["id"] for r in doc["releases"]] == ids


@pytest.mark.parametrize(("check_gpus", "gpus"), [(True, 8), (False, 0)])
def test_the_gpu_check_counts_the_topologys_gpus_on_real_hosts_only(check_gpus, gpus):
    doc = document(services=services(check_gpus=check_gpus))
    assert doc["checks"] == {"gpus": gpus, "gpus_variable": "sglang_services_topology"}
    assert doc["units"][0].keys() == {
        "name",
        "group",
        "mode",
        "port",
        "metrics_host",
        "metrics_port",
        "inputs",
        "health_url",
    }
    assert doc["router_url"].startswith("http://127.0.0.1:")
    assert document(services=services(router_tls=True))["router_url"].startswith("https://")


def test_a_role_used_on_its_own_adds_its_part_and_keeps_the_others():
    first = document(genconfig=GENCONFIG)
    both = desired_state(LAYOUT, {"services": services()}, render, base=first, program=program)
    assert both["roles"] == ["genconfig", "services"]
    assert both["generation_config"] == first["generation_config"]
    assert [f for f in both["files"] if f["role"] == "genconfig"] == first["files"]
    assert both["checks"]["model_path"] == GENCONFIG["model_path"] and both["checks"]["gpus"] == 8
    # Computed again, a part replaces itself: no file twice.
    again = desired_state(LAYOUT, {"services": services(api_key="")}, render, base=both, program=program)
    assert len(again["files"]) == len(both["files"])
    assert [f for f in again["files"] if f["role"] == "genconfig"] == first["files"]


def test_the_whole_document_equals_its_parts_in_any_order():
    whole = document(runtime=RUNTIME, genconfig=GENCONFIG, services=services())
    doc = None
    for role, settings in (("services", services()), ("runtime", RUNTIME), ("genconfig", GENCONFIG)):
        doc = desired_state(LAYOUT, {role: settings}, render, base=doc, program=program)
    assert doc == whole


def test_the_documents_units_are_what_the_monitoring_scrapes():
    """playbooks/monitoring.yml hands sglang_monitoring the document's units: every key its filters read is there."""
    from ansible_collections.dsv4.sglang.plugins.filter import sglang_monitoring as mon

    from tests.unit.test_filter_sglang_monitoring import settings

    units = document(services=services())["units"]
    config = mon.sglang_prometheus_config(units, settings())
    targets = [target for job in config["scrape_configs"] for c in job["static_configs"] for target in c["targets"]]
    assert "127.0.0.1:30000" in targets and "127.0.0.1:30001" in targets and "127.0.0.1:29000" in targets


def test_the_sampling_env_file_holds_the_set_defaults_for_native_generate_as_one_json_word():
    doc = document(genconfig=GENCONFIG)
    env = next(f for f in doc["files"] if f["path"] == LAYOUT["sampling_env"])
    assert env["role"] == "genconfig" and env["mode"] == "0644"
    line = env["content"].splitlines()[-1]
    name, _sep, value = line.partition("=")
    assert name == "SGLANG_DSV4_PREFERRED_SAMPLING_PARAMS" and value.startswith("'") and value.endswith("'")
    assert json.loads(value[1:-1]) == {k: v for k, v in SAMPLING.items() if v is not None}
