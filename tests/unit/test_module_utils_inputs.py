"""Input rules for everything rendered into a unit, env file or command line (module_utils/sglang_inputs.py)."""

from __future__ import annotations

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_inputs as rules


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028"])
def test_control_characters_anywhere_are_refused_with_the_variable_named(char):
    errors = rules.input_errors({"sglang_services_environment": {"A": f"1{char}LD_PRELOAD=/tmp/x.so"}})
    assert any(e.startswith("sglang_services_environment.A:") and "control character" in e for e in errors)
    nested = rules.input_errors({"sglang_services_topology": {"decode": {"extra_flags": ["--x", f"a{char}"]}}})
    assert any("sglang_services_topology.decode.extra_flags[1]" in e for e in nested)


def test_a_secret_is_named_never_shown():
    errors = rules.input_errors({"sglang_services_api_key": "s3cret\nX"}, secrets=("sglang_services_api_key",))
    assert errors and all("s3cret" not in e for e in errors)
    assert "sglang_services_api_key: the value holds" in errors[0]


@pytest.mark.parametrize("key", ["BAD KEY", "1A", "A-B", "", "A=B"])
def test_environment_names_must_be_valid(key):
    errors = rules.environment_errors("sglang_services_environment", {key: "1"})
    assert errors and "not a valid environment variable name" in errors[0]


def test_environment_the_units_set_is_refused():
    assert "set by the collection" in rules.environment_errors("v", {"CUDA_VISIBLE_DEVICES": "0"})[0]


@pytest.mark.parametrize(
    "flags,managed",
    [
        (["--port", "31099"], "--port"),
        (["--port=31099"], "--port"),
        (["--sampling-defaults", "openai"], "--sampling-defaults"),
        (["--sampling-def", "openai"], "--sampling-defaults"),
        (["--tensor-parallel-size", "8"], "--tensor-parallel-size"),
        (["--model", "/x"], "--model"),
        (["--served-model", "x"], "--served-model-name"),
        (["--config=/tmp/x.yaml"], "--config"),
    ],
)
def test_server_flags_that_set_a_managed_option_are_refused(flags, managed):
    errors = rules.managed_flag_errors("sglang_services_server_flags", flags, rules.SERVER_MANAGED_OPTIONS)
    assert errors and managed in errors[0] and "sglang_services_server_flags[0]" in errors[0]


def test_other_flags_and_values_pass():
    flags = ["--trust-remote-code", "--reasoning-parser", "deepseek-v4", "--mem-fraction-static", "0.85", "-1"]
    assert rules.managed_flag_errors("x", flags, rules.SERVER_MANAGED_OPTIONS) == []


def test_router_extra_flags_are_held_to_the_router_options():
    topology = {"router": {"mode": "router", "extra_flags": ["--control-plane-api-keys", "a:b:admin:c"]}}
    errors = rules.input_errors({"sglang_services_topology": topology})
    assert "sglang_services_topology.router.extra_flags[0]" in errors[0] and "sglang_services_admin_key" in errors[0]


def test_removed_variables_name_their_replacement():
    errors = rules.removed_variable_errors(["sglang_genconfig_model_path", "ansible_host"])
    assert errors == ["sglang_genconfig_model_path was removed; use sglang_common_model_path"]


@pytest.mark.parametrize("path", ["relative/x", "/with space", "/trailing/", 3])
def test_paths_must_be_absolute(path):
    assert rules.input_errors({"p": path}, paths=("p",))


def test_a_flag_and_its_value_in_one_item_is_refused():
    errors = rules.managed_flag_errors("sglang_services_server_flags", ["--port 31099"], rules.SERVER_MANAGED_OPTIONS)
    assert errors and "is not one flag" in errors[0]


@pytest.mark.parametrize(
    "value, fault",
    [
        ("C:\\", "ends with a backslash"),
        # Measured with systemd 252: A=x\\y in an EnvironmentFile reaches the process as x\y.
        ("x\\y", "holds a backslash"),
        ("C:\\temp\\x", "holds a backslash"),
        ("\ufeffvalue", "byte order mark"),
        ("val\ufeffue", "byte order mark"),
        (" x", "whitespace"),
        ("x ", "whitespace"),
        ('"x', "quote"),
        ("'x", "quote"),
    ],
)
def test_env_values_that_systemd_would_read_otherwise_are_refused(value, fault):
    errors = rules.input_errors({"sglang_services_environment": {"A": value}})
    assert len(errors) == 1 and fault in errors[0] and "sglang_services_environment.A=" in errors[0]


def test_ordinary_env_values_pass():
    assert rules.input_errors({"sglang_services_environment": {"A": "a b", "B": 3, "C": "x/y=z"}}) == []
