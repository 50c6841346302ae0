"""Filters for the post-rollout verification: how repetitive a text is, and SGLang's startup line."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    defaults_errors,
    defaults_missing,
    startup_defaults,
)


def sglang_repetition(text: str, n: int = 3) -> float:
    """Share of the text's word n-grams that repeat an earlier one: 0 for varied text, near 1 for a loop."""
    words = str(text).split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return round(1 - len(set(grams)) / len(grams), 3)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_repetition": sglang_repetition,
            "sglang_startup_defaults": startup_defaults,
            "sglang_defaults_missing": defaults_missing,
            "sglang_defaults_errors": defaults_errors,
        }
