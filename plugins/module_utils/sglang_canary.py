"""The canary analysis: the Prometheus queries that compare the canary hosts with the hosts not yet changed, and
the verdict of one round.

One round looks at one window (the wait before the round's own prompts) of the fleet's own series, as the monitoring
role labels them (fleet, host, role): the router's routed inference requests (smg_http_requests_total by path) and
its 5xx answers, the decode servers' time to first token and inter-token latency (SGLang's histograms), the PD
transfer failures, whether each server runs with the managed defaults and how fresh that check is (the monitoring
timer's sglang_dsv4_server_defaults_in_effect and sglang_dsv4_defaults_check_timestamp_seconds), and an `up` series
of every job each host must have (prefill, decode, router, node). Missing data is a failure of its round, never a
pass: a canary that serves no client, or a Prometheus that lost it, proves nothing (a traffic-free analysis only
when the operator allows it by name). The semantic check (repetition of answers to fixed prompts sent without
sampling parameters) is measured on the canary hosts and passed in.
"""

from __future__ import annotations

import math
import re
from statistics import median
from typing import Any

LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:-]+")
# A fleet label as the monitoring role allows it (matched exactly, never as a regex).
FLEET_VALUE = re.compile(r"[A-Za-z0-9_.:@/-]+")


# The router's inference routes (smg_http_requests_total's path label): its answers to health checks, readiness
# probes and metrics scrapes are no traffic.
INFERENCE_PATHS = "/v1/chat/completions|/v1/responses|/v1/completions|/generate"
# The scrape targets each analysed host must have, as the monitoring role's jobs label them (check, job, role).
# The services a host of its own runs (a pool's hosts each run only those of their topology).
SERVICES = ("prefill", "decode", "router")
TARGETS = (
    ("up_prefill", "sglang", "prefill"),
    ("up_decode", "sglang", "decode"),
    ("up_router", "sglang-router", "router"),
    ("up_node", "node", ""),
)


# The PD failure counters, one query each (a query over both names would give timestamp() two series of one label
# set): the verdict sums them.
FAILURE_COUNTERS = {
    "transfer_failures": "sglang:num_transfer_failed_reqs_total",
    "bootstrap_failures": "sglang:num_bootstrap_failed_reqs_total",
}


def queries(hosts: list[str], window: int, fleet: str | None = None) -> dict[str, str]:
    """PromQL, by check, of one window for these hosts (the monitoring role's `host` label, within its `fleet`
    label when given), each `by (host)`."""
    for value in hosts:
        if not LABEL_VALUE.fullmatch(value):
            raise ValueError(f"{value!r} cannot be a Prometheus label value here")
    if fleet and not FLEET_VALUE.fullmatch(fleet):
        raise ValueError(f"fleet {fleet!r} cannot be a Prometheus label value here")
    # A label value here has no regex character but the dot, escaped for the regex and for the PromQL string.
    select = 'host=~"' + "|".join(h.replace(".", "\\\\.") for h in hosts) + '"'
    if fleet:
        select = f'fleet="{fleet}",{select}'
    w = f"[{int(window)}s]"

    def fresh(name: str) -> str:
        series = f"{name}{{{select}}}"
        return f"sum by (host) ({series} and (time() - timestamp({series}) < {int(window)}))"

    latency = 'histogram_quantile(0.99, sum by (host, le) (rate({name}_bucket{{{select},role="decode"}}{w})))'
    requests = f'sum by (host) (increase(smg_http_requests_total{{{select},path=~"{INFERENCE_PATHS}"}}{w}))'
    errors = f'sum by (host) (increase(smg_http_responses_total{{{select},status_code=~"5.."}}{w}))'
    found = {
        check: f'min by (host) (up{{{select},job="{job}"' + (f',role="{role}"' if role else "") + "})"
        for check, job, role in TARGETS
    }
    return {
        **found,
        # Routed inference requests only (the analysis asks its own prompts after this window ends).
        "requests": requests,
        # The share of them without a 5xx answer (the router's answers have no path label: a 5xx of a health check
        # counts against it too, never for it); no 5xx series at all is none.
        "success": f"clamp_min(1 - ({errors} or {requests} * 0) / {requests}, 0)",
        "ttft_p99": latency.format(name="sglang:time_to_first_token_seconds", select=select, w=w),
        "itl_p99": latency.format(name="sglang:inter_token_latency_seconds", select=select, w=w),
        # Totals since each server's start: the canary's servers started with this change, so every failure they
        # count is the change's (the counters appear only at a first failure: absent is none). Only series sampled
        # within the window: a server that stopped (the one this change replaced) leaves its last totals in a central
        # Prometheus that federates, which keeps the host's timestamps and so marks no series stale.
        **{check: fresh(name) for check, name in FAILURE_COUNTERS.items()},
        "defaults_in_effect": f"min by (host) (sglang_dsv4_server_defaults_in_effect{{{select}}})",
        # How old the host's newest defaults check is: an old one says nothing of the servers running now.
        "defaults_age": f"time() - max by (host) (sglang_dsv4_defaults_check_timestamp_seconds{{{select}}})",
    }


def by_host(answer: dict[str, Any]) -> dict[str, float]:
    """A Prometheus instant-query answer (vector) as host -> value; NaN (0/0, an empty histogram) and +-Inf (a
    quantile above the last finite bucket, a division by zero) are no data."""
    values: dict[str, float] = {}
    for sample in (answer.get("data") or {}).get("result") or []:
        host = (sample.get("metric") or {}).get("host")
        try:
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if host and math.isfinite(value):
            values[host] = value
    return values


# The n-grams the semantic check counts, and the fewest words an answer needs for its share of repeats to say
# anything (a few n-grams that happen to differ prove nothing).
NGRAM = 3
MIN_WORDS = 4 * NGRAM


def repetition(answers: list[dict[str, Any]] | None, n: int = NGRAM) -> tuple[float | None, str]:
    """(the highest share of repeated word n-grams over the answers, "") or (None, why it cannot be judged): no
    answer, an answer that failed, one without content, or one shorter than MIN_WORDS words."""
    if not answers:
        return None, "the fixed prompts got no answer"
    shares = []
    for number, answer in enumerate(answers, 1):
        if not isinstance(answer, dict) or answer.get("status") != 200:
            status = answer.get("status") if isinstance(answer, dict) else None
            return None, f"the fixed prompt {number} got no answer (status {status})"
        content = answer.get("content")
        words = content.split() if isinstance(content, str) else []
        if len(words) < MIN_WORDS:
            have = f"the answer to fixed prompt {number} has {len(words)} word(s)"
            return None, f"{have}, fewer than the {MIN_WORDS} the check needs"
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        shares.append(round(1 - len(set(grams)) / len(grams), 3))
    return max(shares), ""


def verdict(
    samples: dict[str, dict[str, float]],
    canary: str,
    stable: list[str],
    thresholds: dict[str, Any],
    answers: list[dict[str, Any]] | None,
    failed_queries: list[str] | tuple[str, ...] = (),
    compare: bool = True,
    unreachable: tuple[str, str] | list[str] | None = None,
    unit: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """One round for one analysed unit (the canary, or a unit of a later step): {"ok", "failures": [reasons],
    "values": {check: value}}.

    `canary` is the unit's judged host, which runs its router: a host of its own, or a PD pool's router host. `unit`
    maps every host of the unit to the services it runs (default: the canary alone, with prefill, decode and router);
    each host must have the scrape targets of its own services and node, no others. The unit is judged as one: its
    traffic and success ratio from its router; its latencies from its decodes (the worst of them); its PD transfer
    failures summed over its servers; the managed defaults from every server (each must be in effect, checked
    recently). A server with no series fails the round naming it.

    `answers` are the router's answers to the fixed prompts ({status, content}); `failed_queries` the checks
    whose Prometheus query failed: each fails the round, whatever a missing series would otherwise mean. Without
    `compare` (no serving host is left unchanged: the last step), the latencies are recorded, not compared; every
    other check runs as always. `unreachable` ([Prometheus host, Ansible's message]) says the query never reached
    Prometheus: the round has no evidence at all, and fails on that alone."""
    t = normalize(thresholds)[0]
    if unreachable:
        prometheus, why = unreachable
        return {
            "ok": False,
            "values": {},
            "failures": [f"no data: the Prometheus host {prometheus} cannot be reached: {why}"],
        }
    members = {str(host): list(services) for host, services in (unit or {canary: list(SERVICES)}).items()}
    pooled = len(members) > 1
    servers = [host for host, services in members.items() if set(services) & {"prefill", "decode"}]
    decodes = [host for host, services in members.items() if "decode" in services]
    failures: list[str] = [f"no data: the {check} query failed" for check in sorted(set(failed_queries))]
    values: dict[str, Any] = {}

    def whose(host: str) -> str:
        return f"{host}'s" if pooled else "the canary's"

    def of(check: str, host: str) -> float | None:
        return (samples.get(check) or {}).get(host)

    def each(check: str, hosts: list[str], what: str) -> list[float] | None:
        """The check's value of every host, or None (a failure naming each host without one)."""
        found = {host: of(check, host) for host in hosts}
        missing = [host for host, value in found.items() if value is None]
        if missing and check not in failed_queries:
            failures.append(f"no data: {what} of {', '.join(missing)}" if pooled else f"no data: {what}")
        return None if missing or not hosts else [found[host] for host in hosts]

    def baseline(check: str) -> float | None:
        found = [v for h, v in (samples.get(check) or {}).items() if h in stable]
        return median(found) if found else None

    for check, job, role in TARGETS:
        expected = [host for host, services in members.items() if not role or role in services]
        target = f"job {job}" + (f", role {role}" if role else "")
        found = [(host, of(check, host)) for host in expected]
        values[check] = min((v for _h, v in found if v is not None), default=None)
        for host, value in found:
            if value is None:
                failures.append(f"no data: Prometheus has no up series of {whose(host)} {target}")
            elif value != 1:
                failures.append(f"Prometheus cannot scrape {whose(host)} {target} (up {value:g})")
    values["requests"] = of("requests", canary)
    values["success"] = of("success", canary)
    quiet = not values["requests"] and "requests" not in failed_queries
    router = "the canary's router" if not pooled else f"the pool's router ({canary})"
    if quiet and not t["allow_no_traffic"]:
        failures.append(
            f"no client traffic: {router} routed no inference request in the window"
            f" ({INFERENCE_PATHS}; the analysis' own prompts come after it). Without traffic the analysis proves"
            " nothing; allow it by name with sglang_rollout_canary_allow_no_traffic=true"
        )
    elif not quiet and values["success"] is None:
        failures.append(
            "no data: the success ratio of "
            + (f"the requests {router} routed" if pooled else "the canary's routed requests")
        )
    elif not quiet and values["success"] < t["min_success"]:
        failures.append(f"success ratio {values['success']:.4f} < {t['min_success']}")
    compare = compare and not quiet
    for check, label in (("ttft_p99", "time to first token p99"), ("itl_p99", "inter-token latency p99")):
        found = [of(check, host) for host in decodes]
        mine = None if not found or None in found else max(found)
        theirs = baseline(check)
        values[check], values[f"{check}_stable"] = mine, theirs
        if not compare:
            continue
        if mine is None or theirs is None:
            if mine is None and pooled:
                whom = ", ".join(host for host in decodes if of(check, host) is None)
                failures.append(f"no data: {label} of the pool's decode(s) {whom}")
            else:
                failures.append(f"no data: {label} of the {'canary' if mine is None else 'hosts not yet changed'}")
            continue
        if mine > theirs * t["max_latency_ratio"] and mine - theirs > t["latency_margin"]:
            failures.append(
                f"{label} {mine:.3f} s is {mine / theirs if theirs else float('inf'):.2f}x the hosts not yet changed"
                f" ({theirs:.3f} s; limit {t['max_latency_ratio']}x)"
            )
    # Absent counters are no failure, but only from a query that answered.
    counted = {host: sum(of(check, host) or 0.0 for check in FAILURE_COUNTERS) for host in servers}
    unread = [check for check in FAILURE_COUNTERS if check in failed_queries]
    values["transfer_failures"] = None if unread else sum(counted.values())
    if values["transfer_failures"]:
        where = f" on {', '.join(h for h, n in counted.items() if n)}" if pooled else ""
        failures.append(f"{values['transfer_failures']:.0f} PD bootstrap or KV transfer failure(s){where}")
    in_effect = each(
        "defaults_in_effect",
        servers,
        "whether the managed defaults are in effect (sglang_dsv4_server_defaults_in_effect)",
    )
    values["defaults_in_effect"] = None if in_effect is None else min(in_effect)
    off = [host for host in servers if of("defaults_in_effect", host) not in (None, 1)]
    if off:
        failures.append(
            f"a server of {', '.join(off)} does not run with the managed sampling defaults"
            if pooled
            else "a server of the canary does not run with the managed sampling defaults"
        )
    ages = each(
        "defaults_age",
        servers,
        "when the managed defaults were last checked (sglang_dsv4_defaults_check_timestamp_seconds)",
    )
    values["defaults_age"] = None if ages is None else max(ages)
    stale = [host for host in servers if (of("defaults_age", host) or 0) > t["max_signal_age"]]
    if stale:
        worst = max(of("defaults_age", host) for host in stale)
        failures.append(
            f"{'the defaults of ' + ', '.join(stale) if pooled else 'the canary' + chr(39) + 's defaults'} were last"
            f" checked {worst:.0f} s ago, more than sglang_rollout_canary_max_signal_age={t['max_signal_age']}: it"
            " says nothing of the servers running now"
        )
    values["repetition"], why = repetition(answers)
    if values["repetition"] is None:
        failures.append(f"no data: {why}")
    elif values["repetition"] > t["max_repetition"]:
        failures.append(
            f"answers to the fixed prompts repeat themselves ({values['repetition']:.2f} > {t['max_repetition']})"
        )
    return {"ok": not failures, "failures": failures, "values": values}


def describe(thresholds: dict[str, Any]) -> str:
    """The analysis as the plan table shows it."""
    t = normalize(thresholds)[0]
    return (
        f"after {t['initial_delay']} s, {t['count']} rounds of {t['interval']} s, at most {t['failure_limit']} failed:"
        f" client traffic{' (or none, allowed)' if t['allow_no_traffic'] else ''}, success >= {t['min_success']},"
        f" TTFT and ITL p99 <= {t['max_latency_ratio']}x the hosts not yet changed"
        f" (+{t['latency_margin']} s), no PD transfer failure, defaults in effect (checked <= {t['max_signal_age']} s"
        " ago), every service scraped, repetition <="
        f" {t['max_repetition']}; no data fails its round"
    )


RULES = {
    "initial_delay": (int, lambda v: 0 <= v <= 3600, "an integer of seconds in 0..3600"),
    "interval": (int, lambda v: 5 <= v <= 3600, "an integer of seconds in 5..3600"),
    "sample_seconds": (int, lambda v: 1 <= v <= 3600, "an integer of seconds in 1..3600"),
    "count": (int, lambda v: 1 <= v <= 100, "an integer in 1..100"),
    "failure_limit": (int, lambda v: 0 <= v <= 100, "an integer in 0..100"),
    "min_success": (float, lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "max_latency_ratio": (float, lambda v: v >= 1, "a number of at least 1"),
    "latency_margin": (float, lambda v: v >= 0, "a number of seconds, at least 0"),
    "max_repetition": (float, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    "max_signal_age": (int, lambda v: 1 <= v <= 86400, "an integer of seconds in 1..86400"),
}


def _number(value: Any, kind: type) -> int | float | None:
    """A threshold as a number (also from -e key=value, a string), or None when it is not one of this kind."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number) or math.isinf(number) or (kind is int and not number.is_integer()):
        return None
    return int(number) if kind is int else number


def normalize(thresholds: dict[str, Any], prefix: str = "sglang_rollout_canary_") -> tuple[dict, list[str]]:
    """The thresholds as numbers, and the bad ones, each naming its variable."""
    values, errors = {}, []
    for name, (kind, ok, wanted) in RULES.items():
        number = _number(thresholds.get(name), kind)
        if number is None or not ok(number):
            errors.append(f"{prefix}{name}={thresholds.get(name)!r} must be {wanted}")
        values[name] = number
    allow = thresholds.get("allow_no_traffic", False)
    values["allow_no_traffic"] = allow in (True, "true", "True", "yes")
    if allow not in (True, False, "true", "True", "yes", "false", "False", "no"):
        errors.append(f"{prefix}allow_no_traffic={allow!r} must be true or false")
    fleet = thresholds.get("fleet", "")
    if fleet and not (isinstance(fleet, str) and FLEET_VALUE.fullmatch(fleet)):
        errors.append(f"{prefix}fleet={fleet!r} must be letters, digits and _ . : @ / - (a Prometheus label value)")
    if not errors and values["failure_limit"] >= values["count"]:
        errors.append(
            f"{prefix}failure_limit={values['failure_limit']} must be below {prefix}count={values['count']}: an"
            " analysis that allows every round to fail can never fail"
        )
    # A rate over a window needs two samples of its series in it. The newest can be sample_seconds old and the one
    # before it as much older again (the serving hosts' scrape, then the central Prometheus's federation): only a
    # window of twice that always holds two. Shorter, a round fails for want of data whenever a scrape is late.
    analysis = str(thresholds.get("analysis", True)).lower() not in ("false", "0", "no", "off")
    if not errors and analysis and values["interval"] < 2 * values["sample_seconds"]:
        errors.append(
            f"{prefix}interval={values['interval']} must be at least twice {prefix}sample_seconds="
            f"{values['sample_seconds']} ({2 * values['sample_seconds']} s): a shorter window can hold fewer than the"
            " two samples a rate needs, and its round fails for want of data (scrape more often, or lengthen the"
            " interval)"
        )
    return values, errors


def threshold_errors(thresholds: dict[str, Any], prefix: str = "sglang_rollout_canary_") -> list[str]:
    """Bad threshold values, each naming its variable."""
    return normalize(thresholds, prefix)[1]
