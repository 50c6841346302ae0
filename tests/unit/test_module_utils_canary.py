"""The canary analysis (module_utils/sglang_canary.py, filter/sglang_canary.py): queries, verdicts, thresholds."""

from __future__ import annotations

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_canary as canary

THRESHOLDS = {
    "initial_delay": 60,
    "interval": 60,
    "sample_seconds": 30,
    "count": 5,
    "failure_limit": 3,
    "min_success": 0.99,
    "max_latency_ratio": 1.5,
    "latency_margin": 0.05,
    "max_repetition": 0.5,
    "max_signal_age": 300,
}
STABLE = ["gpu-2", "gpu-3", "gpu-4"]


def healthy(**override) -> dict:
    """A round's samples where the canary (gpu-1) looks like the hosts not yet changed."""
    samples = {
        **{check: dict.fromkeys(["gpu-1", *STABLE], 1.0) for check, _job, _role in canary.TARGETS},
        "requests": dict.fromkeys(["gpu-1", *STABLE], 300.0),
        "success": dict.fromkeys(["gpu-1", *STABLE], 1.0),
        "ttft_p99": {"gpu-1": 0.21, "gpu-2": 0.2, "gpu-3": 0.19, "gpu-4": 0.25},
        "itl_p99": dict.fromkeys(["gpu-1", *STABLE], 0.02),
        "transfer_failures": {},
        "bootstrap_failures": {},
        "defaults_in_effect": dict.fromkeys(["gpu-1", *STABLE], 1.0),
        "defaults_age": dict.fromkeys(["gpu-1", *STABLE], 40.0),
    }
    for check, values in override.items():
        samples[check] = {**samples[check], **values} if values else {}
    return samples


VARIED = "the quick brown fox jumps over the lazy dog while a cat sleeps on the warm mat by the door"
LOOPING = "the the the the the the the the the the the the the the the the the the the the"


def answers(*texts, status: int = 200) -> list[dict]:
    return [{"status": status, "content": text} for text in texts]


def judge(samples: dict, given: list | None = None, failed: tuple = (), **thresholds) -> dict:
    given = answers(VARIED, VARIED) if given is None else given
    return canary.verdict(samples, "gpu-1", STABLE, {**THRESHOLDS, **thresholds}, given, failed)


def test_a_canary_like_the_others_passes():
    result = judge(healthy())
    assert result == {"ok": True, "failures": [], "values": result["values"]}
    assert result["values"]["ttft_p99_stable"] == 0.2  # the median of the hosts not yet changed


@pytest.mark.parametrize(
    ("override", "given", "reason"),
    [
        ({"success": {"gpu-1": 0.95}}, None, "success ratio 0.9500 < 0.99"),
        ({"ttft_p99": {"gpu-1": 1.9}}, None, "time to first token p99 1.900 s is 9.50x the hosts not yet changed"),
        ({"itl_p99": {"gpu-1": 0.2}}, None, "inter-token latency p99 0.200 s is 10.00x"),
        ({"transfer_failures": {"gpu-1": 2.0}}, None, "2 PD bootstrap or KV transfer failure(s)"),
        ({"bootstrap_failures": {"gpu-1": 1.0}}, None, "1 PD bootstrap or KV transfer failure(s)"),
        ({"defaults_in_effect": {"gpu-1": 0.0}}, None, "does not run with the managed sampling defaults"),
        ({"up_decode": {"gpu-1": 0.0}}, None, "Prometheus cannot scrape the canary's job sglang, role decode (up 0)"),
        ({"up_node": {"gpu-1": 0.0}}, None, "Prometheus cannot scrape the canary's job node (up 0)"),
        ({"defaults_age": {"gpu-1": 900.0}}, None, "the canary's defaults were last checked 900 s ago, more than"),
        ({}, answers(VARIED, LOOPING), "answers to the fixed prompts repeat themselves (0.94 > 0.5)"),
    ],
)
def test_each_check_fails_its_round_by_name(override, given, reason):
    result = judge(healthy(**override), given)
    assert not result["ok"] and any(reason in failure for failure in result["failures"]), result["failures"]


@pytest.mark.parametrize(
    ("override", "given", "failed", "reason"),
    [
        ({"requests": None, "success": None}, None, (), "no client traffic: the canary's router routed no inference"),
        ({"requests": {"gpu-1": 0.0}}, None, (), "no client traffic: the canary's router routed no inference"),
        ({"success": None}, None, (), "no data: the success ratio of the canary's routed requests"),
        ({"defaults_age": None}, None, (), "no data: when the managed defaults were last checked"),
        ({"ttft_p99": None}, None, (), "no data: time to first token p99 of the canary"),
        ({"itl_p99": None}, None, (), "no data: inter-token latency p99 of the canary"),
        ({"defaults_in_effect": None}, None, (), "no data: whether the managed defaults are in effect"),
        ({"up_router": None}, None, (), "no data: Prometheus has no up series of the canary's job sglang-router"),
        (
            {"up_prefill": None},
            None,
            (),
            "no data: Prometheus has no up series of the canary's job sglang, role prefill",
        ),
        ({}, [], (), "no data: the fixed prompts got no answer"),
        ({}, answers(VARIED, status=503), (), "no data: the fixed prompt 1 got no answer (status 503)"),
        ({}, answers(VARIED, ""), (), "the answer to fixed prompt 2 has 0 word(s), fewer than the 12"),
        ({}, answers(None), (), "the answer to fixed prompt 1 has 0 word(s)"),
        ({}, answers("Paris."), (), "the answer to fixed prompt 1 has 1 word(s)"),
        ({}, None, ("transfer_failures",), "no data: the transfer_failures query failed"),
        ({}, None, ("up_node", "requests"), "no data: the requests query failed"),
    ],
)
def test_no_data_is_a_failure_never_a_pass(override, given, failed, reason):
    samples = healthy()
    for check, values in override.items():
        samples[check] = {} if values is None else {**samples[check], **values}
    result = judge(samples, given, failed)
    assert not result["ok"] and any(reason in failure for failure in result["failures"]), result["failures"]


def test_hosts_not_yet_changed_without_latency_data_fail_the_round():
    samples = healthy()
    samples["ttft_p99"] = {"gpu-1": 0.2}
    result = judge(samples)
    assert "no data: time to first token p99 of the hosts not yet changed" in result["failures"]


def test_a_tiny_latency_above_the_ratio_but_within_the_margin_passes():
    assert judge(healthy(itl_p99={"gpu-1": 0.04}))["ok"]  # 2x of 0.02 s, but only 0.02 s more
    assert not judge(healthy(itl_p99={"gpu-1": 0.04}), latency_margin=0.01)["ok"]


def test_queries_select_the_hosts_by_their_monitoring_label_and_window():
    q = canary.queries(["gpu-1.example.com", "gpu-2"], 60)
    assert set(q) == {
        "up_prefill",
        "up_decode",
        "up_router",
        "up_node",
        "requests",
        "success",
        "ttft_p99",
        "itl_p99",
        "transfer_failures",
        "bootstrap_failures",
        "defaults_in_effect",
        "defaults_age",
    }
    assert 'host=~"gpu-1\\\\.example\\\\.com|gpu-2"' in q["success"] and "[60s]" in q["success"]
    assert 'role="decode"' in q["ttft_p99"] and "sglang:time_to_first_token_seconds_bucket" in q["ttft_p99"]
    # Routed inference requests only: the router's answers to probes and scrapes are no traffic.
    assert (
        'smg_http_requests_total{host=~"gpu-1\\\\.example\\\\.com|gpu-2",path=~"/v1/chat/completions|' in q["requests"]
    )
    assert "smg_http_responses_total" not in q["requests"]
    assert 'up{host=~"gpu-1\\\\.example\\\\.com|gpu-2",job="sglang",role="prefill"}' in q["up_prefill"]
    assert 'job="node"}' in q["up_node"]
    # The failure totals of the servers running now only: a series not sampled within the window is a stopped
    # server's (a federating Prometheus keeps it), one counter per query.
    for check, name in canary.FAILURE_COUNTERS.items():
        series = name + '{host=~"gpu-1\\\\.example\\\\.com|gpu-2"}'
        assert q[check] == f"sum by (host) ({series} and (time() - timestamp({series}) < 60))"
    with pytest.raises(ValueError, match="cannot be a Prometheus label value"):
        canary.queries(['gpu-1"} or vector(1) #'], 60)


def test_queries_keep_to_the_fleet_when_given():
    q = canary.queries(["gpu-1"], 30, "prod/eu@1")
    assert all(query.count('fleet="prod/eu@1"') >= 1 for query in q.values()), q
    assert 'fleet="' not in canary.queries(["gpu-1"], 30)["requests"]
    with pytest.raises(ValueError, match="fleet"):
        canary.queries(["gpu-1"], 30, 'prod"} or vector(1)')


def test_a_window_without_client_traffic_fails_unless_allowed_by_name():
    """The balancer's probes and the analysis' own prompts are not in the count: zero routed requests is no traffic,
    which proves nothing; allowed by name, the quiet round passes on its other checks (latencies not judged)."""
    quiet = healthy(requests={"gpu-1": 0.0}, success={"gpu-1": 1.0}, ttft_p99=None, itl_p99=None)
    result = judge(quiet)
    assert not result["ok"]
    assert [f for f in result["failures"] if "traffic" in f] == [
        "no client traffic: the canary's router routed no inference request in the window"
        f" ({canary.INFERENCE_PATHS}; the analysis' own prompts come after it). Without traffic the analysis proves"
        " nothing; allow it by name with sglang_rollout_canary_allow_no_traffic=true"
    ]
    assert not any("latency" in f for f in result["failures"]), result["failures"]
    allowed = judge(quiet, allow_no_traffic=True)
    assert allowed["ok"], allowed["failures"]
    # Allowing a quiet window never excuses a bad one: its other checks still fail it.
    assert not judge({**quiet, "defaults_in_effect": {"gpu-1": 0.0}}, allow_no_traffic=True)["ok"]
    # A failed requests query is no data, not "no traffic".
    failed = judge(healthy(requests=None), failed=("requests",), allow_no_traffic=True)
    assert "no data: the requests query failed" in failed["failures"]


def test_an_answer_becomes_host_values_and_nan_is_no_data():
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"host": "gpu-1"}, "value": [1, "0.5"]},
                {"metric": {"host": "gpu-2"}, "value": [1, "NaN"]},
                {"metric": {}, "value": [1, "3"]},
            ],
        },
    }
    assert canary.by_host(answer) == {"gpu-1": 0.5}
    assert canary.by_host({}) == {}


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "Inf"])
def test_nan_and_infinities_are_no_data_so_a_baseline_never_disables_a_check(value):
    answer = {"data": {"result": [{"metric": {"host": h}, "value": [1, value]} for h in STABLE]}}
    assert canary.by_host(answer) == {}
    samples = healthy()
    samples["ttft_p99"] = {"gpu-1": 9.0, **canary.by_host(answer)}
    result = judge(samples)
    assert "no data: time to first token p99 of the hosts not yet changed" in result["failures"]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("interval", 2, "sglang_rollout_canary_interval=2 must be an integer of seconds in 5..3600"),
        ("count", "five", "sglang_rollout_canary_count='five' must be an integer in 1..100"),
        ("count", 2.5, "sglang_rollout_canary_count=2.5 must be an integer in 1..100"),
        ("min_success", 1.5, "sglang_rollout_canary_min_success=1.5 must be a number in (0, 1]"),
        ("max_latency_ratio", 0.5, "sglang_rollout_canary_max_latency_ratio=0.5 must be a number of at least 1"),
        ("max_repetition", True, "sglang_rollout_canary_max_repetition=True must be a number in [0, 1]"),
        ("failure_limit", 5, "sglang_rollout_canary_failure_limit=5 must be below sglang_rollout_canary_count=5"),
        ("sample_seconds", 0, "sglang_rollout_canary_sample_seconds=0 must be an integer of seconds in 1..3600"),
        ("max_signal_age", 0, "sglang_rollout_canary_max_signal_age=0 must be an integer of seconds in 1..86400"),
        ("allow_no_traffic", "maybe", "sglang_rollout_canary_allow_no_traffic='maybe' must be true or false"),
        ("fleet", 'a"}', "sglang_rollout_canary_fleet='a\"}' must be letters, digits and _ . : @ / -"),
        # The flake this rule ends: 15 s windows over a 5 s scrape federated every 5 s held two samples at best.
        (
            "sample_seconds",
            31,
            "sglang_rollout_canary_interval=60 must be at least twice sglang_rollout_canary_sample_seconds=31 (62 s)",
        ),
    ],
)
def test_bad_thresholds_are_refused_by_name(name, value, message):
    errors = canary.threshold_errors({**THRESHOLDS, name: value})
    assert any(message in error for error in errors), errors


def test_a_window_too_short_for_two_samples_is_refused_only_where_the_analysis_runs():
    # 15 s rounds over a 5 s scrape federated every 5 s: the window held two samples at best, one when a scrape was
    # late, and the round failed for want of data. Without the analysis no round runs.
    short = {**THRESHOLDS, "interval": 15, "sample_seconds": 10}
    assert any("at least twice" in error for error in canary.threshold_errors(short))
    assert canary.threshold_errors({**short, "analysis": False}) == []
    assert canary.threshold_errors({**short, "sample_seconds": 4}) == []


def test_thresholds_from_the_command_line_are_numbers_too():
    assert canary.threshold_errors(dict.fromkeys(THRESHOLDS, "1") | {"count": "5", "interval": "60"}) == []


def test_without_hosts_left_unchanged_the_latencies_are_recorded_not_compared():
    samples = {
        **{check: {"gpu-3": 1.0} for check, _job, _role in canary.TARGETS},
        "requests": {"gpu-3": 120.0},
        "success": {"gpu-3": 1.0},
        "ttft_p99": {"gpu-3": 9.0},
        "itl_p99": {"gpu-3": 0.02},
        "defaults_in_effect": {"gpu-3": 1.0},
        "defaults_age": {"gpu-3": 10.0},
    }
    answers = [
        {
            "status": 200,
            "content": "A lighthouse keeper climbs the narrow stairs at dusk to light the lamp for ships at sea.",
        }
    ]
    alone = canary.verdict(samples, "gpu-3", [], THRESHOLDS, answers, [], compare=False)
    assert alone["ok"], alone
    assert alone["values"]["ttft_p99"] == 9.0 and alone["values"]["ttft_p99_stable"] is None
    compared = canary.verdict(samples, "gpu-3", [], THRESHOLDS, answers, [])
    assert "no data: time to first token p99 of the hosts not yet changed" in compared["failures"]
    # Every other check still runs: a failed request fails the round.
    worse = canary.verdict({**samples, "success": {"gpu-3": 0.5}}, "gpu-3", [], THRESHOLDS, answers, [], compare=False)
    assert not worse["ok"] and "success ratio 0.5000" in worse["failures"][0]


def test_a_prometheus_that_cannot_be_reached_fails_the_round_as_no_data_naming_it():
    """No evidence at all is never a pass, whatever the answers say; the round names the host it could not reach."""
    round_ = canary.verdict(
        {}, "gpu-1", STABLE, THRESHOLDS, answers(VARIED, VARIED), [], True, ["prom-1", "ssh: refused"]
    )
    assert round_ == {
        "ok": False,
        "values": {},
        "failures": ["no data: the Prometheus host prom-1 cannot be reached: ssh: refused"],
    }
    # The same through the filter the role calls, with its positional order.
    from ansible_collections.dsv4.sglang.plugins.filter.sglang_canary import sglang_canary_verdict

    assert sglang_canary_verdict({}, "gpu-1", STABLE, THRESHOLDS, [], [], True, ["prom-1", "x"])["failures"] == [
        "no data: the Prometheus host prom-1 cannot be reached: x"
    ]
    # Reached: judged on its samples as always.
    assert canary.verdict({}, "gpu-1", STABLE, THRESHOLDS, answers(VARIED, VARIED), [], True, [])["failures"]


# A PD pool across hosts judged as one unit through its router host r1: prefills p1 and p2, decode d1.
POOL = {"p1": ["prefill"], "p2": ["prefill"], "d1": ["decode"], "r1": ["router"]}
EXPORTS = {"up_prefill": ["p1", "p2"], "up_decode": ["d1"], "up_router": ["r1"], "up_node": [*POOL]}


def pool_samples(**override) -> dict:
    """A round's samples where the pool serves like the hosts not yet changed: each of its hosts exports only the
    series of the services it runs (a prefill host no decode latency, the router host no server series)."""
    samples = healthy()
    for check, hosts in EXPORTS.items():
        samples[check] = {**samples[check], **dict.fromkeys(hosts, 1.0)}
    samples["requests"]["r1"], samples["success"]["r1"] = 500.0, 1.0
    samples["ttft_p99"]["d1"], samples["itl_p99"]["d1"] = 0.22, 0.02
    for check, value in (("defaults_in_effect", 1.0), ("defaults_age", 30.0)):
        samples[check] = {**samples[check], **dict.fromkeys(["p1", "p2", "d1"], value)}
    for check, values in override.items():
        samples[check] = {**samples[check], **values}
    for check in samples:
        for host in [h for h, v in samples[check].items() if v is None]:
            del samples[check][host]
    return samples


def judge_pool(samples: dict, given: list | None = None) -> dict:
    given = answers(VARIED, VARIED) if given is None else given
    return canary.verdict(samples, "r1", STABLE, THRESHOLDS, given, (), True, None, POOL)


def test_a_pool_like_the_others_passes_judged_as_one_unit_each_host_on_the_services_it_runs():
    result = judge_pool(pool_samples())
    assert result == {"ok": True, "failures": [], "values": result["values"]}
    values = result["values"]
    # Traffic from its router host, latency from its decode, defaults from every server.
    assert values["requests"] == 500.0 and values["ttft_p99"] == 0.22 and values["ttft_p99_stable"] == 0.2
    assert values["defaults_in_effect"] == 1.0 and values["defaults_age"] == 30.0 and values["transfer_failures"] == 0


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        # KV transfer failures counted on any server of the pool (the decode that pulled, or a prefill).
        ({"transfer_failures": {"d1": 3.0}}, "3 PD bootstrap or KV transfer failure(s) on d1"),
        ({"transfer_failures": {"p2": 1.0, "d1": 2.0}}, "3 PD bootstrap or KV transfer failure(s) on p2, d1"),
        ({"bootstrap_failures": {"p1": 1.0}}, "1 PD bootstrap or KV transfer failure(s) on p1"),
        # The defaults of every server: one prefill without them fails the pool.
        ({"defaults_in_effect": {"p2": 0.0}}, "a server of p2 does not run with the managed sampling defaults"),
        ({"defaults_in_effect": {"p1": None}}, "no data: whether the managed defaults are in effect"),
        ({"defaults_age": {"p1": 900.0}}, "the defaults of p1 were last checked 900 s ago"),
        ({"defaults_age": {"d1": None}}, "no data: when the managed defaults were last checked"),
        # Latency from the pool's decodes.
        ({"ttft_p99": {"d1": 2.0}}, "time to first token p99 2.000 s is 10.00x the hosts not yet changed"),
        ({"itl_p99": {"d1": None}}, "no data: inter-token latency p99 of the pool's decode(s) d1"),
        # Traffic and success through its router host.
        ({"success": {"r1": 0.9}}, "success ratio 0.9000 < 0.99"),
        ({"requests": {"r1": 0.0}}, "no client traffic: the pool's router (r1) routed no inference request"),
        ({"success": {"r1": None}}, "no data: the success ratio of the requests the pool's router (r1) routed"),
        # Each host's own scrape targets.
        ({"up_prefill": {"p2": None}}, "no data: Prometheus has no up series of p2's job sglang, role prefill"),
        ({"up_decode": {"d1": 0.0}}, "Prometheus cannot scrape d1's job sglang, role decode (up 0)"),
        ({"up_router": {"r1": None}}, "no data: Prometheus has no up series of r1's job sglang-router, role router"),
        ({"up_node": {"p1": None}}, "no data: Prometheus has no up series of p1's job node"),
    ],
)
def test_a_pool_fails_its_round_by_name_on_any_of_its_hosts(override, reason):
    result = judge_pool(pool_samples(**override))
    assert not result["ok"] and any(reason in failure for failure in result["failures"]), result["failures"]


def test_a_pool_host_is_not_asked_for_series_of_services_it_does_not_run():
    # The pool's hosts have no series of the services they do not run (p1 no decode, r1 no server): that passes.
    samples = pool_samples()
    for check in ("up_decode", "up_router"):
        assert "p1" not in samples[check]
    for check in ("up_prefill", "up_decode", "defaults_in_effect", "defaults_age"):
        assert "r1" not in samples[check]
    assert judge_pool(samples)["ok"]
    # Judged as a host of its own, the same router host fails for want of its servers' series.
    single = canary.verdict(samples, "r1", STABLE, THRESHOLDS, answers(VARIED, VARIED), (), True, None, None)
    assert (
        not single["ok"]
        and "no data: Prometheus has no up series of the canary's job sglang, role prefill" in (single["failures"])
    )
