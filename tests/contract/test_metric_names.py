"""Every metric name the dashboard and the alert rules use, held to what the real components define.

- sglang:* against sglang 0.5.23's own metric definitions (metrics_collector.py, read as source): name, type and
  label names, which is also what the lab stand-in must emit;
- smg_* against the sglang-router 0.3.2 binary (its metric names and label names are literals there);
- DCGM_FI_* against dcgm-exporter's default counters (dcgm_default_counters.txt);
- sglang_dsv4_* against the collection's own helper (plugins/module_utils/sglang_metrics.py).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from plugins.module_utils.sglang_metrics import METRIC_HELP
from roles.sglang_monitoring.tests.test_promtool import render_rules

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DASHBOARD = json.loads((ROOT / "roles/sglang_monitoring/files/sglang-dsv4-dashboard.json").read_text())
NAME = re.compile(r"(?<![\w:\"])((?:sglang:|smg_|DCGM_FI_|sglang_dsv4_)[A-Za-z0-9_:]+)")
SUFFIXES = ("_bucket", "_sum", "_count")
PROMQL_WORDS = re.compile(r"\b(by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def _standin():
    spec = importlib.util.spec_from_file_location("standin", ROOT / "roles/lab_hosts/files/sglang_lab_standin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STANDIN = _standin()


def queries() -> list[str]:
    exprs = [t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", [])]
    import yaml

    rules = yaml.safe_load(render_rules())
    return exprs + [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def used(prefix: str) -> set[str]:
    names = set()
    for expr in queries():
        for name in NAME.findall(expr):
            if name.startswith(prefix):
                base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
                names.add(base)
    return names


@pytest.fixture(scope="module")
def sglang_metrics(sglang_python: str) -> dict[str, tuple]:
    """name -> (type, collector class, extra label names) from sglang's metrics_collector.py."""
    out = subprocess.run(
        [sglang_python, "-c", "import importlib.util as u; print(u.find_spec('sglang').submodule_search_locations[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    source = Path(out.stdout.strip()) / "srt/observability/metrics_collector.py"
    tree = ast.parse(source.read_text())
    found: dict[str, tuple] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for call in (n for n in ast.walk(cls) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
            kwargs = {k.arg: k.value for k in call.keywords}
            name = kwargs.get("name")
            if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
                continue
            extra = tuple(
                c.value for c in ast.walk(kwargs.get("labelnames", ast.Constant(None))) if isinstance(c, ast.Constant)
            )
            buckets = kwargs.get("buckets")
            literal = (
                tuple(float(e.value) for e in buckets.elts)
                if isinstance(buckets, ast.Tuple | ast.List) and all(isinstance(e, ast.Constant) for e in buckets.elts)
                else None
            )
            extra = tuple(e for e in extra if isinstance(e, str))
            found[name.value] = (call.func.id.lower(), cls.name, extra, literal)
    base_labels = {}
    for node in ast.walk(tree):
        keys = tuple(k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant))
        if isinstance(node, ast.Dict) and "model_name" in keys:
            base_labels["scheduler" if "tp_rank" in keys else "tokenizer"] = keys
    found["__labels__"] = base_labels  # type: ignore[assignment]
    return found


def test_the_standins_series_are_sglangs(sglang_metrics: dict) -> None:
    labels = sglang_metrics["__labels__"]
    assert STANDIN.SCHEDULER_LABELS == labels["scheduler"]
    assert STANDIN.TOKENIZER_LABELS == labels["tokenizer"]
    collectors = {"scheduler": "SchedulerMetricsCollector", "tokenizer": "TokenizerMetricsCollector"}
    for name, (kind, collector, extra, buckets) in STANDIN.METRICS.items():
        assert name in sglang_metrics, f"{name} is not an SGLang 0.5.23 metric"
        real_kind, real_class, real_extra, real_buckets = sglang_metrics[name]
        assert (kind, collectors[collector], extra) == (real_kind, real_class, real_extra), name
        if real_buckets is not None:
            assert tuple(float(b) for b in buckets) == real_buckets, name


def test_sglang_names_in_the_dashboard_and_rules_exist_and_the_standin_emits_them(sglang_metrics: dict) -> None:
    names = used("sglang:")
    assert names, "no sglang: metric found in the queries"
    assert names <= set(sglang_metrics), names - set(sglang_metrics)
    assert names <= set(STANDIN.METRICS), names - set(STANDIN.METRICS)


def test_router_names_and_labels_exist_in_the_router(router_binary_strings: str) -> None:
    names = used("smg_")
    assert {"smg_worker_health", "smg_http_responses_total", "smg_router_request_errors_total"} <= names
    for name in names:
        assert re.search(re.escape(name) + r"(?![a-z_])", router_binary_strings), (
            f"{name} is not a metric of sglang-router"
        )
    for label in ("worker", "status_code", "error_type"):
        assert any(label in q for q in queries())
        assert label in router_binary_strings


def test_gpu_names_are_dcgm_default_counters() -> None:
    documented = {
        line.strip() for line in (HERE / "dcgm_default_counters.txt").read_text().splitlines() if line[:1] not in "#"
    }
    names = used("DCGM_FI_")
    assert names and names <= documented, names - documented


def test_collection_names_are_written_by_the_helper() -> None:
    names = used("sglang_dsv4_")
    assert names and names <= set(METRIC_HELP), names - set(METRIC_HELP)
    # Every series the helper writes is on the dashboard or in a rule.
    assert set(METRIC_HELP) - names <= {"sglang_dsv4_managed_defaults_present"}
