"""Wait until a service's health URL answers 200, so systemd counts the unit as started only then.

Servers are asked /health; the router /readiness (200 only once its workers are healthy; its /health answers
200 with no worker at all). A router with TLS is asked over https on this host, without checking the
certificate (it is the router's own, on an address of this host).

Used as ExecStartPost: `sglang_wait_healthy.py URL TIMEOUT_SECONDS [$MAINPID]`. Exits 0 when healthy, 1 on
timeout or as soon as the main process is gone (systemd would otherwise let a dead server's health gate run
until TimeoutStartSec).
"""

from __future__ import annotations

import os
import ssl
import sys
import time
import urllib.error
import urllib.request


def healthy(url: str) -> bool:
    context = ssl._create_unverified_context() if url.startswith("https://") else None  # noqa: S323
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def alive(pid: int | None) -> bool:
    """Whether the main process still exists.

    Asked with kill(pid, 0), not through /proc: the unit has ProtectProc=invisible, and right after the fork
    (when systemd starts ExecStartPost= for Type=simple) the main process still belongs to root, so its /proc
    entry is hidden from this check, which runs as the service user. A process of another user answers EPERM.
    """
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait(url: str, timeout: float, pid: int | None = None, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        if healthy(url):
            return True
        time.sleep(interval)
    return alive(pid) and healthy(url)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: sglang_wait_healthy.py URL TIMEOUT_SECONDS [MAINPID]", file=sys.stderr)
        return 2
    url, timeout = argv[0], float(argv[1])
    pid = int(argv[2]) if len(argv) == 3 and argv[2].isdigit() else None
    if wait(url, timeout, pid):
        print(f"sglang-dsv4: {url} is healthy")
        return 0
    why = "its main process exited" if not alive(pid) else f"not healthy within {timeout:g} s"
    print(f"sglang-dsv4: {url}: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
