"""The rendered and running state of one lab host after `deploy.yml` (molecule verify)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLANTED = json.loads((ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text())
MODEL = "/srv/models/DeepSeek-V4-Flash"
GENCONFIG = f"{MODEL}/generation_config.json"
SERVERS = ("prefill", "decode")
UNITS = ("prefill", "decode", "router")


def journal(host, unit: str) -> str:
    return host.run(f"journalctl --no-pager -n 40 -u sglang-dsv4-{unit}.service").stdout


def test_pid1_is_systemd_and_sshd_runs(host):
    assert host.process.get(pid=1).comm == "systemd"
    assert host.service("ssh").is_running
    assert host.run("systemctl is-system-running").stdout.strip() in ("running", "degraded")


def test_generation_config_has_the_defaults_and_keeps_everything_else(host):
    merged = json.loads(host.file(GENCONFIG).content_string)
    assert merged["temperature"] == 0.6
    assert merged["top_p"] == 0.95
    assert merged["do_sample"] is True
    untouched = {k: v for k, v in PLANTED.items() if k != "do_sample"}
    assert {k: merged[k] for k in untouched} == untouched
    assert set(merged) == set(PLANTED) | {"temperature", "top_p"}


def test_original_is_kept_unchanged(host):
    orig = host.file(GENCONFIG + ".orig")
    assert orig.exists
    assert json.loads(orig.content_string) == PLANTED
    assert orig.content_string == (ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text()


def test_generation_config_owner_and_mode(host):
    f = host.file(GENCONFIG)
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)


@pytest.mark.parametrize("unit", UNITS)
def test_unit_is_loaded_enabled_active_and_runs_as_service_user(host, unit):
    service = host.service(f"sglang-dsv4-{unit}")
    props = service.systemd_properties
    assert props["LoadState"] == "loaded"
    assert service.is_enabled
    assert service.is_running, journal(host, unit)
    assert props["User"] == "sglang"
    pid = int(props["MainPID"])
    assert host.process.get(pid=pid).user == "sglang"


@pytest.mark.parametrize("unit", SERVERS)
def test_server_command_line_has_the_pd_and_sampling_flags(host, unit):
    exec_start = host.service(f"sglang-dsv4-{unit}").systemd_properties["ExecStart"]
    for flag in (
        "--sampling-defaults model",
        f"--disaggregation-mode {unit}",
        "--disaggregation-transfer-backend mooncake",
        "--host 127.0.0.1",
        "--kv-cache-dtype fp8_e4m3",
        "--enable-metrics",
        "--tp-size 4",
        f"--model-path {MODEL}",
    ):
        assert flag in exec_start
    assert ("--disaggregation-bootstrap-port" in exec_start) == (unit == "prefill")


@pytest.mark.parametrize("unit,gpus", [("prefill", "0,1,2,3"), ("decode", "4,5,6,7")])
def test_server_gpu_split_and_numa_binding(host, unit, gpus):
    env = host.file(f"/etc/sglang-dsv4/{unit}.env")
    assert f"CUDA_VISIBLE_DEVICES={gpus}" in env.content_string
    assert (env.user, env.mode) == ("root", 0o644)
    props = host.service(f"sglang-dsv4-{unit}").systemd_properties
    assert props["NUMAPolicy"] == "bind"
    assert props["NUMAMask"] == "0"
    assert props["PartOf"] == "sglang-dsv4.target"


def test_router_fronts_prefill_and_decode_and_survives_server_restarts(host):
    props = host.service("sglang-dsv4-router").systemd_properties
    assert "--pd-disaggregation" in props["ExecStart"]
    assert "--prefill http://127.0.0.1:32011 32013" in props["ExecStart"]
    assert "--decode http://127.0.0.1:32012" in props["ExecStart"]
    assert "PartOf" not in props or props["PartOf"] == ""
    assert props["StopPropagatedFrom"] == "sglang-dsv4.target"


def test_target_groups_the_services(host):
    target = host.service("sglang-dsv4.target")
    assert target.is_enabled
    assert target.is_running
    wants = target.systemd_properties["Wants"].split()
    assert {f"sglang-dsv4-{u}.service" for u in UNITS} <= set(wants)


@pytest.mark.parametrize("name", [f"sglang-dsv4-{u}.service" for u in UNITS] + ["sglang-dsv4.target"])
def test_unit_files_are_root_owned_and_managed(host, name):
    unit = host.file(f"/etc/systemd/system/{name}")
    assert (unit.user, unit.group, unit.mode) == ("root", "root", 0o644)
    assert unit.content_string.startswith("#\n# Ansible managed")


@pytest.mark.parametrize("unit", SERVERS)
def test_servers_listen_on_loopback_only(host, unit):
    port = {"prefill": 32011, "decode": 32012}[unit]
    assert host.socket(f"tcp://127.0.0.1:{port}").is_listening
    assert not host.socket(f"tcp://0.0.0.0:{port}").is_listening


@pytest.mark.parametrize("unit", SERVERS)
def test_servers_logged_the_defaults_at_start(host, unit):
    assert (
        "Using default chat sampling params from model generation config: {'temperature': 0.6, 'top_p': 0.95}"
        in journal(host, unit)
    )


def lab_api_key() -> str:
    """The lab key, decrypted from the lab inventory with the lab-only vault password."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = (ROOT / "inventories/lab/group_vars/sglang_dsv4.yml").read_text()
    vaulted = text.split("sglang_services_api_key: !vault |", 1)[1]
    lines = [line.strip() for line in vaulted.splitlines()[1:] if line.startswith("          ")]
    password = (ROOT / "inventories/lab/vault-password.txt").read_bytes().strip()
    vault = VaultLib([("lab", VaultSecret(password))])
    return vault.decrypt("\n".join(lines)).decode()


SCAN = """
import os, sys
key = open('/etc/sglang-dsv4/credentials/router').read().strip()
me = str(os.getpid())
for pid in filter(str.isdigit, os.listdir('/proc')):
    if pid == me:
        continue
    try:
        cmdline = open(f'/proc/{pid}/cmdline', 'rb').read()
    except OSError:
        continue
    if key.encode() in cmdline:
        print('LEAK', pid)
print('scanned')
"""


def test_api_key_is_only_in_root_only_credential_files(host):
    key = lab_api_key()
    assert key.startswith("lab-only-api-key-")
    for name in ("prefill", "decode", "router"):
        credential = host.file(f"/etc/sglang-dsv4/credentials/{name}")
        assert (credential.user, credential.group, credential.mode) == ("root", "root", 0o600)
        assert key in credential.content_string
    assert host.file("/etc/sglang-dsv4/credentials").mode == 0o700
    for path in host.check_output("ls /etc/systemd/system/sglang-dsv4-*.service /etc/sglang-dsv4/*.env").split():
        assert key not in host.file(path).content_string, path


def test_api_key_is_in_no_process_command_line(host):
    out = host.check_output("python3 - <<'EOF'\n" + SCAN + "\nEOF")
    assert out.strip() == "scanned"


def test_servers_enforce_the_key_and_the_router_uses_it(host):
    key = lab_api_key()
    models = (
        'python3 -c "import urllib.request as u; '
        "r = u.Request('http://127.0.0.1:32011/v1/models'{}); print(u.urlopen(r).status)\""
    )
    assert host.run(models.format("")).rc != 0  # 401 without the key
    assert host.check_output(models.format(f", headers={{'Authorization': 'Bearer {key}'}}")) == "200"
    # The router answers clients and authenticates to the servers with the key from its credential.
    chat = host.run(
        "python3 -c \"import json, urllib.request as u; r = u.Request('http://127.0.0.1:32010/v1/chat/completions', "
        "data=json.dumps({'messages': [{'role': 'user', 'content': 'hi'}]}).encode(), "
        "headers={'Content-Type': 'application/json'}); print(u.urlopen(r).status)\""
    )
    assert chat.stdout.strip() == "200", chat.stderr


def deploy(*args: str) -> subprocess.CompletedProcess:
    """deploy.yml against molecule's instance, as an operator would run it."""
    inventory = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, "deploy.yml", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
        timeout=600,
    )


def test_key_stays_out_of_ansible_output_and_diffs(host):
    out = deploy("--diff", "-v", "-e", '{"sglang_verify_requests": 2}')
    assert out.returncode == 0, out.stdout[-2000:]
    assert lab_api_key() not in out.stdout + out.stderr


def test_check_diff_shows_the_json_change_and_changes_nothing(host):
    before = host.check_output(f"sha256sum {GENCONFIG} /etc/sglang-dsv4/sampling-defaults.json")
    out = deploy("--check", "--diff", "-e", '{"sglang_genconfig_temperature": 0.7}')
    assert out.returncode == 0, out.stdout[-2000:]
    assert '-  "temperature": 0.6,' in out.stdout and '+  "temperature": 0.7,' in out.stdout
    assert host.check_output(f"sha256sum {GENCONFIG} /etc/sglang-dsv4/sampling-defaults.json") == before
