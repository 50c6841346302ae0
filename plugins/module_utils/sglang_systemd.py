"""systemd's view of a unit, parsed in one place: part of the helper set (plugin_utils/sglang_programs.py).

`systemctl show` prints a unit's properties as NAME=VALUE lines, and several units as blocks separated by an empty
line. Every reader of the collection (the plan's read, the restart's and the verification's waits, the drain, the
host's guard, the monitoring's timer) asks through show_argv() and reads the answer with properties() or units().
Standard library only.
"""

from __future__ import annotations


def unit_id(name: str) -> str:
    """The Id systemd gives a unit named without its suffix (a service), or the name itself if it has one."""
    return name if "." in name else f"{name}.service"


def show_argv(units: list[str], props: tuple[str, ...] | list[str], timestamp: str = "") -> list[str]:
    """The `systemctl show` command line for these units and properties (timestamps as `timestamp`, e.g. unix)."""
    return [
        "systemctl",
        "show",
        *([f"--timestamp={timestamp}"] if timestamp else []),
        *units,
        *(f"--property={p}" for p in props),
    ]


def properties(out: str) -> dict[str, str]:
    """One unit's properties from `systemctl show` output (a value may hold '=')."""
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def units(out: str) -> dict[str, dict[str, str]]:
    """Several units' properties, by their Id (which the command must ask for), from one `systemctl show`."""
    found = {}
    for block in out.strip().split("\n\n"):
        props = properties(block)
        found[props.get("Id", "")] = props
    return found
