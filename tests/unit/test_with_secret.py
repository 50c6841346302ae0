"""The router's launcher: its keys from systemd credentials, absent from /proc/PID/cmdline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "host/programs/sglang_with_secret.py"
# The launcher imports the helper set's redaction: beside it on a host, from the collection here.
IMPORTS = {"PYTHONPATH": str(ROOT / ".collections")}


def run(tmp_path: Path, with_credential: bool, with_admin: bool = False) -> str:
    program = tmp_path / "program.py"
    program.write_text(
        "import sys, os\n"
        "cmdline = open(f'/proc/{os.getpid()}/cmdline').read().split('\\0')\n"
        "print(repr(sys.argv[1:]))\n"
        "print('KEY IN CMDLINE' if any('s3cret' in part or 'adm1n' in part for part in cmdline) else 'cmdline clean')\n"
    )
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    if with_credential:
        (credentials / "api-key").write_text("s3cret\n")
    if with_admin:
        (credentials / "admin-key").write_text("dsv4-admin:operators:admin:adm1n\n")
    env = {**os.environ, **IMPORTS, "CREDENTIALS_DIRECTORY": str(credentials)}
    out = subprocess.run(
        [sys.executable, str(LAUNCHER), str(program), "--port", "8000"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def test_key_reaches_the_program_but_not_the_command_line(tmp_path):
    out = run(tmp_path, with_credential=True)
    assert "['--port', '8000', '--api-key', 's3cret']" in out
    assert "cmdline clean" in out


def test_admin_key_becomes_control_plane_keys_and_stays_off_the_command_line(tmp_path):
    out = run(tmp_path, with_credential=True, with_admin=True)
    assert (
        "['--port', '8000', '--api-key', 's3cret', '--control-plane-api-keys', 'dsv4-admin:operators:admin:adm1n']"
        in out
    )
    assert "cmdline clean" in out


def test_without_credential_nothing_is_added(tmp_path):
    assert "['--port', '8000']" in run(tmp_path, with_credential=False)


def test_module_form_runs_a_module(tmp_path):
    out = subprocess.run(
        [sys.executable, str(LAUNCHER), "-m", "json.tool", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **IMPORTS, "CREDENTIALS_DIRECTORY": str(tmp_path)},
        check=False,
    )
    assert out.returncode == 0 and "json.tool" in out.stdout


CLIENT_KEY = "client-key-0123456789abcdef"
ADMIN_KEY = "admin-key-fedcba9876543210zz"


def launch(tmp_path: Path, program: str, credentials: dict[str, str]) -> subprocess.CompletedProcess:
    folder = tmp_path / "credentials"
    folder.mkdir()
    for name, text in credentials.items():
        (folder / name).write_text(text + "\n")
    script = tmp_path / "program.py"
    script.write_text(program)
    env = {**os.environ, **IMPORTS, "CREDENTIALS_DIRECTORY": str(folder)}
    return subprocess.run(
        [sys.executable, str(LAUNCHER), str(script)], env=env, capture_output=True, text=True, check=True
    )


def test_a_logged_server_args_line_never_shows_either_key(tmp_path):
    """SGLang's form of the line (engine.py: logger.info(f"server_args={dict}")), a handler configured after the
    launcher ran, the key given through the servers' --config credential (JSON) and the router's admin entry."""
    program = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr, format='%(message)s')\n"
        "log = logging.getLogger('sglang.srt.entrypoints.engine')\n"
        f"args = {{'model_path': '/m', 'api_key': {CLIENT_KEY!r}, 'admin_api_key': 'other-admin-secret-1'}}\n"
        "log.info(f'server_args={args}')\n"
        f"log.info('key %s and %s', {CLIENT_KEY!r}, {ADMIN_KEY!r})\n"
        "print('stdout untouched')\n"
    )
    out = launch(
        tmp_path,
        program,
        {"server-config.yaml": json.dumps({"api-key": CLIENT_KEY}), "admin-key": f"dsv4-admin:ops:admin:{ADMIN_KEY}"},
    )
    assert CLIENT_KEY not in out.stderr and ADMIN_KEY not in out.stderr
    assert "other-admin-secret-1" not in out.stderr
    assert "server_args={'model_path': '/m', 'api_key': '<redacted>', 'admin_api_key': '<redacted>'}" in out.stderr
    assert "key <redacted> and <redacted>" in out.stderr
    assert "stdout untouched" in out.stdout


def test_the_real_sglang_server_args_line_is_masked(tmp_path):
    """The real 0.5.23 code path: ServerArgs parsed by SGLang's own parser with --api-key and --admin-api-key, then
    engine.py's _server_args_for_logging, logged the way engine.py logs it."""
    python = os.environ.get("SGLANG_CONTRACT_PYTHON")
    if not python:
        import pytest

        pytest.skip("SGLANG_CONTRACT_PYTHON is not set (scripts/test.sh sets it)")
    # engine.py imports torchvision (not in the contract venv): its logging function and its log call are read from
    # its source and run here as written, against the real ServerArgs and the real redaction of watermark secrets.
    program = (
        "import ast, inspect, logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr, format='%(message)s')\n"
        "import sglang.srt.server_args as sa\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "from sglang.srt.sampling.watermarking.core import redact_watermark_secrets\n"
        "source = open(sa.__file__.replace('server_args.py', 'entrypoints/engine.py')).read()\n"
        "tree = ast.parse(source)\n"
        "function = next(n for n in tree.body if getattr(n, 'name', '') == '_server_args_for_logging')\n"
        "call = 'logger.info(f\"server_args={_server_args_for_logging(server_args)}\")'\n"
        "assert call in source, 'engine.py no longer logs server_args in the form this test holds'\n"
        "scope = {'redact_watermark_secrets': redact_watermark_secrets, 'ServerArgs': sa.ServerArgs,"
        " 'Dict': dict, 'Any': object, 'logger': logging.getLogger('sglang.srt.entrypoints.engine')}\n"
        "exec(compile(ast.Module([function], []), 'engine.py', 'exec'), scope)\n"
        "server_args = prepare_server_args(['--model-path', '/m',"
        f" '--api-key', {CLIENT_KEY!r}, '--admin-api-key', {ADMIN_KEY!r}])\n"
        "assert server_args.api_key and server_args.admin_api_key\n"
        "exec(call, scope, {'server_args': server_args})\n"
    )
    folder = tmp_path / "credentials"
    folder.mkdir()
    (folder / "server-config.yaml").write_text(json.dumps({"api-key": CLIENT_KEY}))
    script = tmp_path / "program.py"
    script.write_text(program)
    env = {**os.environ, **IMPORTS, "CREDENTIALS_DIRECTORY": str(folder)}
    out = subprocess.run(
        [python, str(LAUNCHER), str(script)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "server_args={" in out.stderr
    assert CLIENT_KEY not in out.stderr and ADMIN_KEY not in out.stderr
    assert "'api_key': '<redacted>'" in out.stderr and "'admin_api_key': '<redacted>'" in out.stderr
