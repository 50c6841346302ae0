"""The role's alert rules and scrape configs through the promtool of Debian's prometheus package.

`promtool check rules` and `promtool test rules` (tests/rules_test.yml: a firing and a quiet case per alert) run on
the rules template rendered with the role's defaults; `promtool check config` on configs built by the role's filter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from plugins.filter.sglang_monitoring import sglang_federation_config, sglang_prometheus_config

ROLE = Path(__file__).resolve().parents[1]
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def render_rules(**overrides: object) -> str:
    """templates/sglang-dsv4.rules.yml.j2 as the role renders it ([[ ]] is Jinja there, {{ }} Prometheus's)."""
    header, _unused, body = (ROLE / "templates/sglang-dsv4.rules.yml.j2").read_text().partition("\n")
    assert header.startswith("#jinja2:") and "variable_start_string:'[['" in header
    # A YAML file, not HTML: nothing to escape (as in Ansible's template module).
    env = jinja2.Environment(  # noqa: S701
        variable_start_string="[[", variable_end_string="]]", undefined=jinja2.StrictUndefined
    )
    return env.from_string(body).render(ansible_managed="Ansible managed", **{**DEFAULTS, **overrides})


@pytest.fixture(scope="module")
def promtool() -> str:
    beside = Path(sys.executable).parent / "promtool"
    found = str(beside) if beside.exists() else shutil.which("promtool")
    assert found, "promtool is missing: scripts/bootstrap.sh extracts it from Debian's prometheus package"
    return found


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "sglang-dsv4.rules.yml"
    path.write_text(render_rules())
    return path


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def test_rules_pass_promtool_check(promtool: str, rules: Path) -> None:
    out = run(promtool, "check", "rules", str(rules))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 15 rules found" in out.stdout


def test_rules_unit_tests_pass(promtool: str, rules: Path) -> None:
    shutil.copy(ROLE / "tests/rules_test.yml", rules.parent / "rules_test.yml")
    out = run(promtool, "test", "rules", str(rules.parent / "rules_test.yml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_a_wrong_expectation_fails_the_rule_tests(promtool: str, rules: Path) -> None:
    """The unit tests can fail: the firing case of one alert expected on the quiet host."""
    tests = (ROLE / "tests/rules_test.yml").read_text().replace("host: bad}", "host: good}", 1)
    (rules.parent / "rules_test.yml").write_text(tests)
    out = run(promtool, "test", "rules", str(rules.parent / "rules_test.yml"))
    assert out.returncode != 0


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {rule["alert"] for group in yaml.safe_load(render_rules())["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((ROLE / "tests/rules_test.yml").read_text())["tests"]
    firing: set[str] = set()
    for case in tests:
        hosts = {series["series"].split('host="', 1)[1].split('"', 1)[0] for series in case["input_series"]}
        assert "good" in hosts, f"no quiet host in the case of {[t['alertname'] for t in case['alert_rule_test']]}"
        for check in case["alert_rule_test"]:
            expected = check.get("exp_alerts") or []
            assert all(alert["exp_labels"]["host"] != "good" for alert in expected)
            if expected:
                firing.add(check["alertname"])
    assert firing == alerts


def test_thresholds_come_from_the_role_variables() -> None:
    text = render_rules(sglang_monitoring_alert_ttft_p99_seconds=3.5, sglang_monitoring_alert_token_usage_ratio=0.8)
    assert "> 3.5" in text and "sglang:token_usage > 0.8" in text


UNITS = [
    {"group": "servers", "mode": "prefill", "port": 30000},
    {"group": "servers", "mode": "decode", "port": 30001},
    {"group": "router", "mode": "router", "port": 8000, "metrics_host": "127.0.0.1", "metrics_port": 29000},
]


def settings(**overrides: object) -> dict:
    base = {
        key.removeprefix("sglang_monitoring_"): value
        for key, value in DEFAULTS.items()
        if not key.startswith(("sglang_monitoring_web_", "sglang_monitoring_alert_"))
    }
    base.update(host="gpu-01", rules_file="", web={}, password_file="/p", password_dir="/d")  # noqa: S106 - paths
    base.update(overrides)
    return base


def test_gpu_host_config_passes_promtool(promtool: str, rules: Path, tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(sglang_prometheus_config(UNITS, settings(rules_file=str(rules)))))
    out = run(promtool, "check", "config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 1 rule files found" in out.stdout


def test_secured_and_dcgm_config_passes_promtool(promtool: str, rules: Path, tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("placeholder")
    web = {"tls_cert": str(cert), "tls_key": str(cert), "username": "p", "password": "pw", "password_hash": "$2b$"}
    config = tmp_path / "prometheus.yml"
    built = sglang_prometheus_config(
        UNITS,
        settings(rules_file=str(rules), web=web, dcgm_exporter_enabled=True, prometheus_listen_address="0.0.0.0"),  # noqa: S104
    )
    config.write_text(yaml.safe_dump(built))
    out = run(promtool, "check", "config", "--syntax-only", str(config))
    assert out.returncode == 0, out.stdout + out.stderr
    jobs = {job["job_name"]: job for job in built["scrape_configs"]}
    assert jobs["node"]["scheme"] == "https" and jobs["node"]["basic_auth"]["username"] == "p"
    assert jobs["dcgm"]["static_configs"][0]["targets"] == ["127.0.0.1:9400"]
    assert jobs["prometheus"]["static_configs"][0]["targets"] == ["127.0.0.1:9090"]
    assert "pw" not in built["scrape_configs"][2]["basic_auth"].values()


def test_central_config_passes_promtool(promtool: str, tmp_path: Path) -> None:
    members = [
        {"host": "gpu-01", "address": "127.0.0.1", "port": 9090, "listen_address": "127.0.0.1", "web": {}},
        {"host": "gpu-02", "address": "127.0.0.1", "port": 9091, "listen_address": "127.0.0.1", "web": {}},
    ]
    config = tmp_path / "central.yml"
    config.write_text(yaml.safe_dump(sglang_federation_config(members, settings())))
    out = run(promtool, "check", "config", str(config))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_task_that_writes_a_scrape_password_hides_it_from_the_log_and_from_diff() -> None:
    tasks = yaml.safe_load((ROLE / "tasks/install.yml").read_text())
    writers = [t for t in tasks if "password" in str(t.get("ansible.builtin.copy", {}).get("content", ""))]
    assert len(writers) == 2, [t["name"] for t in writers]
    for task in writers:
        assert task.get("no_log") is True and task.get("diff") is False, task["name"]
        assert task["ansible.builtin.copy"]["mode"] == "0640" and task["ansible.builtin.copy"]["group"] == "prometheus"
    # prometheus.yml itself is rendered from the filter, which only ever names password files.
    assert "password_file" in (ROLE.parents[1] / "plugins/filter/sglang_monitoring.py").read_text()
