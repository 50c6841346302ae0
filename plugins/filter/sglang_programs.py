"""The filter sglang_host_program: one of the collection's host programs by name (plugin_utils/sglang_programs.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_programs import host_program


def sglang_host_program(name: str, what: str = "content") -> str:
    """One host program by name: its text (what=content) or its path on the controller (what=path)."""
    return host_program(name, what)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_host_program": sglang_host_program}
