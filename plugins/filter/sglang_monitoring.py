"""Filters of the sglang_monitoring role: the Prometheus configs it renders and the checks of its settings.

`sglang_monitoring_errors` lists what is wrong with the role's settings (each message names the variable and
the value); `sglang_prometheus_config` builds a GPU host's prometheus.yml as data, `sglang_federation_config`
the central Prometheus's, and `sglang_web_config` the web-config file of Prometheus and node_exporter. The
templates only print what these return. Plain functions, tested in tests/unit/test_filter_sglang_monitoring.py.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_inputs import is_address, is_loopback

DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")
LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:@/-]+")
USERNAME = re.compile(r"[A-Za-z0-9_.-]+")
GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
THRESHOLDS = {
    "alert_ttft_p99_seconds": (lambda v: v > 0, "a number of seconds above 0"),
    "alert_token_usage_ratio": (lambda v: 0 < v <= 1, "a ratio in (0, 1]"),
    "alert_router_5xx_ratio": (lambda v: 0 < v <= 1, "a ratio in (0, 1]"),
}
BCRYPT = re.compile(r"^\$2[aby]?\$[0-9]{2}\$[./A-Za-z0-9]{53}$")
SCRAPE_JOBS = ("sglang", "sglang-router", "node", "prometheus", "dcgm")


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def sglang_hostport(address: str, port: Any) -> str:
    """address:port, with an IPv6 address in brackets (as Prometheus and node_exporter take it)."""
    return _hostport(str(address), int(port))


def sglang_monitoring_errors(settings: dict[str, Any]) -> list[str]:
    """Everything wrong with the role's settings (see roles/sglang_monitoring/meta/argument_specs.yml)."""
    errors: list[str] = []
    for name in ("prometheus", "node_exporter"):
        address = settings[f"{name}_listen_address"]
        port = settings[f"{name}_port"]
        if not is_address(address):
            errors.append(f"sglang_monitoring_{name}_listen_address={address!r} must be an IP address (or localhost)")
        if not _is_port(port):
            errors.append(f"sglang_monitoring_{name}_port={port!r} must be a port number (1-65535)")
    if settings["dcgm_exporter_enabled"] and not _is_port(settings["dcgm_exporter_port"]):
        errors.append(f"sglang_monitoring_dcgm_exporter_port={settings['dcgm_exporter_port']!r} must be a port number")
    for key in ("scrape_interval", "evaluation_interval", "retention", "textfile_interval"):
        value = settings[key]
        if not isinstance(value, str) or not DURATION.fullmatch(value):
            errors.append(f"sglang_monitoring_{key}={value!r} must be a Prometheus duration such as 15s, 1m or 15d")
    if not isinstance(settings["fleet"], str) or not LABEL_VALUE.fullmatch(settings["fleet"]):
        errors.append(f"sglang_monitoring_fleet={settings['fleet']!r} must be letters, digits and _ . : @ / -")
    for key, (check, wanted) in THRESHOLDS.items():
        value = settings.get(key, 1)
        if not isinstance(value, int | float) or isinstance(value, bool) or not check(value):
            errors.append(f"sglang_monitoring_{key}={value!r} must be {wanted}")
    group = settings.get("federation_group", "sglang_dsv4")
    if not isinstance(group, str) or not GROUP.fullmatch(group):
        errors.append(f"sglang_monitoring_federation_group={group!r} must be an inventory group name")
    ports = [settings["prometheus_port"], settings["node_exporter_port"]]
    if settings["dcgm_exporter_enabled"]:
        ports.append(settings["dcgm_exporter_port"])
    taken = {p: f"sglang_services_topology port {p}" for p in settings.get("service_ports", [])}
    keys = ("prometheus_port", "node_exporter_port", "dcgm_exporter_port")[: len(ports)]
    for key, port in zip(keys, ports, strict=True):
        if port in taken:
            errors.append(f"sglang_monitoring_{key}={port} is already used by {taken[port]}")
        taken[port] = f"sglang_monitoring_{key}"
    exposed = [
        f"sglang_monitoring_{name}_listen_address={settings[f'{name}_listen_address']}"
        for name in ("prometheus", "node_exporter")
        if is_address(settings[f"{name}_listen_address"]) and not is_loopback(settings[f"{name}_listen_address"])
    ]
    web = settings["web"]
    if exposed and not settings["trusted_network"]:
        missing = [
            f"sglang_monitoring_web_{key}"
            for key in ("tls_cert", "tls_key", "username", "password", "password_hash")
            if not web.get(key)
        ]
        if missing:
            errors.append(
                f"{', '.join(exposed)} listens beyond loopback: set {', '.join(missing)} (TLS and basic "
                "authentication), or sglang_monitoring_trusted_network=true if a trusted network fronts it"
            )
    if _web_enabled(settings) and not web.get("password"):
        # Basic authentication is on whatever the listener: the host's own Prometheus scrapes itself and
        # node_exporter with this password, and an empty one would be refused at every scrape.
        errors.append(
            "sglang_monitoring_web_password is empty, but TLS and basic authentication are on "
            "(sglang_monitoring_web_tls_cert and sglang_monitoring_web_password_hash are set): set the password "
            "whose bcrypt hash that is"
        )
    username = web.get("username", "prometheus")
    if not isinstance(username, str) or not USERNAME.fullmatch(username):
        errors.append(f"sglang_monitoring_web_username={username!r} must be letters, digits and _ . -")
    if web.get("password_hash") and not BCRYPT.fullmatch(str(web["password_hash"])):
        errors.append("sglang_monitoring_web_password_hash must be a bcrypt hash ($2b$..., 60 characters)")
    if bool(web.get("tls_cert")) != bool(web.get("tls_key")):
        errors.append("sglang_monitoring_web_tls_cert and sglang_monitoring_web_tls_key go together")
    return errors


def _web_enabled(settings: dict[str, Any]) -> bool:
    return bool(settings["web"].get("tls_cert") and settings["web"].get("password_hash"))


def _client(settings: dict[str, Any], password_file: str, ca_file: str | None = None) -> dict[str, Any]:
    """How a scraper reaches a Prometheus or node_exporter of these settings (https and basic auth, or plain).

    The password is never in the config: Prometheus reads it from password_file (root and prometheus only), so
    prometheus.yml stays world-readable and `--diff` shows no secret. ca_file is a path on the scraping host.
    """
    if not _web_enabled(settings):
        return {}
    web = settings["web"]
    return {
        "scheme": "https",
        "basic_auth": {"username": web["username"], "password_file": password_file},
        "tls_config": {"ca_file": ca_file or web.get("tls_ca") or web["tls_cert"]},
    }


def _scrape_address(listen: str) -> str:
    """Where this host's Prometheus reaches a daemon of its own: a wildcard listener on loopback, else its address."""
    if listen in ("0.0.0.0", ""):  # noqa: S104 - a listen address, compared
        return "127.0.0.1"
    if listen == "::":
        return "::1"
    return "127.0.0.1" if listen == "localhost" else listen


def _labels(settings: dict[str, Any], **extra: str) -> dict[str, str]:
    # xPyD: the PD pool the host serves in (a host of its own is a pool named after it), so that the dashboard and
    # the rules group a pool's prefill, decode and router hosts.
    return {
        "fleet": settings["fleet"],
        "pool": settings.get("pool") or settings["host"],
        "host": settings["host"],
        **extra,
    }


def _server_target(unit: dict[str, Any]) -> str:
    """Where a server listens (its /health URL's address: loopback, or a pool server's advertised address)."""
    url = str(unit.get("health_url") or "")
    if url.startswith("http://"):
        return url[len("http://") :].split("/", 1)[0]
    return _hostport("127.0.0.1", unit["port"])


def sglang_prometheus_config(units: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """prometheus.yml of a GPU host: its servers, router, node_exporter, itself and (optionally) DCGM."""
    servers = [
        {"targets": [_server_target(unit)], "labels": _labels(settings, role=unit["mode"])}
        for unit in units
        if unit["group"] == "servers"
    ]
    # A host of a PD pool across hosts may run servers only, or the pool's router only.
    router = next((unit for unit in units if unit["group"] == "router"), None)
    client = _client(settings, settings["password_file"])
    jobs = [{"job_name": "sglang", "static_configs": servers}] if servers else []
    if router:
        jobs.append(
            {
                "job_name": "sglang-router",
                "static_configs": [
                    {
                        "targets": [_hostport(router["metrics_host"], router["metrics_port"])],
                        "labels": _labels(settings, role="router"),
                    }
                ],
            }
        )
    # node_exporter and Prometheus itself, each where it listens (a wildcard on loopback).
    for job, daemon in (("node", "node_exporter"), ("prometheus", "prometheus")):
        target = _hostport(_scrape_address(settings[f"{daemon}_listen_address"]), settings[f"{daemon}_port"])
        jobs.append({"job_name": job, **client, "static_configs": [{"targets": [target], "labels": _labels(settings)}]})
    if settings["dcgm_exporter_enabled"]:
        jobs.append(
            {
                "job_name": "dcgm",
                "static_configs": [
                    {"targets": [_hostport("127.0.0.1", settings["dcgm_exporter_port"])], "labels": _labels(settings)}
                ],
            }
        )
    return {
        "global": {
            "scrape_interval": settings["scrape_interval"],
            "evaluation_interval": settings["evaluation_interval"],
            "external_labels": {"monitor": f"sglang-dsv4-{settings['host']}"},
        },
        "rule_files": [settings["rules_file"]],
        "scrape_configs": jobs,
    }


def sglang_federation_config(members: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """prometheus.yml of the central Prometheus: one federation job over every GPU host's Prometheus.

    members: per GPU host, {"host", "address", "port", "web": {...}} (the host's own monitoring settings).
    settings: the central host's; its `password_dir` holds one password file per secured member (named by the
    host), and its `federation_ca_file` is the CA, on the central host, that signed the members' certificates.
    """
    plain = [m for m in members if not _web_enabled(m)]
    secured = [m for m in members if _web_enabled(m)]
    base = {
        "honor_labels": True,
        "metrics_path": "/federate",
        "params": {"match[]": ['{job=~"sglang|sglang-router|node|prometheus|dcgm"}', '{__name__=~"ALERTS.*"}']},
    }
    jobs = []
    if plain:
        jobs.append(
            {
                "job_name": "federate",
                **base,
                "static_configs": [
                    {"targets": [_hostport(m["address"], m["port"])], "labels": {"federated_from": m["host"]}}
                    for m in plain
                ],
            }
        )
    for member in secured:
        jobs.append(
            {
                "job_name": f"federate-{member['host']}",
                **base,
                **_client(member, f"{settings['password_dir']}/{member['host']}", settings.get("federation_ca_file")),
                "static_configs": [
                    {
                        "targets": [_hostport(member["address"], member["port"])],
                        "labels": {"federated_from": member["host"]},
                    }
                ],
            }
        )
    return {
        "global": {
            "scrape_interval": settings["scrape_interval"],
            "evaluation_interval": settings["evaluation_interval"],
            "external_labels": {"monitor": "sglang-dsv4-central"},
        },
        "scrape_configs": jobs,
    }


def sglang_federation_errors(members: list[dict[str, Any]], central_host: str, ca_file: str = "") -> list[str]:
    """Members a central Prometheus on another machine could not reach: their Prometheus listens on loopback, or
    serves TLS while the central host has no CA file of its own to check it with."""
    errors = []
    secured = [m["host"] for m in members if _web_enabled(m)]
    if secured and not ca_file:
        errors.append(
            f"{central_host} federates {', '.join(secured)} over TLS: set sglang_monitoring_federation_ca_file on "
            f"{central_host} to the CA file, on {central_host}, that signed their certificates (their own "
            "sglang_monitoring_web_tls_ca is a path on each GPU host)"
        )
    for member in members:
        if is_loopback(member["listen_address"]) and not is_loopback(member["address"]):
            errors.append(
                f"{central_host} federates {member['host']} at {member['address']}, but "
                f"sglang_monitoring_prometheus_listen_address={member['listen_address']} on {member['host']}: "
                "let it listen on an address the central Prometheus reaches (with TLS and basic authentication)"
            )
    return errors


def sglang_web_config(web: dict[str, Any]) -> dict[str, Any] | None:
    """The --web.config.file of Prometheus and node_exporter, or None when they serve plain HTTP on loopback."""
    if not (web.get("tls_cert") and web.get("password_hash")):
        return None
    return {
        "tls_server_config": {"cert_file": web["tls_cert"], "key_file": web["tls_key"]},
        "basic_auth_users": {web["username"]: web["password_hash"]},
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_monitoring_errors": sglang_monitoring_errors,
            "sglang_prometheus_config": sglang_prometheus_config,
            "sglang_federation_config": sglang_federation_config,
            "sglang_federation_errors": sglang_federation_errors,
            "sglang_web_config": sglang_web_config,
            "sglang_hostport": sglang_hostport,
        }
