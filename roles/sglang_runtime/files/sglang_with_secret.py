#!/usr/bin/python3
"""Start a Python program with `--api-key` read from a systemd credential, not from the command line.

    sglang_with_secret.py -m MODULE [ARGS...]     (as `python -m MODULE ARGS...`)
    sglang_with_secret.py SCRIPT.py [ARGS...]     (as `python SCRIPT.py ARGS...`)

sglang-router takes its worker API key only as `--api-key` on its command line, where every local user can
read it in /proc/PID/cmdline. This launcher, run by the unit, reads `$CREDENTIALS_DIRECTORY/api-key`
(LoadCredential=, a root-only file on disk) and appends `--api-key KEY` to the program's own sys.argv
before running it in this process: the program sees the flag, /proc/PID/cmdline does not. Without the
credential it adds nothing. Standard library only.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def secret_args() -> list[str]:
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory or not Path(directory, "api-key").is_file():
        return []
    return ["--api-key", Path(directory, "api-key").read_text().strip()]


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:], *secret_args()]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv:
        sys.argv = [argv[0], *argv[1:], *secret_args()]
        runpy.run_path(argv[0], run_name="__main__")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
