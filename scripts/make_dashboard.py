"""Writes the Grafana dashboard of the sglang_monitoring role from the panel table below.

    python scripts/make_dashboard.py            # rewrites roles/sglang_monitoring/files/sglang-dsv4-dashboard.json
    python scripts/make_dashboard.py --check    # exit 1 when the committed JSON differs (run by the unit tests)

Every query selects {fleet=~"$fleet", pool=~"$pool", host=~"$host"}; the data source is the template variable
${datasource}.
The lab proves each query returns a series (molecule/monitoring), except those the monitoring guide lists as
appearing only after an event (failures) or only with NVIDIA's DCGM exporter (GPU row).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "roles/sglang_monitoring/files/sglang-dsv4-dashboard.json"
S = 'fleet=~"$fleet", pool=~"$pool", host=~"$host"'
RATE = "$__rate_interval"


def quantile(q: str, metric: str, by: str = "pool, host") -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{S}}}[{RATE}])))"


# Inference routes of the router, and the one the managed sampling defaults do not reach (the guide's route table).
INFERENCE = "/v1/chat/completions|/v1/responses|/v1/completions|/generate"
UNCOVERED = "/v1/completions"
# (row title, [(panel title, unit, [(query, legend)])])
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "Traffic and latency",
        [
            (
                "Requests through the router",
                "reqps",
                [(f"sum by (pool, host) (rate(smg_router_requests_total{{{S}}}[{RATE}]))", "{{pool}} {{host}}")],
            ),
            (
                # SGLang 0.5.23 applies generation_config.json's defaults to /v1/chat/completions and /v1/responses,
                # and /generate gets the same through --preferred-sampling-params: /v1/completions alone keeps
                # temperature 1.0. The router counts requests per route. A request that sends temperature 0 itself
                # is not visible here (the router does not label requests by their body).
                "Share of requests on the route the managed sampling defaults do not cover (/v1/completions)",
                "percentunit",
                [
                    (
                        f'(sum by (pool, host) (rate(smg_http_requests_total{{{S}, path=~"{UNCOVERED}"}}[{RATE}]))'
                        f" or sum by (pool, host)"
                        f' (rate(smg_http_requests_total{{{S}, path=~"{INFERENCE}"}}[{RATE}])) * 0)'
                        f' / sum by (pool, host) (rate(smg_http_requests_total{{{S}, path=~"{INFERENCE}"}}[{RATE}]))',
                        "{{pool}} {{host}}",
                    )
                ],
            ),
            (
                "Requests per server",
                "reqps",
                [
                    (
                        f"sum by (pool, host, role) (rate(sglang:num_requests_total{{{S}}}[{RATE}]))",
                        "{{pool}} {{host}} {{role}}",
                    )
                ],
            ),
            (
                "Time to first token",
                "s",
                [
                    (quantile("0.5", "sglang:time_to_first_token_seconds"), "p50 {{pool}} {{host}}"),
                    (quantile("0.99", "sglang:time_to_first_token_seconds"), "p99 {{pool}} {{host}}"),
                ],
            ),
            (
                "Inter-token latency",
                "s",
                [
                    (quantile("0.5", "sglang:inter_token_latency_seconds"), "p50 {{pool}} {{host}}"),
                    (quantile("0.99", "sglang:inter_token_latency_seconds"), "p99 {{pool}} {{host}}"),
                ],
            ),
            (
                "End-to-end request latency",
                "s",
                [(quantile("0.99", "sglang:e2e_request_latency_seconds"), "p99 {{pool}} {{host}}")],
            ),
            (
                "Router request duration",
                "s",
                [(quantile("0.99", "smg_router_request_duration_seconds"), "p99 {{pool}} {{host}}")],
            ),
        ],
    ),
    (
        "Throughput and queues",
        [
            (
                "Generation throughput",
                "none",
                [(f"sum by (pool, host, role) (sglang:gen_throughput{{{S}}})", "{{pool}} {{host}} {{role}} tok/s")],
            ),
            (
                "Tokens per second",
                "none",
                [
                    (
                        f"sum by (pool, host) (rate(sglang:prompt_tokens_total{{{S}}}[{RATE}]))",
                        "prompt {{pool}} {{host}}",
                    ),
                    (
                        f"sum by (pool, host) (rate(sglang:generation_tokens_total{{{S}}}[{RATE}]))",
                        "generated {{pool}} {{host}}",
                    ),
                ],
            ),
            ("Running requests", "none", [(f"sglang:num_running_reqs{{{S}}}", "{{pool}} {{host}} {{role}}")]),
            ("Waiting requests", "none", [(f"sglang:num_queue_reqs{{{S}}}", "{{pool}} {{host}} {{role}}")]),
        ],
    ),
    (
        "KV cache and PD transfer",
        [
            ("KV cache token usage", "percentunit", [(f"sglang:token_usage{{{S}}}", "{{pool}} {{host}} {{role}}")]),
            ("Prefix cache hit rate", "percentunit", [(f"sglang:cache_hit_rate{{{S}}}", "{{pool}} {{host}} {{role}}")]),
            (
                "PD queues",
                "none",
                [
                    (f'sglang:num_prefill_bootstrap_queue_reqs{{{S}, role="prefill"}}', "bootstrap {{pool}} {{host}}"),
                    (f'sglang:num_prefill_inflight_queue_reqs{{{S}, role="prefill"}}', "inflight {{pool}} {{host}}"),
                    (f'sglang:num_decode_prealloc_queue_reqs{{{S}, role="decode"}}', "prealloc {{pool}} {{host}}"),
                    (f'sglang:num_decode_transfer_queue_reqs{{{S}, role="decode"}}', "transfer {{pool}} {{host}}"),
                ],
            ),
            (
                "KV transfer latency (prefill side)",
                "ms",
                [
                    (quantile("0.5", "sglang:kv_transfer_latency_ms"), "p50 {{pool}} {{host}}"),
                    (quantile("0.99", "sglang:kv_transfer_latency_ms"), "p99 {{pool}} {{host}}"),
                ],
            ),
            (
                "KV transfer speed (prefill side)",
                "none",
                [(quantile("0.5", "sglang:kv_transfer_speed_gb_s"), "median GB/s {{pool}} {{host}}")],
            ),
            (
                "KV-transfer and bootstrap failures",
                "none",
                [
                    (
                        f"sum by (pool, host, role) (increase(sglang:num_transfer_failed_reqs_total{{{S}}}[{RATE}]))",
                        "transfer {{host}} {{role}}",
                    ),
                    (
                        f"sum by (pool, host, role) (increase(sglang:num_bootstrap_failed_reqs_total{{{S}}}[{RATE}]))",
                        "bootstrap {{host}} {{role}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Router and workers",
        [
            ("Worker health (router's view)", "none", [(f"smg_worker_health{{{S}}}", "{{host}} {{worker}}")]),
            ("Circuit breaker state", "none", [(f"smg_worker_cb_state{{{S}}}", "{{host}} {{worker}}")]),
            (
                "Router responses by status",
                "reqps",
                [
                    (
                        f"sum by (host, status_code) (rate(smg_http_responses_total{{{S}}}[{RATE}]))",
                        "{{host}} {{status_code}}",
                    )
                ],
            ),
            (
                "Router 5xx ratio",
                "percentunit",
                [
                    (
                        f'(sum by (pool, host) (rate(smg_http_responses_total{{{S}, status_code=~"5.."}}[{RATE}]))'
                        f" or sum by (pool, host) (rate(smg_http_responses_total{{{S}}}[{RATE}])) * 0)"
                        f" / sum by (pool, host) (rate(smg_http_responses_total{{{S}}}[{RATE}]))",
                        "{{pool}} {{host}}",
                    )
                ],
            ),
            (
                "Router request errors",
                "reqps",
                [
                    (
                        f"sum by (host, error_type) (rate(smg_router_request_errors_total{{{S}}}[{RATE}]))",
                        "{{host}} {{error_type}}",
                    )
                ],
            ),
            ("Requests in flight per worker", "none", [(f"smg_worker_requests_active{{{S}}}", "{{host}} {{worker}}")]),
        ],
    ),
    (
        "Sampling defaults and restarts",
        [
            (
                "generation_config.json holds the managed defaults",
                "none",
                [(f"sglang_dsv4_generation_config_in_sync{{{S}}}", "{{pool}} {{host}}")],
            ),
            (
                "Servers started with the managed defaults",
                "none",
                [(f"sglang_dsv4_server_defaults_in_effect{{{S}}}", "{{pool}} {{host}} {{role}}")],
            ),
            (
                "Managed defaults and the file's values",
                "none",
                [
                    (f"sglang_dsv4_managed_sampling_default{{{S}}}", "managed {{key}} {{host}}"),
                    (f"sglang_dsv4_generation_config_sampling_value{{{S}}}", "file {{key}} {{host}}"),
                ],
            ),
            (
                "Server uptime",
                "s",
                [(f"time() - sglang_dsv4_server_start_time_seconds{{{S}}}", "{{pool}} {{host}} {{role}}")],
            ),
            (
                "Restarts in the last hour",
                "none",
                [(f"changes(sglang_dsv4_server_start_time_seconds{{{S}}}[1h])", "{{pool}} {{host}} {{role}}")],
            ),
            (
                "Last rollout and last heal",
                "none",
                [
                    (f"sglang_dsv4_last_rollout_success{{{S}}}", "rollout succeeded {{host}}"),
                    (
                        f"(time() - sglang_dsv4_last_rollout_timestamp_seconds{{{S}}}) / 86400",
                        "days since the rollout {{host}}",
                    ),
                    (f"sglang_dsv4_last_heal_rewrote{{{S}}}", "heal rewrote the file {{host}}"),
                ],
            ),
            ("Scrape targets up", "none", [(f"up{{{S}}}", "{{host}} {{job}} {{role}}")]),
        ],
    ),
    (
        "GPUs (NVIDIA DCGM exporter)",
        [
            ("GPU utilization", "percent", [(f"DCGM_FI_DEV_GPU_UTIL{{{S}}}", "{{host}} GPU {{gpu}}")]),
            (
                "GPU memory used",
                "percentunit",
                [
                    (
                        f"DCGM_FI_DEV_FB_USED{{{S}}} / (DCGM_FI_DEV_FB_USED{{{S}}} + DCGM_FI_DEV_FB_FREE{{{S}}})",
                        "{{host}} GPU {{gpu}}",
                    )
                ],
            ),
            ("GPU temperature", "celsius", [(f"DCGM_FI_DEV_GPU_TEMP{{{S}}}", "{{host}} GPU {{gpu}}")]),
            ("GPU power", "watt", [(f"DCGM_FI_DEV_POWER_USAGE{{{S}}}", "{{host}} GPU {{gpu}}")]),
            ("Last XID error", "none", [(f"DCGM_FI_DEV_XID_ERRORS{{{S}}}", "{{host}} GPU {{gpu}}")]),
        ],
    ),
]


def dashboard() -> dict:
    panels = []
    panel_id = 0
    y = 0
    for row_title, row_panels in ROWS:
        panel_id += 1
        panels.append(
            {
                "type": "row",
                "id": panel_id,
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for index, (title, unit, queries) in enumerate(row_panels):
            panel_id += 1
            panels.append(
                {
                    "type": "timeseries",
                    "id": panel_id,
                    "title": title,
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                    "gridPos": {"h": 8, "w": 8, "x": (index % 3) * 8, "y": y + (index // 3) * 8},
                    "targets": [
                        {
                            "refId": chr(ord("A") + n),
                            "datasource": {"type": "prometheus", "uid": "${datasource}"},
                            "expr": expr,
                            "legendFormat": legend,
                        }
                        for n, (expr, legend) in enumerate(queries)
                    ],
                }
            )
        y += ((len(row_panels) + 2) // 3) * 8
    variable = {"type": "prometheus", "uid": "${datasource}"}
    return {
        "uid": "sglang-dsv4",
        "title": "SGLang DeepSeek-V4-Flash (prefill/decode)",
        "tags": ["sglang", "deepseek-v4", "dsv4.sglang"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {
            "list": [
                {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus"},
                {
                    "type": "query",
                    "name": "fleet",
                    "label": "Fleet",
                    "datasource": variable,
                    "query": {"query": 'label_values(up{job="sglang"}, fleet)', "refId": "fleet"},
                    "definition": 'label_values(up{job="sglang"}, fleet)',
                    "refresh": 2,
                    "multi": True,
                    "includeAll": True,
                    "allValue": ".*",
                },
                # xPyD: a PD pool (its prefill, decode and router hosts); a host of its own is a pool named after it.
                {
                    "type": "query",
                    "name": "pool",
                    "label": "Pool",
                    "datasource": variable,
                    "query": {"query": 'label_values(up{job="sglang", fleet=~"$fleet"}, pool)', "refId": "pool"},
                    "definition": 'label_values(up{job="sglang", fleet=~"$fleet"}, pool)',
                    "refresh": 2,
                    "multi": True,
                    "includeAll": True,
                    "allValue": ".*",
                },
                {
                    "type": "query",
                    "name": "host",
                    "label": "Host",
                    "datasource": variable,
                    "query": {
                        "query": 'label_values(up{job=~"sglang|sglang-router", fleet=~"$fleet", pool=~"$pool"}, host)',
                        "refId": "host",
                    },
                    "definition": 'label_values(up{job=~"sglang|sglang-router", fleet=~"$fleet", pool=~"$pool"}, host)',
                    "refresh": 2,
                    "multi": True,
                    "includeAll": True,
                    "allValue": ".*",
                },
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if OUT.read_text() != render():
            print(f"{OUT} is out of date: run python scripts/make_dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
