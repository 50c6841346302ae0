"""Helpers of every scenario's lab tests: run a playbook of the repository as an operator would, read the lab keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def inventory() -> str:
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")


def playbook(name: str, *args: str, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """A playbook of the repository against molecule's instance, as an operator would run it."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory(), name, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", **(env or {})},
        timeout=timeout,
        check=False,
    )


def deploy(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return playbook("deploy.yml", *args, **kwargs)


def lab_secret(name: str) -> str:
    """A lab key, decrypted from the lab inventory with the lab-only vault password."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = (ROOT / "inventories/lab/group_vars/sglang_dsv4/keys.yml").read_text()
    vaulted = text.split(f"{name}: !vault |", 1)[1]
    lines = []
    for line in vaulted.splitlines()[1:]:
        if not line.startswith("          "):
            break
        lines.append(line.strip())
    password = (ROOT / "inventories/lab/vault-password.txt").read_bytes().strip()
    return VaultLib([("lab", VaultSecret(password))]).decrypt("\n".join(lines)).decode()


def text(run: subprocess.CompletedProcess) -> str:
    """All a run printed: the default callback writes failures to stderr."""
    return run.stdout + run.stderr


def recap(output: str) -> str:
    return output[output.rfind("PLAY RECAP") :]
