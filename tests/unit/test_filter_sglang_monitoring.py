"""The sglang_monitoring role's settings checks and configs (plugins/filter/sglang_monitoring.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.dsv4.sglang.plugins.filter import sglang_monitoring as mon

ROOT = Path(__file__).resolve().parents[2]
HASH = "$2b$12$" + "a" * 53


def settings(**overrides):
    base = {
        "host": "gpu-01",
        "fleet": "prod",
        "prometheus_listen_address": "127.0.0.1",
        "prometheus_port": 9090,
        "node_exporter_listen_address": "127.0.0.1",
        "node_exporter_port": 9100,
        "scrape_interval": "15s",
        "evaluation_interval": "15s",
        "retention": "15d",
        "textfile_interval": "1m",
        "trusted_network": False,
        "dcgm_exporter_enabled": False,
        "dcgm_exporter_port": 9400,
        "rules_file": "/etc/prometheus/sglang-dsv4.rules.yml",
        "password_file": "/etc/prometheus/sglang-dsv4-scrape-password",
        "password_dir": "/etc/prometheus/sglang-dsv4-federation",
        "web": {"username": "prometheus"},
    }
    base.update(overrides)
    return base


UNITS = [
    {"group": "servers", "mode": "prefill", "port": 30000},
    {"group": "servers", "mode": "decode", "port": 30001},
    {"group": "router", "mode": "router", "port": 8000, "metrics_host": "127.0.0.1", "metrics_port": 29000},
]


def test_defaults_are_clean():
    assert mon.sglang_monitoring_errors(settings()) == []


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"prometheus_port": "9090"}, "sglang_monitoring_prometheus_port='9090'"),
        ({"node_exporter_port": 70000}, "sglang_monitoring_node_exporter_port=70000"),
        ({"prometheus_listen_address": "eth0"}, "sglang_monitoring_prometheus_listen_address='eth0'"),
        ({"scrape_interval": "15 s"}, "sglang_monitoring_scrape_interval='15 s'"),
        ({"retention": "forever"}, "sglang_monitoring_retention='forever'"),
        ({"textfile_interval": "1m\nExecStart=/bin/sh"}, "sglang_monitoring_textfile_interval="),
        ({"fleet": 'a"b'}, "sglang_monitoring_fleet="),
        ({"fleet": "a\u2028b"}, "sglang_monitoring_fleet="),
        ({"dcgm_exporter_enabled": True, "dcgm_exporter_port": 0}, "sglang_monitoring_dcgm_exporter_port=0"),
        ({"node_exporter_port": 9090}, "sglang_monitoring_node_exporter_port=9090 is already used"),
        ({"service_ports": [9090]}, "sglang_monitoring_prometheus_port=9090 is already used by sglang_services"),
        ({"prometheus_listen_address": "0.0.0.0"}, "listens beyond loopback"),  # noqa: S104
        ({"node_exporter_listen_address": "192.0.2.7"}, "sglang_monitoring_node_exporter_listen_address=192.0.2.7"),
        ({"web": {"password_hash": "plain"}}, "must be a bcrypt hash"),
        ({"web": {"tls_cert": "/c.pem"}}, "go together"),
    ],
)
def test_bad_settings_are_refused_by_name(overrides, needle):
    errors = mon.sglang_monitoring_errors(settings(**overrides))
    assert any(needle in error for error in errors), errors


def test_beyond_loopback_needs_tls_and_auth_or_a_trusted_network():
    exposed = settings(prometheus_listen_address="198.51.100.4")
    assert "sglang_monitoring_web_tls_cert" in mon.sglang_monitoring_errors(exposed)[0]
    assert mon.sglang_monitoring_errors({**exposed, "trusted_network": True}) == []
    web = {"tls_cert": "/c", "tls_key": "/k", "username": "u", "password": "p", "password_hash": HASH}
    assert mon.sglang_monitoring_errors({**exposed, "web": web}) == []


def test_gpu_host_config_scrapes_every_service_with_fleet_host_and_role():
    config = mon.sglang_prometheus_config(UNITS, settings())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"sglang", "sglang-router", "node", "prometheus"}
    servers = jobs["sglang"]["static_configs"]
    assert [(s["targets"], s["labels"]["role"]) for s in servers] == [
        (["127.0.0.1:30000"], "prefill"),
        (["127.0.0.1:30001"], "decode"),
    ]
    assert jobs["sglang-router"]["static_configs"][0]["targets"] == ["127.0.0.1:29000"]
    for job in jobs.values():
        for static in job["static_configs"]:
            assert static["labels"]["fleet"] == "prod" and static["labels"]["host"] == "gpu-01"
    assert config["rule_files"] == ["/etc/prometheus/sglang-dsv4.rules.yml"]


def test_dcgm_job_only_when_enabled_and_ipv6_in_brackets():
    config = mon.sglang_prometheus_config(
        UNITS, settings(dcgm_exporter_enabled=True, node_exporter_listen_address="::1")
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["dcgm"]["static_configs"][0]["targets"] == ["127.0.0.1:9400"]
    assert jobs["node"]["static_configs"][0]["targets"] == ["[::1]:9100"]
    assert mon.sglang_hostport("::1", "9100") == "[::1]:9100"


def test_federation_keeps_labels_and_secures_what_needs_it():
    web = {"tls_cert": "/c", "tls_key": "/k", "username": "u", "password": "p", "password_hash": HASH}
    members = [
        {"host": "a", "address": "127.0.0.1", "port": 9090, "listen_address": "127.0.0.1", "web": {}},
        {"host": "b", "address": "198.51.100.5", "port": 9090, "listen_address": "198.51.100.5", "web": web},
    ]
    config = mon.sglang_federation_config(members, settings(federation_ca_file="/etc/prometheus/fleet-ca.pem"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert all(job["honor_labels"] and job["metrics_path"] == "/federate" for job in jobs.values())
    assert jobs["federate"]["static_configs"][0]["targets"] == ["127.0.0.1:9090"]
    # The password stays in a file of the central host; the CA is the central host's own path.
    assert jobs["federate-b"]["basic_auth"] == {
        "username": "u",
        "password_file": "/etc/prometheus/sglang-dsv4-federation/b",
    }
    assert jobs["federate-b"]["tls_config"] == {"ca_file": "/etc/prometheus/fleet-ca.pem"}
    assert jobs["federate-b"]["scheme"] == "https"


def test_federation_over_tls_needs_a_ca_file_of_the_central_host():
    web = {"tls_cert": "/c", "tls_key": "/k", "username": "u", "password": "p", "password_hash": HASH}
    member = {"host": "b", "address": "198.51.100.5", "port": 9090, "listen_address": "198.51.100.5", "web": web}
    errors = mon.sglang_federation_errors([member], "central")
    assert errors and "set sglang_monitoring_federation_ca_file on central" in errors[0]
    assert mon.sglang_federation_errors([member], "central", "/etc/prometheus/fleet-ca.pem") == []


def test_no_scrape_password_is_ever_in_a_config():
    web = {"tls_cert": "/c", "tls_key": "/k", "username": "u", "password": "pw-s3cr3t", "password_hash": HASH}
    config = mon.sglang_prometheus_config(UNITS, settings(web=web))
    members = [{"host": "b", "address": "198.51.100.5", "port": 9090, "listen_address": "198.51.100.5", "web": web}]
    central = mon.sglang_federation_config(members, settings(federation_ca_file="/ca.pem"))
    for built in (config, central):
        assert "pw-s3cr3t" not in str(built)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["basic_auth"] == {
        "username": "u",
        "password_file": "/etc/prometheus/sglang-dsv4-scrape-password",
    }


@pytest.mark.parametrize(
    ("prometheus", "node_exporter", "node_target", "self_target"),
    [
        ("127.0.0.1", "127.0.0.1", "127.0.0.1:9100", "127.0.0.1:9090"),
        ("0.0.0.0", "127.0.0.1", "127.0.0.1:9100", "127.0.0.1:9090"),  # noqa: S104 - listen addresses
        ("0.0.0.0", "198.51.100.4", "198.51.100.4:9100", "127.0.0.1:9090"),  # noqa: S104
        ("198.51.100.4", "0.0.0.0", "127.0.0.1:9100", "198.51.100.4:9090"),  # noqa: S104
        ("::", "::1", "[::1]:9100", "[::1]:9090"),
        ("127.0.0.1", "::", "[::1]:9100", "127.0.0.1:9090"),
        ("localhost", "2001:db8::4", "[2001:db8::4]:9100", "127.0.0.1:9090"),
    ],
)
def test_each_daemon_is_scraped_where_it_listens(prometheus, node_exporter, node_target, self_target):
    config = mon.sglang_prometheus_config(
        UNITS, settings(prometheus_listen_address=prometheus, node_exporter_listen_address=node_exporter)
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["static_configs"][0]["targets"] == [node_target]
    assert jobs["prometheus"]["static_configs"][0]["targets"] == [self_target]


def test_basic_auth_on_loopback_still_needs_the_password():
    web = {"tls_cert": "/c", "tls_key": "/k", "username": "u", "password": "", "password_hash": HASH}
    errors = mon.sglang_monitoring_errors(settings(web=web))
    assert any("sglang_monitoring_web_password is empty, but TLS and basic authentication are on" in e for e in errors)
    assert mon.sglang_monitoring_errors(settings(web={**web, "password": "p"})) == []


def test_federation_refuses_a_member_that_listens_on_loopback_of_another_machine():
    member = {"host": "b", "address": "198.51.100.5", "port": 9090, "listen_address": "127.0.0.1", "web": {}}
    errors = mon.sglang_federation_errors([member], "central")
    assert errors and "sglang_monitoring_prometheus_listen_address=127.0.0.1 on b" in errors[0]
    same_machine = {**member, "address": "127.0.0.1"}
    assert mon.sglang_federation_errors([same_machine], "central") == []


def test_web_config_only_with_tls_and_a_hash():
    assert mon.sglang_web_config({"username": "u"}) is None
    web = {"tls_cert": "/c", "tls_key": "/k", "username": "u", "password_hash": HASH}
    assert mon.sglang_web_config(web) == {
        "tls_server_config": {"cert_file": "/c", "key_file": "/k"},
        "basic_auth_users": {"u": HASH},
    }


def test_committed_dashboard_is_the_generated_one():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/make_dashboard.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr


def test_a_host_of_a_pool_across_hosts_is_scraped_where_its_servers_listen_and_labelled_with_its_pool():
    prefill_host = [
        {"group": "servers", "mode": "prefill", "port": 30000, "health_url": "http://198.51.100.11:30000/health"},
    ]
    config = mon.sglang_prometheus_config(prefill_host, settings(host="gpu-p1", pool="pd-a"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    # No router on this host: no router job (the pool's router host scrapes its own).
    assert set(jobs) == {"sglang", "node", "prometheus"}
    (server,) = jobs["sglang"]["static_configs"]
    assert server["targets"] == ["198.51.100.11:30000"]
    assert server["labels"] == {"fleet": "prod", "pool": "pd-a", "host": "gpu-p1", "role": "prefill"}
    assert all(s["labels"]["pool"] == "pd-a" for job in jobs.values() for s in job["static_configs"])
    router_host = config = mon.sglang_prometheus_config([UNITS[2]], settings(host="router-1", pool="pd-a"))
    assert {job["job_name"] for job in router_host["scrape_configs"]} == {"sglang-router", "node", "prometheus"}
    # A host of its own is a pool named after it.
    alone = mon.sglang_prometheus_config(UNITS, settings())
    assert all(s["labels"]["pool"] == "gpu-01" for job in alone["scrape_configs"] for s in job["static_configs"])
