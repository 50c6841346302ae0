"""The topology checks and unit specifications of sglang_services (filter_plugins/sglang_services.py)."""

from __future__ import annotations

import copy
import shlex
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/sglang_services"
sys.path.insert(0, str(ROOT / "plugins/filter"))
import sglang_services as f  # noqa: E402

DEFAULT = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
TOPOLOGY = DEFAULT["sglang_services_topology"]
SETTINGS = {
    "launcher": {
        "server": ["/py", "-m", "sglang.launch_server"],
        "router": ["/py", "-m", "sglang_router.launch_router"],
    },
    "model_path": "/srv/models/DeepSeek-V4-Flash",
    "served_model_name": "dsv4",
    "sampling_defaults": "model",
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
    assert errors == [f"sglang_services_transfer_backend='carrier-pigeon' is not one of {backends}"]


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
    assert router["argv"][3:9] == [
        "--pd-disaggregation",
        "--prefill",
        "http://127.0.0.1:30000",
        "8998",
        "--decode",
        "http://127.0.0.1:30001",
    ]
    assert (prefill["group"], decode["group"], router["group"]) == ("servers", "servers", "router")


def test_ib_device_and_extra_flags_are_rendered():
    topology = broken("decode.extra_flags", ["--mem-fraction-static", 0.85])
    specs = {s["key"]: s for s in f.sglang_unit_specs(topology, {**SETTINGS, "ib_device": "mlx5_0"})}
    assert specs["decode"]["argv"][-2:] == ["--mem-fraction-static", "0.85"]
    assert "--disaggregation-ib-device mlx5_0" in " ".join(specs["prefill"]["argv"])


def test_credentials_specifier_survives_quoting_and_config_is_rendered():
    specs = {s["key"]: s for s in f.sglang_unit_specs(TOPOLOGY, {**SETTINGS, "config_file": "%d/server-config.yaml"})}
    assert "--config %d/server-config.yaml" in " ".join(specs["prefill"]["argv"])
    assert "--config" not in specs["router"]["argv"]
    assert f.sglang_systemd_argv(["--config", "%d/server-config.yaml", "50%"]) == "--config %d/server-config.yaml 50%%"


@pytest.mark.parametrize("argv", [["/py", "-m", "x"], ["/py", "--x", "a b", "50%", 'say "hi"', "$HOME"]])
def test_systemd_quoting_round_trips(argv):
    line = f.sglang_systemd_argv(argv)
    unescaped = line.replace("%%", "%").replace("$$", "$")
    assert shlex.split(unescaped) == argv
