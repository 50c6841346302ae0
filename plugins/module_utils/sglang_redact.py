"""Keys out of what a run prints and what a service logs: part of the helper set (plugin_utils/sglang_programs.py).

The restart module masks the journal lines a failure message quotes; the services' launcher
(host/programs/sglang_with_secret.py, installed beside the helper set) masks every log record of the
process it starts.

Two nets: the values of the keys themselves (read on the host from the credential files the services load), and
the shapes a key takes in SGLang's and the router's own output (`'api_key': '...'` in the `server_args=` line,
`api_key=...`, `--api-key ...`, `--control-plane-api-keys ...`, `Bearer ...`), whatever its value.
Standard library only.
"""

from __future__ import annotations

import json
import re

try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import read_regular
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    from sglang_files import read_regular  # type: ignore[no-redef]

MASK = "<redacted>"
# A value shorter than this is no key of this collection (the roles refuse keys under 16 characters).
MIN_SECRET = 8
SHAPES = (
    # 'api_key': 'K' / "admin_api_key": "K" (a dict's repr or JSON: SGLang's server_args= line)
    re.compile(r"""(?P<head>['"](?:admin_)?api_keys?['"]\s*:\s*)(?P<value>'[^']*'|"[^"]*")"""),
    # api_key=K, admin_api_key=K (a dataclass repr, a log line)
    re.compile(r"""(?P<head>\b(?:admin_)?api_keys?=)(?P<value>'[^']*'|"[^"]*"|[^\s,)]+)"""),
    # --api-key K, --admin-api-key=K, --control-plane-api-keys K (a command line)
    re.compile(r"""(?P<head>--(?:admin-)?(?:control-plane-)?api-keys?[=\s]+)(?P<value>'[^']*'|"[^"]*"|\S+)"""),
    re.compile(r"""(?P<head>\bBearer\s+)(?P<value>\S+)""", re.IGNORECASE),
)


def secrets_of(paths: list[str]) -> list[str]:
    """The key values held by these credential files: the whole text, each string of a JSON object, and the key of
    an `id:name:role:key` entry (what --control-plane-api-keys takes)."""
    found: set[str] = set()
    for path in paths:
        try:
            raw = read_regular(path, limit=1 << 16)
        except (OSError, ValueError):
            continue
        text = (raw or b"").decode(errors="replace").strip()
        candidates = [text]
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            candidates += [v for v in parsed.values() if isinstance(v, str)]
        candidates += [c.split(":", 3)[3] for c in list(candidates) if c.count(":") >= 3]
        found.update(c for c in candidates if len(c) >= MIN_SECRET)
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """The text with every known key value and every key-shaped value masked."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, MASK)
    for shape in SHAPES:
        text = shape.sub(lambda m: m.group("head") + _masked(m.group("value")), text)
    return text


def _masked(value: str) -> str:
    """The mask in the value's own quotes, so that a logged dict still reads as one."""
    return f"{value[0]}{MASK}{value[0]}" if value[:1] in ("'", '"') else MASK
