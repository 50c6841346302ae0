"""One HTTP call from a host to a service on it (a server's or the router's API): bounded, never raising.

The modules that look at the services (the plan's light proof, the restart's wait, the drain, the verification)
all call through here. Certificates are not checked: the router presents its own on an address of this host, and
what is checked is whether it answers, not who it is.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request

# The one "no answer" that proves a service holds no request: its port is closed.
NOTHING_LISTENS = "no answer (nothing listens)"

# The standard library's opener, without proxies (the services are on this host), built once per module run. Not
# ansible.module_utils.urls.open_url: it builds a TLS context and loads the system's CA store for every request, plain
# HTTP too (about 20 ms of a host's CPU each), and the restart's and the drain's waits ask every 0.2 s.
_OPENERS: dict[str, urllib.request.OpenerDirector] = {}


def _opener(url: str) -> urllib.request.OpenerDirector:
    """The opener for this URL's scheme: for https, one TLS context that checks no certificate (see above)."""
    scheme = "https" if url.lower().startswith("https:") else "http"
    if scheme not in _OPENERS:
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if scheme == "https":
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        _OPENERS[scheme] = urllib.request.build_opener(*handlers)
    return _OPENERS[scheme]


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
    request = urllib.request.Request(
        url, data=data, headers=headers, method=method or ("POST" if data is not None else "GET")
    )
    try:
        with _opener(url).open(request, timeout=timeout) as response:
            return response.status, "OK", response.read()
    except urllib.error.HTTPError as error:
        return error.code, f"HTTP Error {error.code}: {error.reason}", b""
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ConnectionRefusedError) or isinstance(error, ConnectionRefusedError):
            return 0, f"{NOTHING_LISTENS}: {reason}", b""
        return 0, f"no answer: {reason}", b""
