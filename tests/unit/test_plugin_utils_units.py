"""The topology checks and unit specifications of sglang_services (filter_plugins/sglang_services.py)."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
import yaml
from ansible_collections.dsv4.sglang.plugins.plugin_utils import sglang_units as f

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/sglang_services"

DEFAULT = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
# The single host's router: its own prefill (with its bootstrap port) and decode, at loopback.
ROUTER_PD = ["--pd-disaggregation", "--prefill", "http://127.0.0.1:30000", "8998", "--decode", "http://127.0.0.1:30001"]

TOPOLOGY = DEFAULT["sglang_services_topology"]
LAYOUT = yaml.safe_load((ROOT / "roles/sglang_common/vars/main.yml").read_text())["_sglang_common_layout"]
LAYOUT["generation_config"] = "/srv/models/DeepSeek-V4-Flash/generation_config.json"
SETTINGS = {
    "layout": LAYOUT,
    "launcher": {
        "server": ["/py", "-m", "sglang.launch_server"],
        "router": ["/py", "-m", "sglang_router.launch_router"],
        "server_files": [],
        "router_files": ["/usr/local/libexec/sglang-dsv4/sglang_with_secret.py"],
    },
    "model_path": "/srv/models/DeepSeek-V4-Flash",
    "served_model_name": "dsv4",
    "transfer_backend": "mooncake",
    "ib_device": None,
    "kv_cache_dtype": "fp8_e4m3",
    "server_flags": ["--trust-remote-code"],
    "environment": {"NCCL_DEBUG": "WARN"},
}


def broken(path: str, value: object) -> dict:
    topology = copy.deepcopy(TOPOLOGY)
    service, key = path.split(".")
    if value is KeyError:
        del topology[service][key]
    else:
        topology[service][key] = value
    return topology


def test_default_topology_is_the_8_gpu_host_and_valid():
    assert f.sglang_topology_errors(TOPOLOGY) == []
    assert TOPOLOGY["prefill"]["gpu_ids"] == [0, 1, 2, 3] and TOPOLOGY["prefill"]["numa_node"] == 0
    assert TOPOLOGY["decode"]["gpu_ids"] == [4, 5, 6, 7] and TOPOLOGY["decode"]["numa_node"] == 1


@pytest.mark.parametrize(
    "topology,needle",
    [
        (broken("decode.gpu_ids", [3, 4, 5, 6]), "GPU 3 is already given to sglang_services_topology.prefill"),
        (broken("decode.port", 30000), "sglang_services_topology.decode.port=30000 is already used"),
        (broken("router.metrics_port", 8998), "router.metrics_port=8998 is already used"),
        (broken("prefill.bootstrap_port", KeyError), "sglang_services_topology.prefill.bootstrap_port is required"),
        (broken("prefill.mode", "decode"), "exactly one service with mode prefill, found 0"),
        (broken("decode.gpu_ids", []), "sglang_services_topology.decode.gpu_ids=[] must be a non-empty list"),
        (broken("decode.numa_node", -1), "sglang_services_topology.decode.numa_node=-1"),
        (broken("router.port", 70000), "sglang_services_topology.router.port=70000 must be a port number"),
        (broken("prefill.port", "30000"), "sglang_services_topology.prefill.port='30000' must be a port number"),
        (broken("decode.extra_flags", "--foo"), "sglang_services_topology.decode.extra_flags='--foo'"),
        ({k: v for k, v in TOPOLOGY.items() if k != "decode"}, "exactly one service with mode decode, found 0"),
        ([], "sglang_services_topology must be a mapping"),
    ],
)
def test_topology_errors_name_the_variable_and_value(topology, needle):
    errors = f.sglang_topology_errors(topology)
    assert any(needle in e for e in errors), errors


def test_unknown_transfer_backend_is_named():
    errors = f.sglang_topology_errors(TOPOLOGY, "carrier-pigeon")
    backends = "mooncake, nixl, ascend, fake, mori, mooncake_tcp"
    assert errors == [f"sglang_services_transfer_backend='carrier-pigeon' must be one of {backends}"]


def test_unit_specs_split_gpus_and_render_the_pd_flags():
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, SETTINGS)}
    assert [s["name"] for s in f.sglang_unit_specs(TOPOLOGY, SETTINGS)] == [
        "sglang-dsv4-prefill",
        "sglang-dsv4-decode",
        "sglang-dsv4-router",
    ]
    prefill, decode, router = specs["prefill"], specs["decode"], specs["router"]
    assert prefill["environment"] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "NCCL_DEBUG": "WARN"}
    assert decode["environment"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert "CUDA_VISIBLE_DEVICES" not in router["environment"]
    joined = " ".join(prefill["argv"])
    for flag in (
        "--sampling-defaults model",
        "--disaggregation-mode prefill",
        "--disaggregation-bootstrap-port 8998",
        "--host 127.0.0.1",
        "--tp-size 4",
        "--kv-cache-dtype fp8_e4m3",
        "--enable-metrics",
    ):
        assert flag in joined
    assert "--disaggregation-bootstrap-port" not in decode["argv"]
    assert "--disaggregation-ib-device" not in decode["argv"]
    assert router["argv"][3:9] == ROUTER_PD
    assert (prefill["group"], decode["group"], router["group"]) == ("servers", "servers", "router")


def test_ib_device_and_extra_flags_are_rendered():
    topology = broken("decode.extra_flags", ["--mem-fraction-static", 0.85])
    specs = {s["key"]: s for s in f.sglang_unit_specs(topology, {**SETTINGS, "ib_device": "mlx5_0"})}
    assert specs["decode"]["argv"][-2:] == ["--mem-fraction-static", "0.85"]
    assert "--disaggregation-ib-device mlx5_0" in " ".join(specs["prefill"]["argv"])


def test_credentials_specifier_survives_quoting_and_config_is_rendered():
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, {**SETTINGS, "api_key": True})}
    assert "--config %d/server-config.yaml" in " ".join(specs["prefill"]["argv"])
    assert "--config" not in specs["router"]["argv"]
    assert specs["prefill"]["credentials"] == {"server-config.yaml": "/etc/sglang-dsv4/credentials/prefill"}
    assert specs["router"]["credentials"] == {
        "api-key": "/etc/sglang-dsv4/credentials/router",
        "admin-key": "/etc/sglang-dsv4/credentials/router-admin",
    }
    assert f.sglang_systemd_argv(["--config", "%d/server-config.yaml", "50%"]) == "--config %d/server-config.yaml 50%%"


def test_without_a_client_key_the_router_still_gets_its_admin_key_and_servers_no_config():
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, SETTINGS)}
    assert "--config" not in specs["prefill"]["argv"]
    assert specs["prefill"]["credentials"] == {}
    assert specs["router"]["credentials"] == {"admin-key": "/etc/sglang-dsv4/credentials/router-admin"}


def test_inputs_are_what_each_service_starts_from():
    settings = {**SETTINGS, "api_key": True}
    settings["launcher"] = {
        **SETTINGS["launcher"],
        "server_runtime": "/opt/sglang/venv",
        "router_runtime": "/opt/sglang/venv",
    }
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, settings)}
    # The helper set (its command line and the modules it runs) and the health gate.
    programs = [
        f"/usr/local/libexec/sglang-dsv4/{name}.py"
        for name in (
            "sglang_helper",
            "sglang_systemd",
            "sglang_files",
            "sglang_sampling_defaults",
            "sglang_records",
            "sglang_metrics",
            "sglang_rotation",
            "sglang_redact",
        )
    ] + ["/usr/local/libexec/sglang-dsv4/sglang_wait_healthy.py"]
    model = "/srv/models/DeepSeek-V4-Flash"
    assert specs["prefill"]["inputs"] == [
        "/etc/systemd/system/sglang-dsv4-prefill.service",
        "/etc/systemd/system/sglang-dsv4-prefill.service.d/",
        "/etc/sglang-dsv4/prefill.env",
        # The managed sampling defaults for native /generate (sglang_genconfig's sampling env file).
        "/etc/sglang-dsv4/sampling.env",
        "/etc/sglang-dsv4/credentials/prefill",
        *programs,
        "distributions:/opt/sglang/venv",
        f"{model}/config.json",
        f"{model}/generation_config.json",
        f"{model}/tokenizer.json",
        f"{model}/tokenizer_config.json",
        # The weights, by their manifest: new weights restart the servers (and set --weight-version), not the router.
        f"weights:{model}",
    ]
    assert specs["router"]["inputs"] == [
        "/etc/systemd/system/sglang-dsv4-router.service",
        "/etc/systemd/system/sglang-dsv4-router.service.d/",
        "/etc/sglang-dsv4/router.env",
        "/etc/sglang-dsv4/credentials/router",
        "/etc/sglang-dsv4/credentials/router-admin",
        *programs,
        "/usr/local/libexec/sglang-dsv4/sglang_with_secret.py",
        "distributions:/opt/sglang/venv",
        f"{model}/tokenizer.json",
        f"{model}/tokenizer_config.json",
    ]


def test_a_runtime_without_a_venv_adds_no_distributions_input():
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, SETTINGS)}
    assert not any(i.startswith("distributions:") for spec in specs.values() for i in spec["inputs"])


@pytest.mark.parametrize(
    "host,tls,url",
    [
        ("0.0.0.0", False, "http://127.0.0.1:8000"),  # noqa: S104 - the wildcard maps to loopback
        ("::", False, "http://[::1]:8000"),
        ("192.0.2.5", True, "https://192.0.2.5:8000"),
        ("127.0.0.1", False, "http://127.0.0.1:8000"),
    ],
)
def test_router_is_checked_where_it_really_listens(host, tls, url):
    assert f.router_url({"host": host, "port": 8000}, tls) == url


def test_router_always_gets_metrics_listener_and_tokenizer_and_readiness_gate():
    router = next(s for s in f.sglang_unit_specs(TOPOLOGY, SETTINGS) if s["key"] == "router")
    joined = " ".join(router["argv"])
    assert "--prometheus-host 127.0.0.1 --prometheus-port 29000" in joined
    assert "--tokenizer-path /srv/models/DeepSeek-V4-Flash" in joined
    assert router["health_url"] == "http://127.0.0.1:8000/readiness"
    tls = next(
        s
        for s in f.sglang_unit_specs(TOPOLOGY, {**SETTINGS, "router_tls": {"cert": "/etc/c.pem", "key": "/etc/k.pem"}})
        if s["key"] == "router"
    )
    assert "--tls-cert-path %d/tls-cert --tls-key-path %d/tls-key" in " ".join(tls["argv"])
    assert tls["credentials"]["tls-cert"] == "/etc/c.pem"
    assert tls["health_url"].startswith("https://")


@pytest.mark.parametrize("argv", [["/py", "-m", "x"], ["/py", "--x", "a b", "50%", 'say "hi"', "$HOME"]])
def test_systemd_quoting_round_trips(argv):
    line = f.sglang_systemd_argv(argv)
    unescaped = line.replace("%%", "%").replace("$$", "$")
    assert shlex.split(unescaped) == argv


def test_a_percent_in_a_credential_path_reaches_load_credential_doubled():
    """systemd expands %-specifiers in LoadCredential='s path: /etc/tls/100%h.pem would become the home folder's."""
    tls = {"cert": "/etc/tls/100%h.pem", "key": "/etc/tls/key%n.pem"}
    router = next(s for s in f.sglang_unit_specs(TOPOLOGY, {**SETTINGS, "router_tls": tls}) if s["group"] == "router")
    assert "tls-cert:/etc/tls/100%%h.pem" in router["load_credentials"]
    assert "tls-key:/etc/tls/key%%n.pem" in router["load_credentials"]
    # The start record names the file itself.
    assert "/etc/tls/100%h.pem" in router["inputs"]


def with_flags(prefill: list, decode: list) -> dict:
    topology = copy.deepcopy(TOPOLOGY)
    topology["prefill"]["extra_flags"], topology["decode"]["extra_flags"] = prefill, decode
    return topology


@pytest.mark.parametrize(
    ("prefill", "decode", "server", "said"),
    [
        (["--page-size", "64"], [], [], "--page-size '64' and decode (decode) with SGLang's default"),
        (["--page-size=64"], ["--page-size", "32"], [], "--page-size '64' and decode (decode) with '32'"),
        # An abbreviation argparse accepts, and a side's own flag over the flags of both.
        ([], ["--page-s", "16"], ["--page-size", "64"], "--page-size '64' and decode (decode) with '16'"),
        (["--dtype", "float16"], [], [], "--dtype 'float16' and decode (decode) with SGLang's default"),
        ([], ["--quantization", "fp8"], [], "--quantization SGLang's default and decode (decode) with 'fp8'"),
        (["--revision", "abc"], ["--revision", "def"], [], "--revision 'abc' and decode (decode) with 'def'"),
    ],
)
def test_prefill_and_decode_that_would_disagree_on_the_kv_cache_are_refused_naming_both(prefill, decode, server, said):
    errors = f.sglang_topology_errors(with_flags(prefill, decode), "mooncake", server)
    assert errors == [
        f"sglang_services_topology: prefill (prefill) would run with {said}: the two must agree (the KV cache crosses"
        " between them); set it alike in both extra_flags, or once in sglang_services_server_flags"
    ]


def test_prefill_and_decode_that_agree_pass_whatever_else_differs():
    same = with_flags(
        ["--page-size", "64", "--mem-fraction-static", "0.8"], ["--page-size=64", "--cuda-graph-max-bs", "8"]
    )
    assert f.sglang_topology_errors(same, "mooncake", ["--dtype", "bfloat16"]) == []
    assert f.sglang_topology_errors(with_flags([], []), "mooncake", ["--page-size", "64"]) == []


def test_the_servers_take_the_managed_defaults_for_generate_from_the_sampling_env_word_and_the_router_does_not():
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, SETTINGS)}
    word = "${SGLANG_DSV4_PREFERRED_SAMPLING_PARAMS}"
    for key in ("prefill", "decode"):
        argv = specs[key]["argv"]
        assert argv[argv.index("--preferred-sampling-params") + 1] == word
        # systemd expands it into one argument: the Exec= line keeps it as it is, every other $ is doubled.
        line = f.sglang_systemd_argv(argv)
        assert f"--preferred-sampling-params {word}" in line
    assert "--preferred-sampling-params" not in specs["router"]["argv"]
    assert f.sglang_systemd_argv(["$HOME", "a ${X}"]) == '"$$HOME" "a $${X}"'
