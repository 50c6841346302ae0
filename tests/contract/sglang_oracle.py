"""Asks the real sglang 0.5.23 / sglang-router 0.3.2 (or smg 1.13.0) what they make of our inputs.

Runs inside the contract venv (scripts/sglang-contract-venv.sh), never in the project's venv:
reads one JSON request on stdin, writes one JSON answer on stdout. Batched, because importing
sglang takes seconds.

Request keys (all optional):
  server_argvs: [[flag, ...], ...]   parsed with sglang.srt.server_args.prepare_server_args
  router_argvs: [[flag, ...], ...]   parsed with sglang_router.launch_router.parse_router_args
  router_package: "smg"              parse router_argvs with smg.launch_router instead (run in the smg venv)
  chat: [{generation_config: dict | null, sampling_defaults: str, request: dict, class_defaults: dict}, ...]
        (class_defaults: what a transformers release that fills its class defaults adds to to_dict())
  completion: [request dict, ...]
  generate: [{preferred: dict | null, sampling_params: dict}, ...]
        (native /generate: the server's --preferred-sampling-params and a request's sampling_params, merged by
        TokenizerManager's own code, then SamplingParams)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FIVE = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
REPORTED = (
    "model_path",
    "host",
    "port",
    "tp_size",
    "sampling_defaults",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "disaggregation_bootstrap_port",
    "kv_cache_dtype",
    "enable_metrics",
    "served_model_name",
    "api_key",
    "preferred_sampling_params",
    "weight_version",
    "revision",
    "dtype",
    "quantization",
    "load_format",
    "page_size",
)


def _options(add_cli_args: Any, **kwargs: Any) -> list[str]:
    parser = argparse.ArgumentParser()
    add_cli_args(parser, **kwargs)
    return sorted(opt for action in parser._actions for opt in action.option_strings)


def _aliases(add_cli_args: Any, **kwargs: Any) -> list[list[str]]:
    """Each option's strings together (an option and its aliases set the same value)."""
    parser = argparse.ArgumentParser()
    add_cli_args(parser, **kwargs)
    return [list(action.option_strings) for action in parser._actions if action.option_strings]


def _parse(parse: Any, argv: list[str], keys: tuple[str, ...] = REPORTED) -> dict[str, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parse(argv)
    except SystemExit as exit_:
        return {"ok": False, "status": exit_.code, "error": err.getvalue()[-800:]}
    except Exception as error:
        return {"ok": False, "status": None, "error": f"{type(error).__name__}: {error}"}
    return {"ok": True, "values": {k: getattr(parsed, k, None) for k in keys}}


def servers(argvs: list[list[str]]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    return {
        "options": _options(ServerArgs.add_cli_args),
        "aliases": _aliases(ServerArgs.add_cli_args),
        "results": [_parse(prepare_server_args, a) for a in argvs],
    }


def routers(argvs: list[list[str]], package: str = "sglang_router") -> dict[str, Any]:
    """sglang-router 0.3.2 (sglang_router) or smg 1.13.0 (smg, in its own venv): the same parser API."""
    parse_router_args = importlib.import_module(f"{package}.launch_router").parse_router_args
    RouterArgs = importlib.import_module(f"{package}.router_args").RouterArgs  # noqa: N806 - a class

    keys = (
        "prefill_urls",
        "decode_urls",
        "pd_disaggregation",
        "host",
        "port",
        "api_key",
        "prometheus_host",
        "prometheus_port",
        "tokenizer_path",
        "server_cert_path",
        "server_key_path",
    )
    results = [_parse(parse_router_args, argv, keys) for argv in argvs]
    return {
        "options": _options(RouterArgs.add_cli_args, use_router_prefix=False),
        "aliases": _aliases(RouterArgs.add_cli_args, use_router_prefix=False),
        "results": results,
    }


def _sglang_method(relative_path: str, class_name: str, name: str) -> Any:
    """One method of an SGLang class, compiled from SGLang's own source file.

    Importing sglang.srt.configs.model_config pulls in torchvision (multimodal helpers), which does not
    load beside the CPU torch on these machines; the method itself needs nothing from that module.
    """
    package = importlib.util.find_spec("sglang").submodule_search_locations[0]
    path = Path(package, relative_path)
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"Any": Any, "Dict": dict, "Optional": Any}
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]


def _load_generation_config(model_dir: str) -> Any:
    """sglang.srt.utils.hf_transformers.common.get_generation_config for a local, non-GGUF model."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_dir)
    except (FileNotFoundError, OSError):
        return None


def _with_class_defaults(config: Any, class_defaults: dict[str, Any]) -> Any:
    """The loaded GenerationConfig as a release that fills its class defaults into to_dict() hands it over: the
    file's values, and the class's where the file has none (sglang issue 11574)."""
    loaded = config.to_dict()
    filled = {**class_defaults, **{k: v for k, v in loaded.items() if v is not None}}
    return SimpleNamespace(to_dict=lambda: filled, **{k: getattr(config, k, None) for k in ("eos_token_id",)})


def chat(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    get_default_sampling_params = _sglang_method(
        "srt/configs/model_config.py", "ModelConfig", "get_default_sampling_params"
    )
    answers = []
    for case in cases:
        with tempfile.TemporaryDirectory() as model_dir:
            if case["generation_config"] is not None:
                Path(model_dir, "generation_config.json").write_text(json.dumps(case["generation_config"]))
            loaded = _load_generation_config(model_dir)
            if loaded is not None and case.get("class_defaults"):
                loaded = _with_class_defaults(loaded, case["class_defaults"])
            model_config = SimpleNamespace(sampling_defaults=case["sampling_defaults"], hf_generation_config=loaded)
        defaults = get_default_sampling_params(model_config)
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **case["request"])
        params = request.to_sampling_params(stop=[], model_generation_config=defaults)
        log_line = f"Using default chat sampling params from model generation config: {defaults}" if defaults else None
        answers.append({"defaults": defaults, "log_line": log_line, "resolved": {k: params[k] for k in FIVE}})
    return answers


def completion(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from sglang.srt.entrypoints.openai.protocol import CompletionRequest

    answers: list[dict[str, Any]] = []
    for body in requests:
        try:
            request = CompletionRequest(model="m", prompt="hi", **body)
        except ValueError as error:  # pydantic's ValidationError: the server answers 400
            answers.append({"error": str(error).splitlines()[0]})
            continue
        answers.append({k: getattr(request, k) for k in FIVE})
    return answers


def _preferred_merge() -> Any:
    """TokenizerManager._create_tokenized_object's merge of --preferred-sampling-params under a request's
    sampling_params (the `if self.preferred_sampling_params:` statement), compiled from SGLang's own source."""
    package = importlib.util.find_spec("sglang").submodule_search_locations[0]
    path = Path(package, "srt/managers/tokenizer_manager.py")
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TokenizerManager")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_create_tokenized_object")
    merge = next(
        n for n in ast.walk(method) if isinstance(n, ast.If) and "preferred_sampling_params" in ast.unparse(n.test)
    )
    return compile(ast.Module(body=[merge], type_ignores=[]), str(path), "exec")


def generate(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from sglang.srt.sampling.sampling_params import SamplingParams

    merge = _preferred_merge()
    answers = []
    for case in cases:
        scope: dict[str, Any] = {
            "self": SimpleNamespace(preferred_sampling_params=case["preferred"]),
            "obj": SimpleNamespace(sampling_params=case["sampling_params"]),
        }
        exec(merge, scope)  # noqa: S102 - SGLang's own statement
        params = SamplingParams(**scope["sampling_kwargs"])
        answers.append({"merged": scope["sampling_kwargs"], "resolved": {k: getattr(params, k) for k in FIVE}})
    return answers


def main() -> int:
    request = json.load(sys.stdin)
    answer: dict[str, Any] = {}
    with contextlib.redirect_stdout(sys.stderr):
        if "server_argvs" in request:
            answer["server"] = servers(request["server_argvs"])
        if "router_argvs" in request:
            answer["router"] = routers(request["router_argvs"], request.get("router_package", "sglang_router"))
        if "chat" in request:
            answer["chat"] = chat(request["chat"])
        if "completion" in request:
            answer["completion"] = completion(request["completion"])
        if "generate" in request:
            answer["generate"] = generate(request["generate"])
    json.dump(answer, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
