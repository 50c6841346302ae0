"""The monitoring of two lab GPU hosts and a central Prometheus, proven through Prometheus's HTTP API.

Fleet-level checks (no testinfra host fixture): each runs once, whatever the host list.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from conftest import (
    CENTRAL,
    GENCONFIG,
    GPU_HOSTS,
    ROOT,
    api,
    chat,
    lab_secret,
    playbook,
    query,
    recap,
    ssh,
    text,
    wait_for,
)

DASHBOARD = json.loads((ROOT / "roles/sglang_monitoring/files/sglang-dsv4-dashboard.json").read_text())
# Series that exist only after an event the lab does not have: failures and errors. Their alerts and panels are
# proven by `promtool test rules` (roles/sglang_monitoring/tests/rules_test.yml); the monitoring guide lists them.
AFTER_AN_EVENT = (
    "sglang:num_transfer_failed_reqs_total",
    "sglang:num_bootstrap_failed_reqs_total",
    "smg_router_request_errors_total",
)
# The GPU row needs NVIDIA's DCGM exporter, which needs GPUs (not in the lab).
NEEDS_DCGM = "DCGM_FI_"
# Exported from the start, before any request: SGLang's scheduler gauges (prefill and decode), the router's
# worker and connection series, and the collection's own sampling-defaults series.
BEFORE_ANY_EVENT = {
    "sglang": [
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:cache_hit_rate",
        "sglang:token_usage",
        "sglang:num_used_tokens",
        "sglang:max_total_num_tokens",
        "sglang:num_prefill_bootstrap_queue_reqs",
        "sglang:num_prefill_inflight_queue_reqs",
        "sglang:num_decode_prealloc_queue_reqs",
        "sglang:num_decode_transfer_queue_reqs",
    ],
    "sglang-router": [
        "smg_worker_health",
        "smg_worker_pool_size",
        "smg_worker_cb_state",
        "smg_worker_requests_active",
        "smg_http_connections_active",
    ],
    "node": [
        "sglang_dsv4_defaults_check_timestamp_seconds",
        "sglang_dsv4_managed_sampling_default",
        "sglang_dsv4_generation_config_in_sync",
        "sglang_dsv4_server_up",
        "sglang_dsv4_server_defaults_in_effect",
        "sglang_dsv4_server_start_time_seconds",
        "sglang_dsv4_last_rollout_success",
        "sglang_dsv4_last_heal_rewrote",
        "node_textfile_scrape_error",
    ],
}


@pytest.fixture(scope="module")
def traffic() -> None:
    """Chat requests through each host's router, twice a few scrapes apart, so that rates have two samples."""
    key = lab_secret("sglang_services_api_key")
    for _unused in range(2):
        for base in GPU_HOSTS.values():
            assert all(chat(base, key, f"hello {n}") == 200 for n in range(4))
        time.sleep(12)


def substitute(expr: str, hosts: str) -> str:
    return (
        expr.replace("$fleet", "lab").replace("$pool", ".*").replace("$host", hosts).replace("$__rate_interval", "1m")
    )


def dashboard_queries() -> list[tuple[str, str]]:
    return [(panel["title"], t["expr"]) for panel in DASHBOARD["panels"] for t in panel.get("targets", [])]


def healthy_targets(base: int) -> list[dict] | None:
    targets = api(base, "targets")["activeTargets"]
    return targets if len(targets) == 5 and all(t["health"] == "up" for t in targets) else None


def test_every_target_is_up_and_names_the_host_it_really_came_from(traffic) -> None:
    for name, base in GPU_HOSTS.items():
        targets = wait_for(lambda b=base: healthy_targets(b), 60, f"five healthy targets on {name}")
        jobs = sorted(t["labels"]["job"] for t in targets)
        assert jobs == ["node", "prometheus", "sglang", "sglang", "sglang-router"]
        for target in targets:
            assert target["labels"]["host"] == name and target["labels"]["fleet"] == "lab"
            port = int(re.search(r":(\d+)/", target["scrapeUrl"]).group(1))
            assert base <= port < base + 10, f"{name} scrapes {target['scrapeUrl']}, outside its own port block"
        # node_exporter reports the host it runs on: its nodename is the host label.
        (uname,) = query(base, "node_uname_info")
        assert uname["metric"]["nodename"] == uname["metric"]["host"] == name
    central = api(CENTRAL[1], "targets")["activeTargets"]
    federated = sorted(t["labels"]["federated_from"] for t in central if t["labels"]["job"] == "federate")
    assert federated == sorted(GPU_HOSTS)
    assert all(t["health"] == "up" for t in central)


def test_prometheus_and_node_exporter_listen_on_loopback_only() -> None:
    listening = ssh("dsv4-mon-1", "ss -ltnH").split("\n")
    bound = {line.split()[3] for line in listening if line.strip()}
    for base in [*GPU_HOSTS.values(), CENTRAL[1]]:
        for port in (base + 5, base + 6):
            assert f"127.0.0.1:{port}" in bound
            assert not {f"0.0.0.0:{port}", f"*:{port}", f"[::]:{port}"} & bound
    # Debian's defaults (all interfaces, 9090 and 9100) never came up.
    assert not [b for b in bound if b.endswith((":9090", ":9100"))]


def covering(base: int, expr: str, hosts: set[str]) -> set[str]:
    """The hosts the query's series come from, once they include `hosts` (empty before)."""
    found = {r["metric"].get("host") for r in query(base, expr)}
    return found if hosts <= found else set()


def test_every_dashboard_query_returns_a_series_for_each_host(traffic) -> None:
    skipped = []
    for title, expr in dashboard_queries():
        if NEEDS_DCGM in expr or any(name in expr for name in AFTER_AN_EVENT):
            if title not in skipped:
                skipped.append(title)
            continue
        # Waited for, not assumed after the traffic's sleeps: a rate needs two scrapes in its window, and the central
        # one federation more, which a loaded machine delays.
        for name, base in GPU_HOSTS.items():
            mine = substitute(expr, name)
            result = wait_for(
                lambda b=base, e=mine: query(b, e),
                60,
                f"panel {title!r} has no series on {name}: {expr}",
            )
            assert {r["metric"].get("host") for r in result} == {name}, title
        # The central Prometheus answers for the whole fleet.
        central = wait_for(
            lambda e=expr: covering(CENTRAL[1], substitute(e, ".*"), set(GPU_HOSTS)),
            60,
            f"panel {title!r}'s series of every host on the central: {expr}",
        )
        assert central == set(GPU_HOSTS), f"panel {title!r} on the central: {expr}"
    assert sorted(skipped) == sorted(
        [
            "KV-transfer and bootstrap failures",
            "Router request errors",
            "GPU utilization",
            "GPU memory used",
            "GPU temperature",
            "GPU power",
            "Last XID error",
        ]
    )


def test_series_exported_before_any_event_exist_and_failure_series_do_not() -> None:
    for name, base in GPU_HOSTS.items():
        for job, names in BEFORE_ANY_EVENT.items():
            for metric in names:
                result = query(base, f'{metric}{{job="{job}"}}')
                assert result, f"{metric} is missing on {name}"
                if job == "sglang":
                    assert {r["metric"]["role"] for r in result} == {"prefill", "decode"}, metric
        for metric in AFTER_AN_EVENT:
            assert query(base, metric) == [], f"{metric} exists on {name}, yet the lab had no failure"


def alert_state(base: int, alertname: str, host: str) -> str:
    for alert in api(base, "alerts")["alerts"]:
        if alert["labels"]["alertname"] == alertname and alert["labels"].get("host") == host:
            return alert["state"]
    return "inactive"


def start_times(name: str) -> str:
    return ssh(name, "systemctl show -P ExecMainStartTimestampMonotonic sglang-dsv4-prefill sglang-dsv4-decode")


def test_a_hand_edit_raises_the_sampling_defaults_alert_and_deploy_clears_it() -> None:
    name, base = "dsv4-mon-1", GPU_HOSTS["dsv4-mon-1"]
    assert alert_state(base, "SGLangGenerationConfigDrifted", name) == "inactive"
    assert query(base, f'sglang_dsv4_generation_config_in_sync{{host="{name}"}} == 1')
    started = start_times(name)
    edit = (
        "import json; p='" + GENCONFIG + "'; c=json.load(open(p)); c['temperature']=0.7; "
        "open(p,'w').write(json.dumps(c, indent=2))"
    )
    ssh(name, f'python3 -c "{edit}"')
    # Within the timer's 10 s, the scrape's 5 s and the evaluation's 5 s: pending (the alert waits 2m to fire).
    state = wait_for(
        lambda: alert_state(base, "SGLangGenerationConfigDrifted", name) in ("pending", "firing"),
        60,
        "SGLangGenerationConfigDrifted pending after a hand edit",
    )
    assert state is True
    assert query(base, f'sglang_dsv4_generation_config_sampling_value{{host="{name}", key="temperature"}} == 0.7')
    assert start_times(name) == started, "a hand edit is seen without a restart"
    # The other host is not affected.
    assert alert_state(GPU_HOSTS["dsv4-mon-2"], "SGLangGenerationConfigDrifted", "dsv4-mon-2") == "inactive"

    healed = playbook("deploy.yml", "--limit", name)
    assert healed.returncode == 0, text(healed)[-3000:]
    assert re.search(rf"{name}\s*: ok=\d+\s+changed=[1-9]", recap(text(healed)))
    # Back to the content the servers started from: no restart needed, and the alert goes away.
    assert start_times(name) == started
    wait_for(
        lambda: alert_state(base, "SGLangGenerationConfigDrifted", name) == "inactive",
        60,
        "SGLangGenerationConfigDrifted inactive after deploy.yml",
    )
    assert query(base, f'sglang_dsv4_generation_config_in_sync{{host="{name}"}} == 1')
    assert query(base, f'sglang_dsv4_last_rollout_success{{host="{name}"}} == 1')


def test_the_central_prometheus_answers_for_both_hosts() -> None:
    for expr in ("sglang_dsv4_server_defaults_in_effect == 1", 'up{job="sglang"} == 1', "smg_worker_health == 1"):
        result = query(CENTRAL[1], expr)
        assert {r["metric"]["host"] for r in result} == set(GPU_HOSTS), expr


def test_a_monitoring_failure_never_touches_the_serving_units() -> None:
    started = {name: start_times(name) for name in GPU_HOSTS}
    bad = playbook("playbooks/monitoring.yml", "-e", "sglang_monitoring_retention=forever")
    assert bad.returncode != 0
    assert "sglang_monitoring_retention='forever'" in text(bad)
    checked = playbook("playbooks/monitoring.yml", "--check")
    assert checked.returncode == 0, text(checked)[-3000:]
    assert re.findall(r"changed=(\d+)", recap(text(checked))) == ["0", "0", "0"]
    assert {name: start_times(name) for name in GPU_HOSTS} == started


def test_the_dashboard_is_provisioned_where_grafana_reads_it() -> None:
    import yaml

    folder = "/etc/grafana/provisioning/dashboards"
    provider = yaml.safe_load(ssh(CENTRAL[0], f"cat {folder}/sglang-dsv4.yml"))
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"] == f"{folder}/sglang-dsv4"
    installed = json.loads(ssh(CENTRAL[0], f"cat {folder}/sglang-dsv4/sglang-dsv4.json"))
    assert installed == DASHBOARD
    # Only where asked: the GPU hosts have no Grafana folder.
    assert ssh("dsv4-mon-1", "ls /etc/grafana 2>/dev/null || true") == ""
