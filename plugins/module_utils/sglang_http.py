"""One HTTP call from a host to a service on it (a server's or the router's API): bounded, never raising.

The modules that look at the services (the plan's light proof, the restart's wait, the drain, the verification)
all call through here. Certificates are not checked: the router presents its own on an address of this host, and
what is checked is whether it answers, not who it is.
"""

from __future__ import annotations

import json
import urllib.error

from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url

# The one "no answer" that proves a service holds no request: its port is closed.
NOTHING_LISTENS = "no answer (nothing listens)"


def call(
    url: str, method: str | None = None, key: str = "", body: dict | None = None, timeout: float = 10
) -> tuple[int, str, bytes]:
    """(status, message, body) of one request, JSON `body` if given (POST unless `method` says otherwise), the
    bearer `key` if not empty; status 0 when nothing answered, with a message that starts with NOTHING_LISTENS only
    when the connection was refused (no process on that port), not when it timed out or broke."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with open_url(
            url,
            method=method or ("POST" if data is not None else "GET"),
            data=data,
            headers=headers,
            timeout=timeout,
            validate_certs=False,
            use_proxy=False,
        ) as response:
            return response.status, "OK", response.read()
    except urllib.error.HTTPError as error:
        return error.code, f"HTTP Error {error.code}: {error.reason}", b""
    except (urllib.error.URLError, OSError, UrlConnectionError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ConnectionRefusedError) or isinstance(error, ConnectionRefusedError):
            return 0, f"{NOTHING_LISTENS}: {reason}", b""
        return 0, f"no answer: {reason}", b""
