"""The router's launcher: its keys from systemd credentials, absent from /proc/PID/cmdline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "roles/sglang_common/files/sglang_with_secret.py"


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
    env = {**os.environ, "CREDENTIALS_DIRECTORY": str(credentials)}
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
        env={**os.environ, "CREDENTIALS_DIRECTORY": str(tmp_path)},
        check=False,
    )
    assert out.returncode == 0 and "json.tool" in out.stdout
