#!/usr/bin/python3
"""Wait until an SGLang /health URL answers 200, so systemd counts the unit as started only then.

Used as ExecStartPost: `sglang_wait_healthy.py URL TIMEOUT_SECONDS`. Exits 0 when healthy, 1 on timeout.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait(url: str, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if healthy(url):
            return True
        time.sleep(interval)
    return healthy(url)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: sglang_wait_healthy.py URL TIMEOUT_SECONDS", file=sys.stderr)
        return 2
    url, timeout = argv[0], float(argv[1])
    if wait(url, timeout):
        print(f"sglang-dsv4: {url} is healthy")
        return 0
    print(f"sglang-dsv4: {url} was not healthy within {timeout:g} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
