"""Start a Python program with its keys read from systemd credentials, not from the command line.

    sglang_with_secret.py -m MODULE [ARGS...]     (as `python -m MODULE ARGS...`)
    sglang_with_secret.py SCRIPT.py [ARGS...]     (as `python SCRIPT.py ARGS...`)

sglang-router takes its keys only as flags (`--api-key` for clients and workers, `--control-plane-api-keys`
for the admin key of /workers, /flush_cache, ...), where every local user could read them in
/proc/PID/cmdline. This launcher, run by the unit, reads each credential that exists in
`$CREDENTIALS_DIRECTORY` (LoadCredential=, root-only files on disk) and appends its flag to the program's own
sys.argv before running it in this process: the program sees the flags, /proc/PID/cmdline does not.
Standard library only.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

# Credential name -> the flag it becomes.
CREDENTIAL_FLAGS = (("api-key", "--api-key"), ("admin-key", "--control-plane-api-keys"))


def secret_args() -> list[str]:
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    args: list[str] = []
    for name, flag in CREDENTIAL_FLAGS:
        if directory and Path(directory, name).is_file():
            args += [flag, Path(directory, name).read_text().strip()]
    return args


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
