"""Helpers for the monitoring scenario's lab tests: the lab hosts' ports, Prometheus's HTTP API, the lab keys."""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import ROOT, lab_secret, playbook, recap, text

__all__ = ["ROOT", "lab_secret", "playbook", "recap", "text"]
# Port blocks from molecule.yml: router +0, prefill +1, decode +2, bootstrap +3, router metrics +4,
# Prometheus +5, node_exporter +6.
GPU_HOSTS = {"dsv4-mon-1": 28010, "dsv4-mon-2": 28020}
CENTRAL = ("dsv4-mon-3", 28030)
GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"


def prometheus(port_base: int) -> str:
    return f"http://127.0.0.1:{port_base + 5}"


def api(port_base: int, path: str, **params: str) -> dict:
    url = f"{prometheus(port_base)}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def query(port_base: int, expr: str) -> list[dict]:
    return api(port_base, "query", query=expr)["result"]


def wait_for(check, timeout: float, what: str, every: float = 2.0):
    """Polls check() until it returns something truthy; fails naming what it waited for."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def chat(port_base: int, key: str, content: str = "hello") -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port_base}/v1/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 8}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


def ssh(name: str, command: str) -> str:
    """A command on a lab host, as root (the lab key from molecule's instance config)."""
    import os
    import subprocess

    import yaml

    hosts = {i["instance"]: i for i in yaml.safe_load(Path(os.environ["MOLECULE_INSTANCE_CONFIG"]).read_text())}
    target = hosts[name]
    out = subprocess.run(
        [
            "ssh",
            "-i",
            target["identity_file"],
            "-p",
            str(target["port"]),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            f"root@{target['address']}",
            command,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
