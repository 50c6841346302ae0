"""The collection's host-side helper: the command line of the helper set (roles/sglang_common's layout, helper_set).

Installed on each host beside the modules it runs (sglang_files.py, sglang_sampling_defaults.py, sglang_records.py,
sglang_metrics.py, sglang_rotation.py, sglang_redact.py, from plugins/module_utils, which the collection's modules
import too).
Standard library only:
- each server unit runs it before every start (ExecStartPre=+, as root):
    `heal STATUS_DIR MANAGED_JSON TARGET_JSON` puts the managed defaults back into a re-downloaded
    generation_config.json, and leaves heal.json in STATUS_DIR for the metrics;
- each unit runs `record RECORD_JSON INPUT...` before every start: what this start is made of (sglang_records.py);
- the monitoring role's timer runs `metrics STATUS_DIR OUT.prom MANAGED_JSON TARGET_JSON UNIT=ROLE...` every minute;
- the transient timer a drain arms runs `undrain-guard STATE_JSON` (sglang_rotation.py): it puts the host back into
  rotation once no rollout holds it and its services serve.
"""

from __future__ import annotations

import sys
import time

# The set's folder holds exactly the files the collection puts there: no bytecode cache beside them.
sys.dont_write_bytecode = True

try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import (
        UnsafeFileError,
        write_atomic,
        write_status,
    )
except ImportError:  # on a host, installed beside it (the helper set, roles/sglang_common)
    from sglang_files import UnsafeFileError, write_atomic, write_status  # type: ignore[no-redef]
try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_metrics import metrics
except ImportError:  # on a host, installed beside it (the helper set, roles/sglang_common)
    from sglang_metrics import metrics  # type: ignore[no-redef]
try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import UnreadableWeightsError, record
except ImportError:  # on a host, installed beside it (the helper set, roles/sglang_common)
    from sglang_records import UnreadableWeightsError, record  # type: ignore[no-redef]
try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_rotation import undrain_guard
except ImportError:  # on a host, installed beside it (the helper set, roles/sglang_common)
    from sglang_rotation import undrain_guard  # type: ignore[no-redef]
try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import heal
except ImportError:  # on a host, installed beside it (the helper set, roles/sglang_common)
    from sglang_sampling_defaults import heal  # type: ignore[no-redef]


USAGE = """usage: sglang_helper.py heal STATUS_DIR MANAGED_JSON TARGET_GENERATION_CONFIG_JSON
       sglang_helper.py record RECORD_JSON INPUT...
       sglang_helper.py metrics STATUS_DIR OUT_PROM MANAGED_JSON TARGET_GENERATION_CONFIG_JSON \
           UNIT=ROLE...
       sglang_helper.py undrain-guard STATE_JSON"""


def say(line: str, stream=None) -> None:
    """A line for the journal (the helper runs as a systemd ExecStartPre= command)."""
    (stream or sys.stdout).write(line + "\n")


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "heal":
        status_dir, managed, target = argv[1:]
        try:
            healed = heal(managed, target)
        except UnsafeFileError as error:
            say(f"sglang-dsv4: refusing to heal: {error}", sys.stderr)
            return 1
        write_status(status_dir, "heal.json", {"time": time.time(), "rewrote": healed, "path": target})
        if healed:
            say(f"sglang-dsv4: {target} had drifted from the managed sampling defaults; re-applied {managed}")
        else:
            say(f"sglang-dsv4: {target} holds the managed sampling defaults")
        return 0
    if len(argv) >= 3 and argv[0] == "record":
        try:
            entry = record(argv[1], argv[2:])
        except (UnsafeFileError, UnreadableWeightsError) as error:
            say(f"sglang-dsv4: refusing to start: {error}", sys.stderr)
            return 1
        say(f"sglang-dsv4: starting from inputs {entry['digest'][:12]}, sampling defaults {entry['defaults']}")
        return 0
    if len(argv) >= 5 and argv[0] == "metrics" and all("=" in unit for unit in argv[5:]):
        status_dir, out, managed, target = argv[1:5]
        units = dict(unit.split("=", 1) for unit in argv[5:])
        write_atomic(out, metrics(status_dir, managed, target, units), mode=0o644)
        return 0
    if len(argv) == 2 and argv[0] == "undrain-guard":
        say(f"sglang-dsv4 guard: {undrain_guard(argv[1])}")
        return 0
    say(USAGE, sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
