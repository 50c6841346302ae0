"""Keys out of quoted journal lines (module_utils/sglang_redact.py): by their values and by their shapes."""

from __future__ import annotations

import json

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_redact import MASK, redact, secrets_of

CLIENT = "client-key-0123456789abcdef"
ADMIN = "admin-key-fedcba9876543210zz"


@pytest.fixture
def credential_files(tmp_path):
    (tmp_path / "prefill").write_text(json.dumps({"api-key": CLIENT}))
    (tmp_path / "router").write_text(CLIENT + "\n")
    (tmp_path / "router-admin").write_text(f"dsv4-admin:operators:admin:{ADMIN}")
    return [str(tmp_path / name) for name in ("prefill", "router", "router-admin", "missing")]


def test_the_values_of_every_credential_file_are_found(credential_files):
    found = secrets_of(credential_files)
    assert CLIENT in found and ADMIN in found


@pytest.mark.parametrize(
    "line",
    [
        f"server_args={{'model_path': '/m', 'api_key': '{CLIENT}', 'admin_api_key': '{ADMIN}'}}",
        f"ServerArgs(api_key='{CLIENT}', admin_api_key=\"{ADMIN}\")",
        f"launch_router --api-key {CLIENT} --control-plane-api-keys dsv4-admin:operators:admin:{ADMIN}",
        f"curl -H 'Authorization: Bearer {CLIENT}' and --admin-api-key={ADMIN}",
        f"api_key={CLIENT}, then {ADMIN} alone",
    ],
)
def test_a_quoted_line_shows_neither_key(credential_files, line):
    masked = redact(line, secrets_of(credential_files))
    assert CLIENT not in masked and ADMIN not in masked and MASK in masked


@pytest.mark.parametrize(
    "line",
    [
        "server_args={'api_key': 'a-key-nobody-told-us-about'}",
        "--api-key another-unknown-key-value",
        '{"admin_api_key": "yet-another-unknown-one"}',
    ],
)
def test_a_key_shaped_value_is_masked_even_when_its_value_is_unknown(line):
    masked = redact(line)
    assert "unknown" not in masked and "nobody" not in masked and MASK in masked


def test_lines_without_keys_are_kept():
    line = "sglang-dsv4-decode.service: Main process exited, code=exited, status=1/FAILURE"
    assert redact(line, [CLIENT]) == line
