"""The managed sampling defaults: part of the helper set (plugin_utils/sglang_programs.py, HELPER_MODULES).

What SGLang reads from generation_config.json, the rules of each value, the merge that keeps every other key and
the key order, the heal that puts the defaults back into a re-downloaded file, and the startup line that says
which defaults a server really uses. Standard library only: the modules import it, and each server start runs it
on the host through the helper (sglang_helper.py heal).
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import load, write_atomic
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    from sglang_files import load, write_atomic  # type: ignore[no-redef]


# The keys SGLang reads from generation_config.json (ModelConfig.get_default_sampling_params),
# plus do_sample, which transformers and other readers of the file use to tell sampling from greedy.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# SGLang 0.5.23 (srt/sampling/sampling_params.py, _SAMPLING_EPS): a temperature in [0, 1e-6) is greedy decoding.
GREEDY_BELOW = 1e-6


def _kind(value: Any) -> str:
    """The plain type name (newer ansible-core hands over tagged subclasses of str, dict, ...)."""
    return next((t.__name__ for t in (bool, int, float, str, list, dict) if isinstance(value, t)), type(value).__name__)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate(sampling: dict[str, Any], allow_greedy: bool = False) -> list[str]:
    """Errors for the given sampling values; keys with None are unmanaged and skipped."""
    rules = {
        "temperature": (lambda v: 0 <= v <= 2, "between 0 and 2"),
        "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
        "top_k": (lambda v: isinstance(v, int) and (v == -1 or v >= 1), "an integer, -1 or at least 1"),
        "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
        "repetition_penalty": (lambda v: v > 0, "above 0"),
    }
    errors = []
    for key, value in sampling.items():
        if key not in rules:
            errors.append(f"{key} is not a sampling default SGLang reads (one of {', '.join(SAMPLING_KEYS)})")
            continue
        if value is None:
            continue
        check, wanted = rules[key]
        if not is_number(value):
            errors.append(f"{key}={value!r} must be a number ({wanted}), not {_kind(value)}")
        elif not math.isfinite(value):
            # JSON has no Infinity or NaN: Python would write them as bare words other readers refuse.
            errors.append(f"{key}={value!r} must be a finite number ({wanted})")
        elif not check(value):
            errors.append(f"{key}={value!r} must be {wanted}")
    temperature = sampling.get("temperature")
    if is_number(temperature) and 0 <= temperature < GREEDY_BELOW and not allow_greedy:
        errors.append(
            f"temperature={temperature!r} means greedy decoding (SGLang samples greedily below {GREEDY_BELOW}), which"
            " makes DeepSeek-V4-Flash repeat itself; allow it explicitly if that is really wanted"
        )
    return errors


def merge(config: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    """The config with the managed keys set; every other key and the key order are kept."""
    merged = dict(config)
    for key in SAMPLING_KEYS:
        if sampling.get(key) is not None:
            merged[key] = sampling[key]
    temperature = sampling.get("temperature")
    if temperature is not None:
        merged["do_sample"] = temperature > 0
    return merged


def render(config: dict[str, Any]) -> str:
    """The stable text form: a re-run over its own output is byte-identical."""
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def heal(managed_path: str, target_path: str) -> bool:
    """Re-apply the managed defaults to target; True when the file had drifted and was rewritten."""
    with open(managed_path, encoding="utf-8") as handle:
        sampling = json.load(handle)
    config, text = load(target_path)
    wanted = render(merge(config or {}, sampling))
    if wanted == text:
        return False
    write_atomic(target_path, wanted, like=target_path)
    return True


STARTUP_LINE = re.compile(r"Using default chat sampling params from model generation config: (\{.*\})")


def startup_defaults(journal: str) -> dict[str, Any] | None:
    """The dict of SGLang's last 'Using default chat sampling params ...' line, or None when absent."""
    found = STARTUP_LINE.findall(str(journal))
    if not found:
        return None
    try:
        value = ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def defaults_missing(expected: dict[str, Any], logged: dict[str, Any] | None) -> dict[str, Any]:
    """The expected (non-null) defaults that the logged line does not hold with the same value."""
    logged = logged or {}
    return {k: v for k, v in expected.items() if v is not None and (k not in logged or logged[k] != v)}


def defaults_errors(
    expected: dict[str, Any], logged: dict[str, Any] | None, on_disk: dict[str, Any] | None = None
) -> list[str]:
    """What is wrong with the defaults a server logged at its start, against exactly what the collection intends:
    each expected (non-null) default with its value, and no other key than generation_config.json holds
    (`on_disk`: its sampling keys; None when unknown, the expected set alone). A key the file does not set came
    from transformers' GenerationConfig, which fills class defaults in some releases (sglang issue 11574)."""
    if logged is None:
        return ["no 'Using default chat sampling params' line at its current start"]
    errors = [
        f"{key}: expected {value!r}, logged {logged[key]!r}"
        if key in logged
        else f"{key}: expected {value!r}, not logged"
        for key, value in expected.items()
        if value is not None and logged.get(key, _ABSENT) != value
    ]
    exact = dict(on_disk) if on_disk is not None else {k: v for k, v in expected.items() if v is not None}
    for key, value in logged.items():
        if key in exact:
            if exact[key] != value and expected.get(key) is None:
                errors.append(f"{key}={value!r}: generation_config.json says {exact[key]!r}")
        else:
            errors.append(
                f"{key}={value!r} is in the server's defaults, but generation_config.json sets no {key}: SGLang took"
                " it from transformers' GenerationConfig (a class default its to_dict() fills in), not from the file"
            )
    return errors


_ABSENT = object()


def sampling_of(config: dict[str, Any] | None) -> dict[str, Any]:
    """The sampling keys a generation_config.json holds (those SGLang reads), without the unset ones."""
    return {k: config[k] for k in SAMPLING_KEYS if config and config.get(k) is not None}


def in_sync(config: dict[str, Any] | None, sampling: dict[str, Any]) -> bool:
    """Whether the file's content already holds the managed defaults (what a merge would leave unchanged)."""
    return config is not None and merge(config, sampling) == config
