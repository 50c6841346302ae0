"""Fixtures for holding the rendered units and the lab stand-in to the real SGLang 0.5.23."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LAUNCHERS = (
    ("-m", "sglang.launch_server"),
    ("-m", "sglang_router.launch_router"),
    ("-m", "smg.launch_router"),
    ("sglang_lab_standin.py", "server"),
)


@pytest.fixture(scope="session")
def sglang_python() -> str:
    """The contract venv's python (created and cached by scripts/sglang-contract-venv.sh)."""
    given = os.environ.get("SGLANG_CONTRACT_PYTHON")
    if given:
        return given
    out = subprocess.run([str(ROOT / "scripts/sglang-contract-venv.sh")], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def smg_python() -> str:
    """The smg contract venv's python (smg 1.13.0 from the collection's lock; scripts/sglang-contract-venv.sh smg)."""
    given = os.environ.get("SMG_CONTRACT_PYTHON")
    if given:
        return given
    script = str(ROOT / "scripts/sglang-contract-venv.sh")
    out = subprocess.run([script, "smg"], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def smg_binary_strings(smg_python: str) -> str:
    """The real smg's compiled library as text: its route literals."""
    out = subprocess.run(
        [smg_python, "-c", "import smg, pathlib; print(pathlib.Path(smg.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
    )
    binary = next(Path(out.stdout.strip()).glob("smg_rs*.so"))
    return binary.read_bytes().decode("latin-1")


@pytest.fixture(scope="session")
def ask_smg(smg_python: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def ask(request: dict[str, Any]) -> dict[str, Any]:
        out = subprocess.run(
            [smg_python, str(HERE / "sglang_oracle.py")],
            input=json.dumps({**request, "router_package": "smg"}),
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)

    return ask


@pytest.fixture(scope="session")
def router_binary_strings(sglang_python: str) -> str:
    """The real sglang-router's compiled library as text: its route table, metric and label names are literals."""
    out = subprocess.run(
        [sglang_python, "-c", "import sglang_router, pathlib; print(pathlib.Path(sglang_router.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
    )
    binary = next(Path(out.stdout.strip()).glob("sglang_router_rs*.so"))
    return binary.read_bytes().decode("latin-1")


@pytest.fixture(scope="session")
def ask_sglang(sglang_python: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def ask(request: dict[str, Any]) -> dict[str, Any]:
        out = subprocess.run(
            [sglang_python, str(HERE / "sglang_oracle.py")],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)

    return ask


def exec_start_argv(
    unit_file: Path, credentials: Path | None = None, environment: dict[str, str] | None = None
) -> list[str]:
    """The ExecStart= command line of a unit file, split as systemd would.

    systemd replaces %d with the service's credentials directory; `credentials` stands in for it. A word that is
    ${NAME} becomes the value of NAME in the unit's environment (`environment`), as one argument.
    """
    line = next(x for x in unit_file.read_text().splitlines() if x.startswith("ExecStart="))
    words = [word.replace("%%", "%") for word in shlex.split(line.removeprefix("ExecStart="))]
    if credentials is not None:
        words = [str(credentials) + word[2:] if word.startswith("%d/") else word for word in words]
    for name, value in (environment or {}).items():
        words = [value if word == "${" + name + "}" else word for word in words]
    return words


def flags_after_launcher(argv: list[str]) -> list[str]:
    for first, second in LAUNCHERS:
        for i in range(len(argv) - 1):
            if argv[i].endswith(first) and argv[i + 1] == second:
                return argv[i + 2 :]
    raise AssertionError(f"no known launcher in {argv}")


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Units rendered by the roles for the production host and for a lab host: {host: folder}."""
    out = tmp_path_factory.mktemp("rendered")
    runs = {
        "dsv4-gpu-01": ["-i", "inventories/production", "-l", "dsv4-gpu-01"],
        # The lab's server lock is read from the repository, not from the lab wheelhouse (which only `make deploy` and
        # the molecule scenarios fill): rendering needs the lock, never the wheels.
        "lab-render": [
            "-i",
            "inventories/lab",
            "-i",
            str(HERE / "lab-render-hosts.yml"),
            "-l",
            "lab-render",
            "-e",
            f"sglang_runtime_server_lock={ROOT / 'roles/lab_hosts/files/locks/sglang-0.5.23-nodeps.txt'}",
        ],
    }
    for inventory in runs.values():
        render(inventory, out)
    return {host: out / host for host in runs}


def render(arguments: list[str], out: Path) -> None:
    """Runs tests/contract/render_units.yml with `arguments` (inventories, limit, extra vars) into `out`."""
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    result = subprocess.run(
        [playbook, *arguments, str(HERE / "render_units.yml"), "-e", f"render_dir={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


# An xPyD pool across four hosts (tests/contract/xpyd-render-hosts.yml), rendered in one run as deploy.yml's plan
# computes it: each host's own units, the router's lists from the pool.
POOL_HOSTS = ("xpyd-p1", "xpyd-p2", "xpyd-d1", "xpyd-r1")


@pytest.fixture(scope="session")
def rendered_pool(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Units and env files rendered by the roles for every host of the pool: {host: folder}."""
    out = tmp_path_factory.mktemp("rendered-pool")
    render(
        [
            *["-i", "inventories/production", "-i", str(HERE / "xpyd-render-hosts.yml"), "-l", "xpyd-*"],
            *["-e", f"sglang_runtime_server_lock={ROOT / 'inventories/production/locks/sglang-0.5.23.txt'}"],
        ],
        out,
    )
    return {host: out / host for host in POOL_HOSTS}
