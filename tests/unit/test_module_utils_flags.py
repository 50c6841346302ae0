"""The one table of managed flags (module_utils/sglang_flags.py): what renders is what is refused in extra_flags."""

from __future__ import annotations

import pytest
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
