"""Runs the bad-input table (tests/bad_inputs.yml) as one ansible-playbook over many inventory aliases.

Each case becomes an alias of the same host with the case's variables as host variables; the tree callback
keeps each alias's last result, which for a refused case is the failure that stopped it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CASES: dict[str, list[dict[str, Any]]] = yaml.safe_load((ROOT / "tests/bad_inputs.yml").read_text())


def alias(index: int) -> str:
    return f"bad-{index:03d}"


def _rooted(value: Any) -> Any:
    """Case values may name files of the repository as @ROOT@/...: the playbook runs from an installed collection,
    so no Ansible variable points at the clone."""
    if isinstance(value, str):
        return value.replace("@ROOT@", str(ROOT))
    if isinstance(value, dict):
        return {k: _rooted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rooted(v) for v in value]
    return value


def write_inventory(path: Path, group: str, cases: list[dict[str, Any]], base: dict[str, Any]) -> None:
    hosts = {alias(i): {**base, **_rooted(case["vars"])} for i, case in enumerate(cases)}
    path.write_text(yaml.safe_dump({group: {"hosts": hosts}}, allow_unicode=True))


def run(playbook: str, inventories: list[str], workdir: Path, extra: list[str] | None = None) -> dict[str, Any]:
    """Run the playbook once; returns {"rc", "output", "failures": {alias: message}}."""
    tree = workdir / "tree"
    tree.mkdir(exist_ok=True)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), playbook, "--forks", "16"]
    for inventory in inventories:
        argv += ["-i", inventory]
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree,dsv4.sglang.sglang_preload",
        "ANSIBLE_CALLBACK_TREE_DIR": str(tree),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    }
    command = [*argv, *(extra or [])]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=900, check=False)
    output = out.stdout + out.stderr
    failures = {}
    for result in tree.iterdir():
        if re.search(rf"^(fatal|failed): \[{re.escape(result.name)}\]", output, re.M):
            failures[result.name] = str(json.loads(result.read_text()).get("msg", ""))
    return {"rc": out.returncode, "output": output, "failures": failures}


def mismatches(cases: list[dict[str, Any]], outcome: dict[str, Any]) -> list[str]:
    """Every case that was not refused with its expected message, or whose secret leaked."""
    problems = []
    for i, case in enumerate(cases):
        message = outcome["failures"].get(alias(i))
        if message is None:
            problems.append(f"{alias(i)} {case['vars']}: not refused")
        elif case["expect"] not in message:
            problems.append(f"{alias(i)} {case['vars']}: expected {case['expect']!r} in {message[:600]!r}")
        if case.get("secret") and case["secret"] in outcome["output"]:
            problems.append(f"{alias(i)}: the secret value appears in the output")
    return problems
