"""The rendered and running state of one lab host after `deploy.yml` (molecule verify)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import GENCONFIG, MODEL, PORT_BASE, ROOT, deploy, lab_secret, playbook, recap

PLANTED = json.loads((ROOT / "roles/lab_hosts/files/model/generation_config.json").read_text())
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
    # Env files may hold tokens: root's alone.
    assert (env.user, env.mode) == ("root", 0o600)
    props = host.service(f"sglang-dsv4-{unit}").systemd_properties
    assert props["NUMAPolicy"] == "bind"
    assert props["NUMAMask"] == "0"
    assert props["PartOf"] == "sglang-dsv4.target"


def test_router_is_the_real_sglang_router_in_front_of_prefill_and_decode(host):
    props = host.service("sglang-dsv4-router").systemd_properties
    python = re.search(r"argv\[\]=(/opt/sglang/releases/([0-9a-f]{16})/bin/python) ", props["ExecStart"])
    assert python, props["ExecStart"]
    assert "-m sglang_router.launch_router" in props["ExecStart"]
    assert "--pd-disaggregation" in props["ExecStart"]
    assert "--prefill http://127.0.0.1:32011 32013" in props["ExecStart"]
    assert "--decode http://127.0.0.1:32012" in props["ExecStart"]
    assert f"--tokenizer-path {MODEL}" in props["ExecStart"]
    assert "/readiness" in props["ExecStartPost"]
    pid = int(props["MainPID"])
    assert host.file(f"/proc/{pid}/comm").content_string.strip() == "sglang::router"
    # The router's own release: exactly its lock, nothing else (pip and setuptools come with every venv).
    freeze = host.check_output(f"{python.group(1)} -m pip freeze --all").split()
    lock = host.check_output(f"cat /opt/sglang/releases/{python.group(2)}/sglang-release.lock")
    pinned = sorted(line.split()[0].lower() for line in lock.splitlines() if line and not line.startswith("#"))
    assert sorted(x.lower().replace("_", "-") for x in freeze if not x.startswith(("pip==", "setuptools=="))) == [
        x.replace("_", "-") for x in pinned
    ]
    assert "sglang-router==0.3.2" in pinned
    assert "PartOf" not in props or props["PartOf"] == ""
    assert props["StopPropagatedFrom"] == "sglang-dsv4.target"


def test_the_lab_builds_the_servers_release_uncompiled_and_the_routers_compiled(host):
    """sglang_runtime_release_no_compile: [servers] (the lab's settings): the stand-in imports nothing from its
    release; the router imports its package at every start, from compiled files as in production."""
    found = {}
    for unit in ("prefill", "router"):
        exec_start = host.service(f"sglang-dsv4-{unit}").systemd_properties["ExecStart"]
        release = re.search(r"argv\[\]=/opt/sglang/releases/([0-9a-f]{16})/bin/python ", exec_start).group(1)
        manifest = json.loads(host.file(f"/opt/sglang/releases/{release}/sglang-release.json").content_string)
        package = "sglang" if unit == "prefill" else "sglang_router"
        compiled = host.check_output(
            f"find /opt/sglang/releases/{release}/lib/python3*/site-packages/{package} -name '*.pyc' | wc -l"
        )
        found[unit] = (manifest["options"].get("no_compile", False), int(compiled) > 0)
    assert found == {"prefill": (True, False), "router": (False, True)}, found


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


def listening(host, pid: int) -> set[str]:
    out = host.check_output(f"ss -Hltnp | grep 'pid={pid},' || true")
    return {line.split()[3] for line in out.splitlines()}


def test_router_listens_on_exactly_what_the_collection_rendered(host):
    props = host.service("sglang-dsv4-router").systemd_properties
    words = props["ExecStart"].split()
    rendered = {
        f"{words[words.index('--host') + 1]}:{words[words.index('--port') + 1]}",
        f"{words[words.index('--prometheus-host') + 1]}:{words[words.index('--prometheus-port') + 1]}",
    }
    assert rendered == {f"127.0.0.1:{PORT_BASE}", f"127.0.0.1:{PORT_BASE + 4}"}
    assert listening(host, int(props["MainPID"])) == rendered


def test_router_metrics_listener_exports_its_smg_series(host):
    url = f"http://127.0.0.1:{PORT_BASE + 4}/metrics"
    metrics = host.check_output(f"python3 -c \"import urllib.request as u; print(u.urlopen('{url}').read().decode())\"")
    assert "smg_" in metrics


def test_router_journal_since_its_start_has_no_warning_or_error(host):
    invocation = host.service("sglang-dsv4-router").systemd_properties["InvocationID"]
    journal = host.check_output(f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}")
    assert "Router ready" in journal or "Starting router" in journal
    bad = [line for line in journal.splitlines() if " WARN " in line or " ERROR " in line or "Traceback" in line]
    assert bad == [], "\n".join(bad[:10])


SCAN = """
import os, sys
keys = [open('/etc/sglang-dsv4/credentials/router').read().strip(),
        open('/etc/sglang-dsv4/credentials/router-admin').read().strip().rsplit(':', 1)[1]]
me = str(os.getpid())
for pid in filter(str.isdigit, os.listdir('/proc')):
    if pid == me:
        continue
    for name in ('cmdline', 'environ'):
        try:
            data = open(f'/proc/{pid}/{name}', 'rb').read()
        except OSError:
            continue
        if any(key.encode() in data for key in keys):
            print('LEAK', pid, name)
print('scanned')
"""


def test_keys_are_only_in_root_only_credential_files(host):
    client, admin = lab_secret("sglang_services_api_key"), lab_secret("sglang_services_admin_key")
    assert client.startswith("lab-only-api-key-") and admin.startswith("lab-only-admin-key-")
    for name in ("prefill", "decode", "router"):
        credential = host.file(f"/etc/sglang-dsv4/credentials/{name}")
        assert (credential.user, credential.group, credential.mode) == ("root", "root", 0o600)
        assert client in credential.content_string
    admin_file = host.file("/etc/sglang-dsv4/credentials/router-admin")
    assert (admin_file.user, admin_file.mode) == ("root", 0o600)
    assert admin_file.content_string.strip() == f"dsv4-admin:operators:admin:{admin}"
    assert host.file("/etc/sglang-dsv4/credentials").mode == 0o700
    for path in host.check_output("ls /etc/systemd/system/sglang-dsv4-*.service /etc/sglang-dsv4/*.env").split():
        text = host.file(path).content_string
        assert client not in text and admin not in text, path


def test_keys_are_in_no_process_command_line_or_environment(host):
    assert host.check_output("python3 - <<'EOF'\n" + SCAN + "\nEOF").strip() == "scanned"


def test_keys_stay_out_of_ansible_output_and_diffs(host):
    out = deploy("--diff", "-vv", "-e", '{"sglang_verify_requests": 2}')
    assert out.returncode == 0, out.stdout[-2000:]
    for key in (lab_secret("sglang_services_api_key"), lab_secret("sglang_services_admin_key")):
        assert key not in out.stdout + out.stderr


def test_check_diff_prints_the_plan_with_the_json_change_and_changes_nothing(host):
    before = host.check_output(f"sha256sum {GENCONFIG} /etc/sglang-dsv4/sampling-defaults.json")
    out = deploy("--check", "--diff", "-e", '{"sglang_genconfig_temperature": 0.7}')
    assert out.returncode == 0, out.stdout[-2000:]
    assert '-  "temperature": 0.6,' in out.stdout and '+  "temperature": 0.7,' in out.stdout
    assert "its inputs change in this run" in out.stdout
    assert "PLAY [Apply" not in out.stdout or "skipping: no hosts matched" in out.stdout
    assert host.check_output(f"sha256sum {GENCONFIG} /etc/sglang-dsv4/sampling-defaults.json") == before


def test_verify_yml_alone_proves_the_inventorys_defaults_and_changes_nothing(host):
    """playbooks/verify.yml: the full verification on its own, against what the inventory renders."""
    pids = host.check_output("systemctl show -p MainPID --value sglang-dsv4-prefill sglang-dsv4-decode")
    out = playbook("playbooks/verify.yml")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "changed=0" in recap(out.stdout) and "failed=0" in recap(out.stdout)
    assert "'temperature': 0.6" in out.stdout and "sampling_defaults      model, model" in out.stdout
    assert host.check_output("systemctl show -p MainPID --value sglang-dsv4-prefill sglang-dsv4-decode") == pids


def test_the_collection_in_use_is_the_one_installed_from_the_tarball():
    """scripts/test.sh installs the built tarball and puts it first on the collections path of every scenario."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    installed = os.environ.get("DSV4_COLLECTIONS_PATH")
    if not installed:
        pytest.skip("molecule run by hand: the checkout is the collection (scripts/test.sh sets DSV4_COLLECTIONS_PATH)")
    doc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "role", "dsv4.sglang.sglang_services"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert doc.returncode == 0, doc.stderr
    assert f"({installed}/ansible_collections/dsv4/sglang)" in doc.stdout
