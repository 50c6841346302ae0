#!/usr/bin/python3
"""Merge managed sampling defaults into a model's generation_config.json.

One implementation, used twice: the sglang_generation_config module imports it during a rollout,
and the units' ExecStartPre runs this file as a script to heal a re-downloaded model before each
start (`sglang_sampling_defaults.py MANAGED_JSON TARGET_JSON`). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

# The keys SGLang reads from generation_config.json (ModelConfig.get_default_sampling_params),
# plus do_sample, which transformers and other readers of the file use to tell sampling from greedy.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def _is_number(value: Any) -> bool:
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
        if not _is_number(value):
            errors.append(f"{key}={value!r} must be a number ({wanted}), not {type(value).__name__}")
        elif not check(value):
            errors.append(f"{key}={value!r} must be {wanted}")
    temperature = sampling.get("temperature")
    if _is_number(temperature) and temperature == 0 and not allow_greedy:
        errors.append(
            "temperature=0 means greedy decoding, which makes DeepSeek-V4-Flash repeat itself; "
            "allow it explicitly if that is really wanted"
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


def load(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed config, raw text), or (None, None) when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None, None
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return config, text


def write_atomic(path: str, text: str, mode: int = 0o644, like: str | None = None) -> None:
    """Replace path with text in one rename; keeps the owner and mode of `like` when it exists."""
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".generation_config.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        if like and os.path.exists(like):
            stat = os.stat(like)
            os.chmod(temporary, stat.st_mode & 0o7777)
            os.chown(temporary, stat.st_uid, stat.st_gid)
        else:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: sglang_sampling_defaults.py MANAGED_JSON TARGET_GENERATION_CONFIG_JSON", file=sys.stderr)
        return 2
    managed, target = argv
    if heal(managed, target):
        print(f"sglang-dsv4: {target} had drifted from the managed sampling defaults; re-applied {managed}")
    else:
        print(f"sglang-dsv4: {target} holds the managed sampling defaults")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
