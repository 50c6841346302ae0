"""A table of wrong inputs: each run fails before the host changes, with a message naming the variable.

Runs `deploy.yml` against molecule's instance (and one run against the production inventory) with one
bad value at a time, concurrently, and compares checksums of every managed file before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PORT_BASE = 32010
MANAGED = (
    "/srv/models/DeepSeek-V4-Flash/generation_config.json /srv/models/DeepSeek-V4-Flash/generation_config.json.orig "
    "/etc/sglang-dsv4/*.env /etc/sglang-dsv4/sampling-defaults.json /etc/systemd/system/sglang-dsv4*.service "
    "/etc/systemd/system/sglang-dsv4.target"
)


def topology(**changes: dict) -> dict:
    base = {
        "prefill": {
            "mode": "prefill",
            "gpu_ids": [0, 1, 2, 3],
            "numa_node": 0,
            "port": PORT_BASE + 1,
            "bootstrap_port": PORT_BASE + 3,
            "extra_flags": [],
        },
        "decode": {"mode": "decode", "gpu_ids": [4, 5, 6, 7], "numa_node": 0, "port": PORT_BASE + 2, "extra_flags": []},
        "router": {
            "mode": "router",
            "host": "127.0.0.1",
            "port": PORT_BASE,
            "metrics_port": PORT_BASE + 4,
            "extra_flags": [],
        },
    }
    for service, values in changes.items():
        if values is None:
            del base[service]
        else:
            base[service] = {**base[service], **values}
    return {"sglang_services_topology": base}


CASES = {
    "temperature above 2": ({"sglang_genconfig_temperature": 2.5}, "sglang_genconfig_temperature=2.5 is invalid"),
    "temperature negative": ({"sglang_genconfig_temperature": -0.1}, "sglang_genconfig_temperature=-0.1 is invalid"),
    "temperature as string": ({"sglang_genconfig_temperature": "0.6"}, 'sglang_genconfig_temperature="0.6" is invalid'),
    "temperature as bool": ({"sglang_genconfig_temperature": True}, "sglang_genconfig_temperature=true is invalid"),
    "greedy not allowed": ({"sglang_genconfig_temperature": 0}, "sglang_genconfig_temperature=0 means greedy decoding"),
    "top_p zero": ({"sglang_genconfig_top_p": 0}, "sglang_genconfig_top_p=0 is invalid"),
    "top_p above 1": ({"sglang_genconfig_top_p": 1.5}, "sglang_genconfig_top_p=1.5 is invalid"),
    "top_p as string": ({"sglang_genconfig_top_p": "high"}, 'sglang_genconfig_top_p="high" is invalid'),
    "top_k zero": ({"sglang_genconfig_top_k": 0}, "sglang_genconfig_top_k=0 is invalid"),
    "top_k fractional": ({"sglang_genconfig_top_k": 2.5}, "sglang_genconfig_top_k=2.5 is invalid"),
    "min_p above 1": ({"sglang_genconfig_min_p": 1.5}, "sglang_genconfig_min_p=1.5 is invalid"),
    "min_p negative": ({"sglang_genconfig_min_p": -0.1}, "sglang_genconfig_min_p=-0.1 is invalid"),
    "repetition_penalty zero": (
        {"sglang_genconfig_repetition_penalty": 0},
        "sglang_genconfig_repetition_penalty=0 is invalid",
    ),
    "repetition_penalty as string": (
        {"sglang_genconfig_repetition_penalty": "1.1"},
        'sglang_genconfig_repetition_penalty="1.1" is invalid',
    ),
    "overlapping GPU ids": (
        topology(decode={"gpu_ids": [3, 4, 5, 6]}),
        "GPU 3 is already given to sglang_services_topology.prefill",
    ),
    "duplicate port": (
        topology(decode={"port": PORT_BASE + 1}),
        f"sglang_services_topology.decode.port={PORT_BASE + 1} is already used",
    ),
    "bootstrap port clashes with router": (
        topology(prefill={"bootstrap_port": PORT_BASE}),
        f"sglang_services_topology.router.port={PORT_BASE} is already used by "
        "sglang_services_topology.prefill.bootstrap_port",
    ),
    "no prefill": (
        topology(prefill=None),
        "sglang_services_topology must have exactly one service with mode prefill, found 0",
    ),
    "no decode": (
        topology(decode=None),
        "sglang_services_topology must have exactly one service with mode decode, found 0",
    ),
    "missing model path": (
        {"sglang_genconfig_model_path": "/srv/models/absent", "sglang_services_model_path": "/srv/models/absent"},
        "sglang_genconfig_model_path=/srv/models/absent does not hold config.json",
    ),
    "unknown transfer backend": (
        {"sglang_services_transfer_backend": "carrier-pigeon"},
        "sglang_services_transfer_backend",
    ),
    "kv cache dtype DSv4 refuses": ({"sglang_services_kv_cache_dtype": "auto"}, "sglang_services_kv_cache_dtype"),
    "sampling defaults openai": ({"sglang_services_sampling_defaults": "openai"}, "sglang_services_sampling_defaults"),
    "start timeout too short": (
        {"sglang_services_timeout_start_sec": 5},
        "sglang_services_timeout_start_sec must be at least 60",
    ),
    "unknown runtime": ({"sglang_runtime_kind": "docker"}, "sglang_runtime_kind"),
}


def deploy(extra: dict, inventory: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, "deploy.yml", "-e", json.dumps(extra)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def outcomes(host):
    inventory = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")
    before = host.check_output(f"sha256sum {MANAGED}")
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = dict(zip(CASES, pool.map(lambda case: deploy(CASES[case][0], inventory), CASES), strict=True))
    runs["lab stand-in against production"] = deploy({"sglang_runtime_kind": "lab_standin"}, "inventories/production")
    after = host.check_output(f"sha256sum {MANAGED}")
    return {"runs": runs, "before": before, "after": after}


def test_the_table_is_big_enough():
    assert len(CASES) + 1 >= 20


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_naming_the_variable(outcomes, case):
    run = outcomes["runs"][case]
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert CASES[case][1] in output, output[-2500:]
    assert "sglang_rollout : " not in output  # stopped in the checks, before the rollout block


def test_lab_standin_is_refused_for_production(outcomes):
    run = outcomes["runs"]["lab stand-in against production"]
    assert run.returncode != 0
    assert "sglang_runtime_kind=lab_standin is a lab tool and is refused here" in run.stdout + run.stderr
    assert "UNREACHABLE" not in run.stdout + run.stderr


def test_no_managed_file_changed(outcomes):
    assert outcomes["before"] == outcomes["after"]
    assert "generation_config.json.orig" in outcomes["before"]
