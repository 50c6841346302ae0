"""The one table of managed flags (module_utils/sglang_flags.py): what renders is what is refused in extra_flags."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_flags as flags
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_inputs as rules
from ansible_collections.dsv4.sglang.plugins.plugin_utils import sglang_units as services

from .test_plugin_utils_units import SETTINGS, TOPOLOGY


@pytest.mark.parametrize("api_key", [False, True])
@pytest.mark.parametrize("tls", [None, {"cert": "/etc/ssl/c.pem", "key": "/etc/ssl/k.pem"}])
def test_every_option_the_units_render_is_a_managed_one(api_key, tls):
    settings = {**SETTINGS, "api_key": api_key, "router_tls": tls, "ib_device": "mlx5_0", "server_flags": []}
    for spec in services.sglang_unit_specs(TOPOLOGY, settings):
        kind = "router" if spec["group"] == "router" else "server"
        launcher = settings["launcher"][kind]
        rendered = [word for word in spec["argv"][len(launcher) :] if word.startswith("--")]
        managed = rules.ROUTER_MANAGED_OPTIONS if kind == "router" else rules.SERVER_MANAGED_OPTIONS
        assert rendered and set(rendered) <= set(managed), set(rendered) - set(managed)


def test_the_refusal_lists_are_the_table():
    assert rules.SERVER_MANAGED_OPTIONS == flags.managed_options(flags.SERVER_FLAGS)
    assert rules.ROUTER_MANAGED_OPTIONS == flags.managed_options(flags.ROUTER_FLAGS)
    assert "--enable-metrics" in rules.SERVER_MANAGED_OPTIONS
    assert rules.managed_flag_errors("x", ["--enable-metrics"], rules.SERVER_MANAGED_OPTIONS)
    assert rules.SERVER_MANAGED_OPTIONS["--model"] == "sglang_common_model_path"


def test_options_never_rendered_are_still_refused():
    never = [f.option for f in (*flags.SERVER_FLAGS, *flags.ROUTER_FLAGS) if f.render is flags._never]
    assert sorted(never) == ["--api-key", "--api-key", "--base-gpu-id", "--control-plane-api-keys", "--model-path"]
    for option in never:
        assert rules.managed_flag_errors(
            "x", [option], {**rules.SERVER_MANAGED_OPTIONS, **rules.ROUTER_MANAGED_OPTIONS}
        )


ROOT = Path(__file__).resolve().parents[2]


def _option_specs() -> dict:
    options = {}
    for path in ROOT.glob("roles/*/meta/argument_specs.yml"):
        specs = yaml.safe_load(path.read_text())["argument_specs"]
        # sglang_common declares its variable in its checks' entry point (it has no main one).
        options.update(specs.get("main", specs.get("preflight"))["options"])
    return options


def test_each_choice_is_said_once_in_the_table_and_the_argument_specs_and_checks_are_held_to_it():
    """Adding a managed flag with choices is one row (and its default and argument spec): the argument spec's
    choices, the role's check and the bad-input table all follow the row."""
    table = flags.choices()
    assert set(table) == {"sglang_services_kv_cache_dtype", "sglang_services_transfer_backend"}
    specs = _option_specs()
    for variable, accepted in table.items():
        assert tuple(specs[variable]["choices"]) == accepted, variable
        assert specs[variable]["default"] in accepted, variable
        assert flags.choice_errors({variable: accepted[0]}) == []
        assert flags.choice_errors({variable: "no-such-value"}) == [
            f"{variable}='no-such-value' must be one of {', '.join(accepted)}"
        ]
    cases = yaml.safe_load((ROOT / "tests/bad_inputs.yml").read_text())["deploy"]
    refused = {name for case in cases for name in case["vars"] if "must be one of" in case["expect"]}
    assert set(table) <= refused
    # The preflight passes every variable with choices to the table's check, and states no list of its own.
    preflight = (ROOT / "roles/sglang_services/tasks/preflight.yml").read_text()
    for variable, accepted in table.items():
        assert f"'{variable}': {variable}" in preflight and str(list(accepted)) not in preflight


def test_every_row_that_names_a_setting_renders_that_setting():
    settings = {**SETTINGS, "kv_cache_dtype": "bfloat16", "transfer_backend": "nixl"}
    prefill = next(spec for spec in services.sglang_unit_specs(TOPOLOGY, settings) if spec["mode"] == "prefill")
    for flag in flags.SERVER_FLAGS:
        if flag.setting:
            index = prefill["argv"].index(flag.option)
            assert prefill["argv"][index + 1] == settings[flag.setting], flag.option
