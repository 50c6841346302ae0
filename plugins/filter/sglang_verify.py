"""Filters for the post-rollout verification: how repetitive a text is, and SGLang's startup line."""

from __future__ import annotations

import ast
import re
from typing import Any

STARTUP_LINE = re.compile(r"Using default chat sampling params from model generation config: (\{.*\})")


def sglang_repetition(text: str, n: int = 3) -> float:
    """Share of the text's word n-grams that repeat an earlier one: 0 for varied text, near 1 for a loop."""
    words = str(text).split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return round(1 - len(set(grams)) / len(grams), 3)


def sglang_startup_defaults(journal: str) -> dict[str, Any] | None:
    """The dict of SGLang's last 'Using default chat sampling params ...' line, or None when absent."""
    found = STARTUP_LINE.findall(str(journal))
    if not found:
        return None
    value = ast.literal_eval(found[-1])
    return value if isinstance(value, dict) else None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_repetition": sglang_repetition, "sglang_startup_defaults": sglang_startup_defaults}
