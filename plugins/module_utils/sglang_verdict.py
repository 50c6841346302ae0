"""The verification's judgement of what a host answered (module sglang_ask's `judge`, the sglang_verify role).

Judged in the call that asked, so that the call that proves a host can also close its apply (its result, then the
rollout lock) only when the proof holds. Every check of the verification, each failure one sentence naming the
server or the router, the host and what was seen:
- both servers run with `--sampling-defaults model` (their /server_info);
- each server's current start logged exactly the expected defaults: every managed value, and no sampling key that
  generation_config.json does not hold (module_utils/sglang_sampling_defaults.py);
- the router answered every chat request 200, the answers finished normally, differ from each other (identical
  answers mean greedy decoding) and stay under the repetition limit. The last answer (temperature 0) is only reported;
- native /generate gets the same defaults: each server's /server_info reports exactly the managed ones as its
  preferred_sampling_params, the router answered a /generate request that left them out, and where the server
  reports the sampling it resolved for it (the lab stand-in does), that holds every managed value;
- each server runs the weights the model directory holds: its /model_info reports the weight version of the
  directory's weights manifest now (module_utils/sglang_records.py).
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import defaults_errors


def repetition(text: str, n: int = 3) -> float:
    """Share of the text's word n-grams that repeat an earlier one: 0 for varied text, near 1 for a loop."""
    words = str(text).split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return round(1 - len(set(grams)) / len(grams), 3)


def defaults_failures(asked: dict[str, Any], managed: dict[str, Any], host: str) -> list[str]:
    """The servers that do not run with the model's defaults, or did not log exactly the expected ones."""
    failures = [
        f"{name} on {host} runs with sampling_defaults={mode}: it ignores generation_config.json."
        for name, mode in asked["modes"].items()
        if mode != "model"
    ]
    on_disk = asked.get("file_sampling")
    for name, logged in asked["logged"].items():
        wrong = defaults_errors(managed, logged, on_disk)
        if wrong:
            others = f" and the other sampling keys of the file ({json.dumps(on_disk)})" if on_disk else ""
            failures.append(
                f"{name} on {host} logged {logged if logged is not None else 'no defaults line'} at its current"
                f" start; expected exactly {managed}{others}: {'; '.join(wrong)}."
            )
    return failures


def answers_failures(
    answers: list[dict[str, Any]], requests: int, max_repetition: float, host: str, router_url: str
) -> list[str]:
    """What is wrong with the router's answers to the chat requests (all but the last, temperature 0, answer)."""
    chat = answers[:-1]
    statuses = [a["status"] for a in chat]
    if set(statuses) != {200}:
        messages = "; ".join(dict.fromkeys(str(a.get("msg")) for a in chat))
        return [f"The router at {router_url} on {host} answered {statuses} to the chat requests ({messages})."]
    texts = [str(a.get("content")) for a in chat]
    finish = [a.get("finish_reason") for a in chat]
    shares = [repetition(text) for text in texts]
    if (
        set(finish) - {"stop", "length"}
        or (requests >= 2 and len(set(texts)) < 2)
        or (shares and max(shares) > max_repetition)
    ):
        return [
            f"On {host}: {len(set(texts))} different answers to {requests} identical requests (identical answers"
            f" mean greedy decoding), finish reasons {finish}, repeated 3-gram shares {shares}"
            f" (limit sglang_verify_max_repetition={max_repetition})."
        ]
    return []


def _same(value: Any, want: Any) -> bool:
    """Equal as numbers where both are numbers (0.6 from JSON and 0.6 from YAML), else equal."""
    try:
        return float(value) == float(want)
    except (TypeError, ValueError):
        return value == want


def preferred_matches(preferred: Any, managed: dict[str, Any]) -> bool:
    """Whether a server's preferred_sampling_params are exactly the managed defaults (the same keys, equal values)."""
    return (
        isinstance(preferred, dict)
        and set(preferred) == set(managed)
        and all(_same(preferred[key], managed[key]) for key in managed)
    )


def generate_failures(asked: dict[str, Any], managed: dict[str, Any], host: str, router_url: str) -> list[str]:
    """What keeps native /generate from the managed defaults: a server whose preferred_sampling_params differ from
    them, a router that did not answer /generate, or a resolution the server reports that differs."""
    failures = []
    for name, preferred in (asked.get("preferred") or {}).items():
        if not preferred_matches(preferred, managed):
            failures.append(
                f"{name} on {host} runs with preferred_sampling_params={json.dumps(preferred)}; expected exactly"
                f" {json.dumps(managed, sort_keys=True)}: native /generate would sample with other defaults than the"
                " chat routes (its --preferred-sampling-params come from the layout's sampling.env)."
            )
    generated = asked.get("generated")
    if generated is None:
        return failures
    if generated["status"] != 200:
        failures.append(
            f"The router at {router_url} on {host} answered {generated['status']} to a /generate request without"
            f" sampling parameters ({generated.get('msg')})."
        )
    elif isinstance(generated.get("resolved"), dict):
        resolved = generated["resolved"]
        wrong = sorted(key for key in managed if not _same(resolved.get(key), managed[key]))
        if wrong:
            failures.append(
                f"On {host}, a /generate request without sampling parameters was sampled with {json.dumps(resolved)}:"
                f" {', '.join(f'{key}={resolved.get(key)!r}, expected {managed[key]!r}' for key in wrong)}."
            )
    return failures


def failures(asked: dict[str, Any], judge: dict[str, Any], router_url: str) -> list[str]:
    """Every failure of the verification of what `asked` holds (module sglang_ask's result), in the order the
    verification states them; empty when the host is proven."""
    host = judge["host"]
    # A server host of a PD pool across hosts has no router: its pool's router host asks the questions and judges
    # the answers; this host proves its own servers.
    asked_router = bool(router_url)
    return (
        defaults_failures(asked, judge["managed"], host)
        + (
            answers_failures(asked["answers"], int(judge["requests"]), float(judge["max_repetition"]), host, router_url)
            if asked_router
            else []
        )
        + generate_failures(asked, judge["managed"], host, router_url)
        + weights_failures(asked, host)
        + transfers_failures(asked, host, router_url)
    )


def transfers_failures(asked: dict[str, Any], host: str, router_url: str) -> list[str]:
    """A PD pool across hosts (module sglang_ask's `transfers`, on its router host): every request the router
    answered must have crossed from a prefill of the pool to a decode (SGLang counts each KV transfer on the prefill
    side); a count that cannot be read fails, never counted as zero."""
    transfers = asked.get("transfers")
    if not transfers:
        return []
    if transfers["unreadable"]:
        return [
            f"On {host}, the pool's KV transfers could not be read ({'; '.join(transfers['unreadable'])}): the"
            " verification cannot prove that the router's requests crossed from a prefill to a decode."
        ]
    counted = sum(transfers["counted"].values())
    if counted < transfers["answered"]:
        per = ", ".join(f"{name} {moved:g}" for name, moved in sorted(transfers["counted"].items()))
        return [
            f"The router at {router_url} on {host} answered {transfers['answered']} request(s), but the pool's"
            f" prefills counted {counted:g} KV transfer(s) meanwhile ({per}): a request served without its prefill's"
            " KV cache crossing to a decode."
        ]
    return []


def weights_failures(asked: dict[str, Any], host: str) -> list[str]:
    """The servers that report another weight version than the model directory's weights manifest gives."""
    weights = asked.get("weights")
    if not weights:
        return []
    return [
        f"{name} on {host} reports weight_version={reported!r} (its /model_info); the weights in"
        f" {weights['model_path']} are {weights['expected']!r} ({weights['files']} weight files): it does not run"
        " the weights the directory holds."
        for name, reported in sorted(weights["servers"].items())
        if reported != weights["expected"]
    ]
