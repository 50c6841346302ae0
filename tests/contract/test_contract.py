"""The rendered command lines and the lab stand-in, held to the real sglang 0.5.23, sglang-router 0.3.2, smg 1.13.0."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_flags as flags
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_inputs as rules
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_sampling_defaults as sampling
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_verdict as verdict
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_pools import sglang_pool_members

from tests.unit.test_plugin_utils_pools import XPYD, router_argv

from .conftest import HERE, POOL_HOSTS, ROOT, exec_start_argv, flags_after_launcher

sys.path.insert(0, str(ROOT / "roles/lab_hosts/files"))
import sglang_lab_standin as standin

HOSTS = ("dsv4-gpu-01", "lab-render")
SERVERS = ("prefill", "decode")


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What LoadCredential= hands the servers when an API key is set: {"api-key": ...} for --config."""
    directory = tmp_path_factory.mktemp("credentials")
    (directory / "server-config.yaml").write_text(json.dumps({"api-key": "contract-test-key"}))
    return directory


# What sglang_genconfig's sampling env file holds for the default sampling defaults (0.6 / 0.95), as systemd hands it.
PREFERRED = flags.preferred_sampling_params(
    {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None}
)


# What a start's record step writes for the weights it loads (module_utils/sglang_records.py).
WEIGHT_VERSION = "sha256:0123456789abcdef"


def _server_flags(rendered: dict[str, Path], host: str, unit: str, credentials: Path) -> list[str]:
    unit_file = rendered[host] / f"sglang-dsv4-{unit}.service"
    environment = {flags.PREFERRED_ENV: PREFERRED, flags.WEIGHT_ENV: WEIGHT_VERSION}
    return flags_after_launcher(exec_start_argv(unit_file, credentials, environment))


def _flag_names(flags: list[str]) -> list[str]:
    return [token.split("=", 1)[0] for token in flags if token.startswith("--")]


@pytest.fixture(scope="module")
def parsed(rendered: dict[str, Path], ask_sglang: Any, credentials: Path) -> dict[str, Any]:
    servers = [_server_flags(rendered, host, unit, credentials) for host in HOSTS for unit in SERVERS]
    routers = [flags_after_launcher(exec_start_argv(rendered[host] / "sglang-dsv4-router.service")) for host in HOSTS]
    wrong_servers = [
        servers[0] + ["--generation-config", "gc.json"],  # a vLLM flag SGLang does not have
        [f if f != "model" else "greedy" for f in servers[0]],  # --sampling-defaults greedy
        [f if f != "mooncake" else "carrier-pigeon" for f in servers[0]],
        servers[0] + ["--enable-ep-moe"],  # removed before 0.5.23
        [f if f != "--sampling-defaults" else "--sampling-default" for f in servers[0]],  # abbreviation
    ]
    wrong_routers = [routers[0] + ["--prefill-url", "http://127.0.0.1:1"], routers[0] + ["--policy", "fastest"]]
    answer = ask_sglang({"server_argvs": servers + wrong_servers, "router_argvs": routers + wrong_routers})
    return {
        "servers": servers,
        "routers": routers,
        "answer": answer,
        "n_servers": len(servers),
        "n_routers": len(routers),
    }


@pytest.mark.parametrize("index", range(len(HOSTS) * len(SERVERS)))
def test_rendered_server_command_line_parses_with_exact_flag_names(parsed: dict[str, Any], index: int) -> None:
    host, unit = list(itertools.product(HOSTS, SERVERS))[index]
    result = parsed["answer"]["server"]["results"][index]
    assert result["ok"], result["error"]
    options = set(parsed["answer"]["server"]["options"])
    assert set(_flag_names(parsed["servers"][index])) <= options
    values = result["values"]
    assert values["sampling_defaults"] == "model"
    assert values["disaggregation_mode"] == unit
    assert values["weight_version"] == WEIGHT_VERSION
    assert values["host"] == "127.0.0.1"
    assert values["tp_size"] == 4
    assert values["kv_cache_dtype"] == "fp8_e4m3"
    assert values["enable_metrics"] is True
    # systemd expands the sampling env file's variable into one argument: the JSON SGLang's serving hook parses.
    assert PREFERRED == '{"temperature": 0.6, "top_p": 0.95}'
    assert values["preferred_sampling_params"] == {"temperature": 0.6, "top_p": 0.95}
    # The lab inventory sets an API key (vault): the servers get it from the --config file, not the command line.
    assert values["api_key"] == ("contract-test-key" if host == "lab-render" else None)
    expected_port = {
        "dsv4-gpu-01": {"prefill": 30000, "decode": 30001},
        "lab-render": {"prefill": 31011, "decode": 31012},
    }
    assert values["port"] == expected_port[host][unit]


# What the KV cache crosses with, as the real parser resolves it: prefill and decode of one host must agree on each.
PD_EQUAL_FIELDS = (
    "model_path",
    "revision",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "load_format",
    "page_size",
    "disaggregation_transfer_backend",
    "weight_version",
)


@pytest.mark.parametrize("host", HOSTS)
def test_prefill_and_decode_of_a_host_agree_on_what_the_kv_cache_crosses_with(
    parsed: dict[str, Any], rendered: dict[str, Path], host: str
) -> None:
    """Held on the rendered units, parsed by the real sglang 0.5.23: the same model, dtype, KV cache, transfer
    backend and weights on both sides, and the same runtime release (the launcher: the release's own python)."""
    index = {pair: i for i, pair in enumerate(itertools.product(HOSTS, SERVERS))}
    prefill, decode = (parsed["answer"]["server"]["results"][index[(host, unit)]]["values"] for unit in SERVERS)
    assert {field: prefill[field] for field in PD_EQUAL_FIELDS} == {field: decode[field] for field in PD_EQUAL_FIELDS}
    launchers = []
    for unit in SERVERS:
        argv = exec_start_argv(rendered[host] / f"sglang-dsv4-{unit}.service")
        launchers.append(argv[: len(argv) - len(flags_after_launcher(argv))])
    assert launchers[0] == launchers[1] and launchers[0], launchers


@pytest.mark.parametrize("index", range(len(HOSTS)))
def test_rendered_router_command_line_parses(parsed: dict[str, Any], index: int) -> None:
    result = parsed["answer"]["router"]["results"][index]
    assert result["ok"], result["error"]
    assert set(_flag_names(parsed["routers"][index])) <= set(parsed["answer"]["router"]["options"])
    values = result["values"]
    assert values["pd_disaggregation"] is True
    prefill_port, bootstrap, decode_port, metrics = {
        "dsv4-gpu-01": (30000, 8998, 30001, 29000),
        "lab-render": (31011, 31013, 31012, 31014),
    }[HOSTS[index]]
    assert values["prefill_urls"] == [[f"http://127.0.0.1:{prefill_port}", bootstrap]]
    assert values["decode_urls"] == [f"http://127.0.0.1:{decode_port}"]
    # Without these the router would listen for metrics on 0.0.0.0:29000 and fetch a tokenizer from the Hub.
    assert (values["prometheus_host"], values["prometheus_port"]) == ("127.0.0.1", metrics)
    assert values["tokenizer_path"] == "/srv/models/DeepSeek-V4-Flash"
    assert values["host"] == "127.0.0.1"
    # Keys are never on the command line: the launcher adds them from credentials.
    assert values["api_key"] is None


@pytest.mark.parametrize("offset", range(5))
def test_wrong_server_flag_or_value_is_refused(parsed: dict[str, Any], offset: int) -> None:
    result = parsed["answer"]["server"]["results"][parsed["n_servers"] + offset]
    if offset == 4:
        # argparse takes the abbreviation, so only the comparison with the parser's own names catches it.
        assert result["ok"]
        assert "--sampling-default" not in set(parsed["answer"]["server"]["options"])
    else:
        assert not result["ok"]
        assert result["status"] == 2


@pytest.mark.parametrize("offset", range(2))
def test_wrong_router_flag_or_value_is_refused(parsed: dict[str, Any], offset: int) -> None:
    result = parsed["answer"]["router"]["results"][parsed["n_routers"] + offset]
    assert not result["ok"]
    assert result["status"] == 2


# --- the same router flags under smg 1.13.0, the maintained successor (its own venv) ---------------------


@pytest.fixture(scope="module")
def parsed_smg(parsed: dict[str, Any], ask_smg: Any) -> dict[str, Any]:
    wrong = [parsed["routers"][0] + ["--mini-lb"], parsed["routers"][0] + ["--policy", "fastest"]]
    return ask_smg({"router_argvs": parsed["routers"] + wrong})["router"]


@pytest.mark.parametrize("index", range(len(HOSTS)))
def test_rendered_router_command_line_parses_under_smg_to_the_same_values(
    parsed: dict[str, Any], parsed_smg: dict[str, Any], index: int
) -> None:
    result = parsed_smg["results"][index]
    assert result["ok"], result["error"]
    assert set(_flag_names(parsed["routers"][index])) <= set(parsed_smg["options"])
    assert result["values"] == parsed["answer"]["router"]["results"][index]["values"]


@pytest.mark.parametrize("offset", range(2))
def test_smg_refuses_the_gone_mini_lb_and_a_wrong_policy(parsed: dict[str, Any], parsed_smg: dict[str, Any], offset):
    result = parsed_smg["results"][parsed["n_routers"] + offset]
    assert not result["ok"] and result["status"] == 2


def test_standin_flags_exist_in_real_sglang(parsed: dict[str, Any]) -> None:
    real = set(parsed["answer"]["server"]["options"])
    mine = {option for action in standin.server_parser()._actions for option in action.option_strings}
    assert mine - {"-h", "--help"} <= real, mine - real


# --- flags the collection manages: refused in extra_flags, as the real parsers would read them ---------

MANAGED = {
    "server": rules.SERVER_MANAGED_OPTIONS,
    "router": rules.ROUTER_MANAGED_OPTIONS,
    "smg": rules.ROUTER_MANAGED_OPTIONS,
}
KINDS = ["server", "router", "smg"]


@pytest.fixture(scope="module")
def parsers(parsed: dict[str, Any], parsed_smg: dict[str, Any]) -> dict[str, Any]:
    """Each real parser's options and aliases: sglang's server, sglang-router's and smg's router."""
    return {"server": parsed["answer"]["server"], "router": parsed["answer"]["router"], "smg": parsed_smg}


def _argparse_target(option: str, options: list[str]) -> str | None:
    """The option argparse (allow_abbrev) resolves a --name to: exact, else a unique prefix, else None."""
    if option in options:
        return option
    hits = [o for o in options if o.startswith(option)]
    return hits[0] if len(hits) == 1 else None


@pytest.mark.parametrize("kind", KINDS)
def test_managed_options_and_all_their_aliases_come_from_the_real_parser(parsers: dict[str, Any], kind: str) -> None:
    real = parsers[kind]
    # One managed list serves both routers: each of its options is an option of sglang-router or of smg.
    known = (
        set(real["options"]) if kind == "server" else set(parsers["router"]["options"]) | set(parsers["smg"]["options"])
    )
    assert set(MANAGED[kind]) <= known, set(MANAGED[kind]) - known
    for strings in real["aliases"]:
        if set(strings) & set(MANAGED[kind]):
            assert set(strings) <= set(MANAGED[kind]), f"alias missing from the managed list: {strings}"


@pytest.mark.parametrize("kind", KINDS)
def test_every_spelling_argparse_maps_to_a_managed_option_is_refused(parsers: dict[str, Any], kind: str) -> None:
    options = parsers[kind]["options"]
    checked = 0
    for managed in MANAGED[kind]:
        for end in range(3, len(managed) + 1):
            spelling = managed[:end]
            if _argparse_target(spelling, options) in MANAGED[kind]:
                for flags in ([spelling, "x"], [f"{spelling}=x"]):
                    assert rules.managed_flag_errors("v", flags, MANAGED[kind]), flags
                    checked += 1
    assert checked > 2 * len(MANAGED[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_no_option_the_collection_leaves_alone_is_refused(parsers: dict[str, Any], kind: str) -> None:
    unmanaged = [o for o in parsers[kind]["options"] if o.startswith("--") and o not in MANAGED[kind]]
    assert len(unmanaged) > 50
    refused = [o for o in unmanaged if rules.managed_flag_errors("v", [o], MANAGED[kind])]
    assert refused == []


# --- sampling: generation_config.json x request body x --sampling-defaults ------------------------

GENERATION_CONFIGS: dict[str, dict[str, Any] | None] = {
    "project defaults": {"temperature": 0.6, "top_p": 0.95},
    "deepseek upstream, no sampling keys": json.loads(
        (ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text()
    ),
    "all five": {"temperature": 0.3, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1},
    "null values": {"temperature": None, "top_p": 0.9, "top_k": None, "do_sample": True},
    "greedy in file": {"temperature": 0.0, "top_p": 1.0, "do_sample": False},
    "integers": {"temperature": 1, "top_k": 40, "do_sample": True},
    "empty": {},
    "no file": None,
}
REQUESTS: dict[str, dict[str, Any]] = {
    "omitted": {},
    "temperature 0": {"temperature": 0},
    "temperature 0.9": {"temperature": 0.9},
    "temperature null": {"temperature": None},
    "top_p only": {"top_p": 0.5},
    "top_k and min_p": {"top_k": 10, "min_p": 0.1},
    "penalty and hot": {"repetition_penalty": 1.2, "temperature": 1.5},
}
TABLE = list(itertools.product(GENERATION_CONFIGS, REQUESTS, ("model", "openai")))


@pytest.fixture(scope="module")
def sglang_chat(ask_sglang: Any) -> list[dict[str, Any]]:
    cases = [
        {"generation_config": GENERATION_CONFIGS[g], "request": REQUESTS[r], "sampling_defaults": s}
        for g, r, s in TABLE
    ]
    return ask_sglang({"chat": cases})["chat"]


def _standin_defaults(tmp_path: Path, config: dict[str, Any] | None, sampling_defaults: str) -> dict[str, Any]:
    if config is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(config))
    return standin.model_default_sampling_params(str(tmp_path), sampling_defaults)


@pytest.mark.parametrize("case", TABLE, ids=[" / ".join(c) for c in TABLE])
def test_chat_sampling_resolution_matches_sglang(
    tmp_path: Path, sglang_chat: list[dict[str, Any]], case: tuple
) -> None:
    config_name, request_name, sampling_defaults = case
    real = sglang_chat[TABLE.index(case)]
    defaults = _standin_defaults(tmp_path, GENERATION_CONFIGS[config_name], sampling_defaults)
    assert defaults == real["defaults"]
    assert (standin.startup_line(defaults) if defaults else None) == real["log_line"]
    assert standin.resolve_chat_sampling(REQUESTS[request_name], defaults) == real["resolved"]


def test_table_covers_the_cases_the_issue_names() -> None:
    assert len(TABLE) >= 100
    assert {"no file", "null values"} <= set(GENERATION_CONFIGS)
    assert {"omitted", "temperature 0", "temperature 0.9", "top_p only"} <= set(REQUESTS)


def test_completions_never_use_the_model_defaults(ask_sglang: Any) -> None:
    bodies = list(REQUESTS.values())
    real = ask_sglang({"completion": bodies})["completion"]
    for body, answer in zip(bodies, real, strict=True):
        if "error" in answer:
            with pytest.raises(ValueError):
                standin.resolve_completion_sampling(body)
        else:
            assert standin.resolve_completion_sampling(body) == answer
    assert sum("error" in answer for answer in real) == 1  # only the explicit null is refused


# The exact-defaults proof held to the real code: planted generation_config.json files, merged with the managed
# defaults as the genconfig role merges them, then read by the real ModelConfig.get_default_sampling_params of
# sglang 0.5.23 with the lock's transformers. The servers' defaults are exactly the merged file's sampling keys, and
# the collection's proof (module_utils/sglang_sampling_defaults.py, defaults_errors) finds nothing wrong with them;
# with a transformers that fills its class defaults in (sglang issue 11574), the proof names every leaked key.
PLANTED: dict[str, dict[str, Any]] = {
    "without top_k": {"temperature": 1.0, "top_p": 1.0, "do_sample": True, "eos_token_id": 1},
    "with top_k": {"temperature": 1.0, "top_p": 1.0, "top_k": 20, "do_sample": True},
    "do_sample false": {"temperature": 0.0, "top_p": 1.0, "do_sample": False},
    "null values": {"temperature": None, "top_p": None, "top_k": None, "min_p": 0.05, "repetition_penalty": None},
    "deepseek upstream": json.loads((ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text()),
}
MANAGED_SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None}


@pytest.fixture(scope="module")
def exact_defaults(ask_sglang: Any) -> dict[str, Any]:
    merged = {name: sampling.merge(config, MANAGED_SAMPLING) for name, config in PLANTED.items()}
    cases = [{"generation_config": config, "request": {}, "sampling_defaults": "model"} for config in merged.values()]
    leaks = [{**case, "class_defaults": standin.TRANSFORMERS_CLASS_DEFAULTS} for case in cases]
    real = ask_sglang({"chat": cases + leaks})["chat"]
    return {"merged": merged, "real": real[: len(cases)], "leaked": real[len(cases) :]}


def _planted(exact_defaults: dict[str, Any], name: str, kind: str, model_dir: Path) -> tuple[dict, dict]:
    """The merged planted file (written into model_dir, for the stand-in) and the real code's answer for it."""
    merged = exact_defaults["merged"][name]
    (model_dir / "generation_config.json").write_text(sampling.render(merged))
    return merged, exact_defaults[kind][list(PLANTED).index(name)]


@pytest.mark.parametrize("name", PLANTED)
def test_a_merged_file_gives_the_servers_exactly_its_sampling_keys_and_the_proof_passes(
    exact_defaults: dict[str, Any], name: str, tmp_path: Path
) -> None:
    merged, real = _planted(exact_defaults, name, "real", tmp_path)
    assert real["defaults"] == sampling.sampling_of(merged)
    logged = sampling.startup_defaults(real["log_line"])
    assert sampling.defaults_errors(MANAGED_SAMPLING, logged, sampling.sampling_of(merged)) == []
    # The stand-in logs what the real code would for the same file.
    assert standin.model_default_sampling_params(str(tmp_path), "model") == real["defaults"]


@pytest.mark.parametrize("name", PLANTED)
def test_class_defaults_that_leak_into_the_servers_defaults_are_named_by_the_proof(
    exact_defaults: dict[str, Any], name: str, tmp_path: Path
) -> None:
    merged, leaked = _planted(exact_defaults, name, "leaked", tmp_path)
    on_disk = sampling.sampling_of(merged)
    extra = sorted(set(leaked["defaults"]) - set(on_disk))
    assert extra, leaked  # the real method keeps every non-None value to_dict() hands it
    errors = sampling.defaults_errors(MANAGED_SAMPLING, sampling.startup_defaults(leaked["log_line"]), on_disk)
    assert [error.split("=", 1)[0] for error in errors] == [k for k in leaked["defaults"] if k in extra]
    assert all("SGLang took it from transformers' GenerationConfig" in error for error in errors)
    # The lab stand-in's fault imitates exactly this.
    assert standin.model_default_sampling_params(str(tmp_path), "model", class_defaults=True) == leaked["defaults"]


# Native /generate: --preferred-sampling-params merged by TokenizerManager's own statement under the keys a request
# leaves out, then the real SamplingParams. The stand-in resolves as it does; the verification's check holds
# exactly when the request leaves the managed keys out; on the OpenAI routes the flag is inert (every key is set).
GENERATE_REQUESTS: dict[str, dict[str, Any]] = {
    "only a length": {"max_new_tokens": 16},
    "temperature 0": {"max_new_tokens": 16, "temperature": 0},
    "top_p only": {"top_p": 0.5},
    "everything": {"temperature": 0.9, "top_p": 0.8, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1},
}
PREFERRED_CASES: dict[str, dict[str, Any] | None] = {
    "managed": json.loads(PREFERRED),
    "with top_k": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
    "none": None,
}
# SamplingParams turns "every token" (-1) into this; the stand-in keeps -1, which samples the same.
TOP_K_ALL = 1 << 30


def _normal(resolved: dict[str, Any]) -> dict[str, Any]:
    """One spelling of the same sampling: SamplingParams writes greedy (temperature 0) as temperature 1.0 with
    top_k 1, and "every token" as TOP_K_ALL; the stand-in samples greedily at temperature 0 and keeps -1."""
    normal = dict(resolved)
    if float(normal["temperature"]) < 1e-6:
        normal.update(temperature=1.0, top_k=1)
    if normal["top_k"] in (-1, TOP_K_ALL):
        normal["top_k"] = -1
    return normal


@pytest.fixture(scope="module")
def sglang_generate(ask_sglang: Any) -> list[dict[str, Any]]:
    pairs = itertools.product(PREFERRED_CASES.values(), GENERATE_REQUESTS.values())
    cases = [{"preferred": preferred, "sampling_params": request} for preferred, request in pairs]
    return ask_sglang({"generate": cases})["generate"]


@pytest.mark.parametrize(
    ("preferred", "request_name"),
    list(itertools.product(PREFERRED_CASES, GENERATE_REQUESTS)),
    ids=[f"{p} / {r}" for p, r in itertools.product(PREFERRED_CASES, GENERATE_REQUESTS)],
)
def test_generate_resolution_matches_sglangs_own_merge(
    sglang_generate: list[dict[str, Any]], preferred: str, request_name: str
) -> None:
    index = list(itertools.product(PREFERRED_CASES, GENERATE_REQUESTS)).index((preferred, request_name))
    real = sglang_generate[index]
    mine = standin.resolve_generate_sampling(GENERATE_REQUESTS[request_name], PREFERRED_CASES[preferred])
    assert _normal(real["resolved"]) == _normal(mine)


def test_a_generate_request_without_sampling_params_gets_exactly_the_managed_defaults(
    sglang_generate: list[dict[str, Any]],
) -> None:
    managed = json.loads(PREFERRED)
    real = sglang_generate[0]  # managed / only a length
    assert {key: real["resolved"][key] for key in managed} == managed
    generated = {"status": 200, "resolved": real["resolved"]}
    asked = {"preferred": {"prefill": managed, "decode": managed}, "generated": generated}
    assert verdict.generate_failures(asked, managed, "h", "u") == []
    # Without the flag, /generate samples with SamplingParams' own defaults: the verification names it.
    unmanaged = sglang_generate[2 * len(GENERATE_REQUESTS)]  # none / only a length
    asked = {"preferred": {"prefill": None}, "generated": {"status": 200, "resolved": unmanaged["resolved"]}}
    found = verdict.generate_failures(asked, managed, "h", "u")
    assert len(found) == 2 and "preferred_sampling_params=null" in found[0] and "temperature=1.0" in found[1]


def test_the_preferred_params_are_inert_on_the_chat_route(sglang_chat: list[dict[str, Any]]) -> None:
    """Every chat request resolves all five keys before the tokenizer manager's merge, so nothing is left out for
    --preferred-sampling-params to fill (sglang issue 39096): the chat routes keep generation_config.json's defaults."""
    for answer in sglang_chat:
        assert set(answer["resolved"]) == set(sampling.SAMPLING_KEYS)
        assert all(value is not None for value in answer["resolved"].values())


# --- a PD pool across hosts (xPyD): the router's lists, held to both real parsers -------------------------------

# What both routers must read from a 3P1D pool's router line (tests/unit/test_plugin_utils_pools.py's XPYD, and the
# render of tests/contract/xpyd-render-hosts.yml): every prefill with its bootstrap port, every decode.
LISTS_3P1D = {
    "prefill_urls": [
        ["http://198.51.100.11:30000", 8998],
        ["http://198.51.100.12:30000", 8998],
        ["http://198.51.100.12:30002", 8999],
    ],
    "decode_urls": ["http://198.51.100.21:30001"],
}


def test_a_pools_router_lists_every_prefill_with_its_bootstrap_port_and_every_decode(ask_sglang, ask_smg) -> None:
    """3P1D (plugin_utils/sglang_pools.py): one --prefill URL BOOTSTRAP_PORT per prefill, one --decode URL per decode,
    as sglang-router 0.3.2 and smg 1.13.0 read them."""
    argv = router_argv(sglang_pool_members(XPYD, "pd-a"))
    expected = LISTS_3P1D
    for answer in (ask_sglang({"router_argvs": [argv]})["router"], ask_smg({"router_argvs": [argv]})["router"]):
        result = answer["results"][0]
        assert result["ok"], result["error"]
        assert {key: result["values"][key] for key in expected} == expected


# --- the single-host shape, byte for byte as before pools -------------------------------------------------------

# The units and env files of the production host and of a lab host as the collection rendered them before pools
# across hosts existed (main at 76bd000): the single-host shape must not move by a byte. One edit since, of the lab
# host's alone: its servers' release id (a0f5e028ce38e515 to d625cbf257d73755), which names the lab's
# sglang_runtime_release_no_compile: [servers] (its lab settings, not the shape).
SINGLE_HOST = HERE / "single_host"


@pytest.mark.parametrize("host", HOSTS)
def test_a_host_of_its_own_renders_byte_for_byte_as_before_pools(rendered: dict[str, Path], host: str) -> None:
    before = {path.name: path.read_bytes() for path in sorted((SINGLE_HOST / host).iterdir())}
    now = {path.name: path.read_bytes() for path in sorted(rendered[host].iterdir())}
    assert sorted(now) == sorted(before)
    for name, text in before.items():
        assert now[name] == text, name


# --- a pool across four hosts, rendered by the roles and parsed by the real SGLang and routers ------------------

POOL_UNITS = {
    "xpyd-p1": {"sglang-dsv4-prefill.service", "prefill.env", "sglang-dsv4.target"},
    "xpyd-p2": {
        "sglang-dsv4-prefill.service",
        "sglang-dsv4-prefill-b.service",
        "prefill.env",
        "prefill-b.env",
        "sglang-dsv4.target",
    },
    "xpyd-d1": {"sglang-dsv4-decode.service", "decode.env", "sglang-dsv4.target"},
    "xpyd-r1": {"sglang-dsv4-router.service", "router.env", "sglang-dsv4.target"},
}
POOL_SERVERS = (
    ("xpyd-p1", "prefill", "198.51.100.11", 30000, 8),
    ("xpyd-p2", "prefill", "198.51.100.12", 30000, 4),
    ("xpyd-p2", "prefill-b", "198.51.100.12", 30002, 4),
    ("xpyd-d1", "decode", "198.51.100.21", 30001, 8),
)


def test_each_host_of_a_pool_renders_only_its_own_services(rendered_pool: dict[str, Path]) -> None:
    assert {host: {path.name for path in rendered_pool[host].iterdir()} for host in POOL_HOSTS} == POOL_UNITS
    # The router of a host without servers waits for none of them (an empty After= would reset the unit's order).
    router = (rendered_pool["xpyd-r1"] / "sglang-dsv4-router.service").read_text()
    assert "\nAfter=\n" not in router and "After=network-online.target" in router
    target = (rendered_pool["xpyd-p2"] / "sglang-dsv4.target").read_text()
    assert "Wants=sglang-dsv4-prefill.service sglang-dsv4-prefill-b.service\n" in target


def test_a_pools_rendered_units_parse_under_the_real_sglang_and_both_routers(
    rendered_pool: dict[str, Path], ask_sglang: Any, ask_smg: Any, credentials: Path
) -> None:
    """Each server of the pool listens on its host's advertised address, with its own GPUs and bootstrap port;
    the pool's router lists every prefill with its bootstrap port and every decode, as sglang-router 0.3.2 and
    smg 1.13.0 read them from the rendered unit."""
    environment = {flags.PREFERRED_ENV: PREFERRED, flags.WEIGHT_ENV: WEIGHT_VERSION}
    servers = [
        flags_after_launcher(
            exec_start_argv(rendered_pool[host] / f"sglang-dsv4-{key}.service", credentials, environment)
        )
        for host, key, *_others in POOL_SERVERS
    ]
    router = flags_after_launcher(exec_start_argv(rendered_pool["xpyd-r1"] / "sglang-dsv4-router.service"))
    answer = ask_sglang({"server_argvs": servers, "router_argvs": [router]})
    for (host, key, address, port, tp_size), result in zip(POOL_SERVERS, answer["server"]["results"], strict=True):
        assert result["ok"], (host, key, result["error"])
        values = result["values"]
        assert (values["host"], values["port"], values["tp_size"]) == (address, port, tp_size), (host, key)
        assert values["disaggregation_mode"] == key.split("-")[0]
        assert values["sampling_defaults"] == "model" and values["api_key"] == "contract-test-key"
    # Every server of the pool agrees on what the KV cache crosses with (it crosses between any two of them).
    firsts = answer["server"]["results"][0]["values"]
    for result in answer["server"]["results"][1:]:
        assert {f: result["values"][f] for f in PD_EQUAL_FIELDS} == {f: firsts[f] for f in PD_EQUAL_FIELDS}
    expected = LISTS_3P1D
    for answered in (answer["router"], ask_smg({"router_argvs": [router]})["router"]):
        result = answered["results"][0]
        assert result["ok"], result["error"]
        assert {key: result["values"][key] for key in expected} == expected
