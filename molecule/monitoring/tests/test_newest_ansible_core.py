"""The newest ansible-core as a second controller (scripts/newest-controller.sh: Debian trixie, Python 3.13,
tests/newest/requirements.txt), so that a break on the next release is seen before users see it.

It reuses this scenario's booted lab hosts: the unit tests, a syntax check of every playbook, then deploy.yml
twice onto dsv4-mon-2, a change and then a no-op. Runs last in the scenario (the change is its own).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import ROOT

CONTROLLER = str(ROOT / "scripts/newest-controller.sh")
CHANGE = '{"sglang_genconfig_temperature": 0.7}'


def newest(*command: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CONTROLLER, "run", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NEWEST_CONTROLLER_BIND": os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]},
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def inventory() -> str:
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")


def test_it_is_the_pinned_ansible_core_on_python_3_13() -> None:
    pinned = (ROOT / "tests/newest/requirements.txt").read_text()
    version = re.search(r"^ansible-core==(\S+)$", pinned, re.M).group(1)
    out = newest("ansible", "--version")
    assert out.returncode == 0, out.stderr
    assert f"core {version}]" in out.stdout and "python version = 3.13" in out.stdout


def test_unit_tests_pass() -> None:
    out = newest("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no", "tests/unit")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert re.search(r"\d+ passed", out.stdout)


def test_every_playbook_passes_the_syntax_check(inventory) -> None:
    playbooks = ["deploy.yml", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "playbooks").glob("*.yml"))]
    out = newest("ansible-playbook", "-i", inventory, "--syntax-check", *playbooks)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.count("playbook: ") == len(playbooks) >= 8


def test_deploy_changes_then_changes_nothing(inventory) -> None:
    first = newest("ansible-playbook", "-i", inventory, "deploy.yml", "--limit", "dsv4-mon-2", "-e", CHANGE)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert re.search(r"dsv4-mon-2\s*: ok=\d+\s+changed=[1-9]", first.stdout), first.stdout[-1500:]
    second = newest("ansible-playbook", "-i", inventory, "deploy.yml", "--limit", "dsv4-mon-2", "-e", CHANGE)
    assert second.returncode == 0, second.stdout[-3000:]
    assert re.search(r"dsv4-mon-2\s*: ok=\d+\s+changed=0\s", second.stdout), second.stdout[-1500:]
    assert "DEPRECATION" not in first.stdout + first.stderr + second.stdout + second.stderr
