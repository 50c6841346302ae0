"""Filters that reach the collection's input rules (plugins/module_utils) from YAML: one copy of each rule."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_flags import choice_errors
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_inputs import (
    input_errors,
    is_loopback,
    removed_variable_errors,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import validate


def sglang_input_errors(
    values: dict[str, Any], secrets: list[str] | None = None, paths: list[str] | None = None
) -> list[str]:
    """Errors of the given variables (name -> value): control characters, names, managed flags, paths.

    secrets: names whose value is never shown; paths: names that must be absolute paths.
    """
    return input_errors(values, tuple(secrets or ()), tuple(paths or ()))


def sglang_removed_variables(names: list[str]) -> list[str]:
    """One error per variable that earlier versions had, naming its replacement."""
    return removed_variable_errors(list(names))


def sglang_sampling_errors(sampling: dict[str, Any], allow_greedy: bool = False, prefix: str = "") -> list[str]:
    """The sampling rules of the module and the healer (validate), with the variable prefix on each key."""
    return [f"{prefix}{error}" for error in validate(sampling, allow_greedy)]


def sglang_flag_errors(values: dict[str, Any]) -> list[str]:
    """Errors of the given variables (name -> value) whose managed flag takes one of a list (the flag table's)."""
    return choice_errors(values)


def sglang_is_loopback(address: Any) -> bool:
    """Whether only this host reaches the address (the collection's one loopback rule)."""
    return is_loopback(address)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_flag_errors": sglang_flag_errors,
            "sglang_input_errors": sglang_input_errors,
            "sglang_is_loopback": sglang_is_loopback,
            "sglang_removed_variables": sglang_removed_variables,
            "sglang_sampling_errors": sglang_sampling_errors,
        }
