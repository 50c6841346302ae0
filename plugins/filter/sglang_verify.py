"""Filters for the post-rollout verification: how repetitive a text is, and SGLang's startup line."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import (
    defaults_errors,
    defaults_missing,
    startup_defaults,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_verdict import repetition


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_repetition": repetition,
            "sglang_startup_defaults": startup_defaults,
            "sglang_defaults_missing": defaults_missing,
            "sglang_defaults_errors": defaults_errors,
        }
