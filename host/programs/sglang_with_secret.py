"""Start a Python program with its keys read from systemd credentials, not from the command line, and kept out of
what it logs.

    sglang_with_secret.py -m MODULE [ARGS...]     (as `python -m MODULE ARGS...`)
    sglang_with_secret.py SCRIPT.py [ARGS...]     (as `python SCRIPT.py ARGS...`)

sglang-router takes its keys only as flags (`--api-key` for clients and workers, `--control-plane-api-keys`
for the admin key of /workers, /flush_cache, ...), where every local user could read them in
/proc/PID/cmdline. This launcher, run by the unit, reads each credential that exists in
`$CREDENTIALS_DIRECTORY` (LoadCredential=, root-only files on disk) and appends its flag to the program's own
sys.argv before running it in this process: the program sees the flags, /proc/PID/cmdline does not.

SGLang 0.5.23 logs every resolved server argument at each start (`server_args={...}` at INFO, in
srt/entrypoints/engine.py, before any worker process is spawned), the client key among them (`api_key`,
`admin_api_key`), and the journal keeps what a service logs for the `adm` and `systemd-journal` groups and for
log shippers. Before the program runs, this launcher installs a log-record factory in the process that masks
every credential's value, and any value in a key's shape (`'api_key': '...'`), in every record's message, whatever
handler SGLang configures later (sglang_redact.py of the helper set, beside it). Standard library only.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from pathlib import Path

# Installed beside the helper set (roles/sglang_common's layout): the one redaction of keys, shared with the modules.
sys.dont_write_bytecode = True
try:  # on the controller (the tests)
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_redact import redact, secrets_of
except ImportError:  # on a host, installed beside it (the helper set, roles/sglang_common)
    from sglang_redact import redact, secrets_of  # type: ignore[no-redef]

# Credential name -> the flag it becomes.
CREDENTIAL_FLAGS = (("api-key", "--api-key"), ("admin-key", "--control-plane-api-keys"))
# Files of the credentials folder that hold keys (the TLS files hold no key a log could show).
KEY_CREDENTIALS = ("api-key", "admin-key", "server-config.yaml")


def credentials() -> dict[str, str]:
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory or not Path(directory).is_dir():
        return {}
    return {path.name: str(path) for path in sorted(Path(directory).iterdir()) if path.is_file()}


def secret_args(found: dict[str, str]) -> list[str]:
    args: list[str] = []
    for name, flag in CREDENTIAL_FLAGS:
        if name in found:
            args += [flag, Path(found[name]).read_text().strip()]
    return args


def install_redaction(secrets: list[str]) -> None:
    """Every log record created in this process from now on carries its message with the keys masked."""
    make = logging.getLogRecordFactory()

    def redacted(*args, **kwargs) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return record
        masked = redact(message, secrets)
        if masked != message:
            record.msg, record.args = masked, None
        return record

    logging.setLogRecordFactory(redacted)


def main(argv: list[str]) -> int:
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        print(__doc__, file=sys.stderr)
        return 2
    found = credentials()
    install_redaction(secrets_of([path for name, path in found.items() if name in KEY_CREDENTIALS]))
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:], *secret_args(found)]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = [argv[0], *argv[1:], *secret_args(found)]
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
