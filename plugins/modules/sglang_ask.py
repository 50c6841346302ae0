#!/usr/bin/python
"""Ansible module: in one call on the host, ask the servers what they run with and the router the chat questions."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_ask
short_description: Read what each server runs with, and ask the router chat questions, all at once
description:
  - The verification's and the canary's one call on the host, in place of one C(uri) or C(shell) task per item.
  - With O(ready), first waits until each of those units is active and running and its URL answers 200, within
    O(ready_timeout) and 15 seconds (the restart's own wait, module_utils/sglang_ready.py); a unit that failed, or
    did not get ready in time, fails the call naming it (its journal quoted, keys masked) and nothing is asked.
  - For each of C(servers), its C(/server_info) (only C(sampling_defaults) and C(preferred_sampling_params) are
    returned; the rest holds the API key)
    and the C(Using default chat sampling params) line its current invocation logged (C(journalctl
    _SYSTEMD_INVOCATION_ID=)). A server whose C(/server_info) does not answer 200 fails the call, naming it.
  - Then every question as a client sends it (the served model, one user message, C(max_tokens), and a
    temperature only where the question gives one), all at once through the router, answers in question order.
  - With O(judge), judges the answers as the verification does (module_utils/sglang_verdict.py) and fails, naming
    every failure, when the host is not proven.
  - With O(close) as well, and only once the host is proven, closes the host's apply in the same call (this run's
    result for the monitoring, then the release of this run's rollout lock, module_utils/sglang_close.py), both
    under the fence. A host that is not proven keeps the lock for its rollback.
  - Changes nothing else; runs in check mode too (where it never closes).
extends_documentation_fragment:
  - dsv4.sglang.fence
  - dsv4.sglang.lab_fault
options:
  servers:
    description: Servers to read, each C(name) (its unit) and C(health_url) (C(/health); C(/server_info) is beside it).
    type: list
    elements: dict
    default: []
  router_url:
    description: The router's base URL; empty on a host without a router (a server host of a PD pool across hosts,
      whose router host asks the chat and C(/generate) questions), which asks none.
    type: str
    default: ""
  model:
    description: The served model name a client sends.
    type: str
    required: true
  api_key:
    description: The client key, sent as a bearer token to the servers and the router; empty sends none.
    type: str
    default: ""
  questions:
    description: Prompts, each a string or C(prompt) with an optional C(temperature).
    type: list
    elements: raw
    default: []
  max_tokens:
    description: C(max_tokens) of every question.
    type: int
    default: 64
  timeout:
    description: Seconds each request may take.
    type: int
    default: 120
  ready:
    description: Units to wait for first, each C(name) and C(health_url) (C(/health) of a server, C(/readiness) of
      the router).
    type: list
    elements: dict
    default: []
  ready_timeout:
    description: The units' start timeout (TimeoutStartSec), in seconds, that bounds the wait for O(ready).
    type: int
    default: 600
  generate:
    description: Also send one native C(/generate) request through the router that leaves every sampling default to
      the server (C(prompt), and C(max_new_tokens), the only sampling parameter it sets); its status, and the sampling
      the server resolved where it reports it (the lab stand-in does), are returned as C(generated).
    type: dict
  transfers:
    description:
      - xPyD. The prefills of this host's PD pool across hosts (this host runs its router), each C(name) and
        C(metrics_url). Their KV-transfer count (SGLang's C(sglang:kv_transfer_latency_ms), observed on the prefill
        side) is read before and after the questions, and returned per prefill as C(transfers). With O(judge), the
        pool must have counted at least one transfer for every question the router answered 200 (each crossed from
        a prefill to a decode of the pool); a count that cannot be read fails, never counted as zero.
    type: list
    elements: dict
    default: []
  judge:
    description: Judge the answers as the verification does (the questions are the verification's, the last one at
      temperature 0). C(managed) (the sampling defaults the servers must have logged), C(requests) (how many chat
      questions leave sampling to the server), C(max_repetition), C(host) (the inventory name, for the messages).
    type: dict
  close:
    description: Close the host's apply once it is proven (needs O(judge)). C(status_dir) (where the result goes),
      C(result) (this run's result, the host's time added), C(lock) (C(path) and C(run_id) of the lock to release).
      The lab fault point C(before_close) is between the verdict and the close.
    type: dict
  generation_config:
    description: The model's generation_config.json; with O(servers), its sampling keys are returned as
      C(file_sampling), what each server's logged defaults must equal exactly (no other key).
    type: path
  model_path:
    description: The model directory; with O(servers), the weight version of its weights manifest now
      (module_utils/sglang_records.py) and each server's C(/model_info) weight_version are returned as C(weights),
      and O(judge) fails a server that reports another one.
    type: path
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Ask both servers and the router
  dsv4.sglang.sglang_ask:
    servers:
      - {name: sglang-dsv4-prefill, health_url: "http://127.0.0.1:30000/health"}
      - {name: sglang-dsv4-decode, health_url: "http://127.0.0.1:30001/health"}
    router_url: http://127.0.0.1:8000
    model: deepseek-ai/DeepSeek-V4-Flash
    api_key: "{{ client_key }}"
    questions: [Say hello., {prompt: Say hello., temperature: 0}]
"""

RETURN = r"""
failures:
  description: What the judgement found wrong (empty when the host is proven, or without O(judge)).
  returned: always
  type: list
closed:
  description: The close's C(result_file) and C(released) (whether this run's lock was released), or null.
  returned: always
  type: dict
modes:
  description: Per server, the C(sampling_defaults) its C(/server_info) reports.
  returned: always
  type: dict
preferred:
  description: Per server, the C(preferred_sampling_params) its C(/server_info) reports (the defaults of native
    C(/generate)), or null.
  returned: always
  type: dict
generated:
  description: With O(generate), the C(/generate) answer's C(status), C(msg) and C(resolved) (the sampling the server
    resolved, where it reports it; else null); null without.
  returned: always
  type: dict
ready:
  description: The wait for O(ready) - C(units) (per unit, its last ActiveState/SubState and URL status), C(waited)
    (seconds) and C(failure) (null, or why it failed).
  returned: always
  type: dict
logged:
  description: Per server, the defaults its current invocation logged at start, or null when it logged none.
  returned: always
  type: dict
file_sampling:
  description: The sampling keys O(generation_config) holds (null when not asked, or the file cannot be read).
  returned: always
  type: dict
weights:
  description: With O(model_path) and O(servers), C(model_path), C(expected) (the weight version of the directory's
    weights manifest), C(files) (how many weight files) and C(servers) (per server, the weight_version its
    C(/model_info) reports); null without.
  returned: always
  type: dict
answers:
  description: Per question, in order, C(status) (0 when nothing answered), C(msg), C(content) and C(finish_reason).
  returned: always
  type: list
"""

import json
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils import (
    sglang_close,
    sglang_lab_fault,
    sglang_probe,
    sglang_ready,
    sglang_verdict,
)
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import load
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_http import call
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_records import UnreadableWeightsError, weights_now
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import sampling_of

# Every question at once, up to this many in flight (the verification asks at most 64 and one greedy).
MAX_PARALLEL = 16


def served_with(module: AnsibleModule, server: dict) -> dict:
    """The server's own answer: /server_info's sampling_defaults and preferred_sampling_params
    (module_utils/sglang_probe.py)."""
    served, why = sglang_probe.served_with(server["health_url"], module.params["api_key"])
    if why:
        module.fail_json(msg=f"{server['name']}: {why}")
    return served


def logged_defaults(module: AnsibleModule, unit: str) -> dict | None:
    """The defaults the unit's current invocation logged at its start (its journal, this invocation only)."""
    return sglang_probe.logged_defaults(sglang_probe.current_invocation(unit))


def weights(module: AnsibleModule) -> dict | None:
    """The weight version the model directory's manifest gives now, and the one each server reports."""
    p = module.params
    if not (p["servers"] and p["model_path"]):
        return None
    reported = {}
    for server in p["servers"]:
        version, why = sglang_probe.weight_version(server["health_url"], p["api_key"])
        if why:
            module.fail_json(msg=f"{server['name']}: {why}")
        reported[server["name"]] = version
    try:
        now = weights_now(p["model_path"])
    except UnreadableWeightsError as error:
        module.fail_json(msg=f"{error}: the weight version the servers must report is unknown, so it proves nothing")
    return {"model_path": p["model_path"], "expected": now["version"], "files": now["files"], "servers": reported}


TRANSFERS = "sglang:kv_transfer_latency_ms_count"


def transfer_counts(prefills: list[dict], key: str) -> tuple[dict[str, float], list[str]]:
    """Each prefill's KV-transfer count now (every label set summed), and the ones that could not be read. A page
    that answers without the series counts 0: a labelled histogram has no series before its first observation (a
    prefill that transferred nothing since its start); a page that does not answer 200 is unknown, never zero."""
    counts, unreadable = {}, []
    for prefill in prefills:
        status, message, body = call(prefill["metrics_url"], key=key, timeout=10)
        if status != 200:
            unreadable.append(f"{prefill['name']} ({prefill['metrics_url']}): {message}")
            continue
        total = 0.0
        for line in body.decode(errors="replace").splitlines():
            if line.startswith(TRANSFERS + "{") or line.startswith(TRANSFERS + " "):
                try:
                    total += float(line.rsplit(" ", 1)[1])
                except (IndexError, ValueError):
                    unreadable.append(f"{prefill['name']}: {line!r}")
        counts[prefill["name"]] = total
    return counts, unreadable


def chat_body(question, model: str, max_tokens: int) -> dict:
    prompt = question.get("prompt") if isinstance(question, dict) else question
    body = {"model": model, "messages": [{"role": "user", "content": str(prompt)}], "max_tokens": max_tokens}
    if isinstance(question, dict) and question.get("temperature") is not None:
        body["temperature"] = question["temperature"]
    return body


def answer(url: str, key: str, timeout: int, body: dict) -> dict:
    status, message, raw = call(url, key=key, body=body, timeout=timeout)
    content, finish = None, None
    if status == 200:
        try:
            choice = json.loads(raw)["choices"][0]
            content, finish = choice["message"]["content"], choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError):
            status, message = 0, "an answer without choices[0].message.content"
    return {"status": status, "msg": message, "content": content, "finish_reason": finish}


def generate(url: str, key: str, timeout: int, prompt: str, max_new_tokens: int) -> dict:
    """One native /generate request that leaves every sampling default to the server (only its length is set):
    its status and, where the server reports it (the lab stand-in does), the sampling it resolved."""
    body = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens}}
    status, message, raw = call(url, key=key, body=body, timeout=timeout)
    resolved = None
    if status == 200:
        try:
            answer = json.loads(raw)
            resolved = (answer.get("sglang_lab") or {}).get("sampling_params")
            if not isinstance(answer.get("text"), str):
                status, message = 0, "an answer without text"
        except (ValueError, AttributeError):
            status, message = 0, "an answer that is not a JSON object"
    return {"status": status, "msg": message, "resolved": resolved}


def ask_all(url: str, key: str, timeout: int, bodies: list[dict]) -> list[dict]:
    """Every question at once; the answers in question order, whichever came back first."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(bodies)))) as pool:
        return list(pool.map(lambda body: answer(url, key, timeout, body), bodies))


POINTS = ("before_close",)


def ask(module: AnsibleModule) -> None:
    """Wait, read, ask, judge and close, as the options say; exits through the module."""
    p = module.params
    if p["close"] and not p["judge"]:
        module.fail_json(msg="close needs judge: an apply is closed only once its host is proven")
    refused = sglang_lab_fault.refused(p["lab_fault"], POINTS)
    if refused:
        module.fail_json(msg=f"{refused}; nothing was asked")
    ready = sglang_ready.wait_ready(module.run_command, p["ready"], p["ready_timeout"], sglang_ready.MARGIN, [])
    if ready["failure"]:
        module.fail_json(msg=ready["failure"], ready=ready)
    served = {s["name"]: served_with(module, s) for s in p["servers"]}
    modes = {name: entry["sampling_defaults"] for name, entry in served.items()}
    preferred = {name: entry["preferred_sampling_params"] for name, entry in served.items()}
    logged = {s["name"]: logged_defaults(module, s["name"]) for s in p["servers"]}
    weights_read = weights(module)
    file_sampling = None
    if p["servers"] and p["generation_config"]:
        try:
            config, _text = load(p["generation_config"])
            file_sampling = sampling_of(config) if config is not None else None
        except (ValueError, OSError):
            file_sampling = None
    url = p["router_url"].rstrip("/") + "/v1/chat/completions"
    bodies = [chat_body(q, p["model"], p["max_tokens"]) for q in p["questions"]] if p["router_url"] else []
    transfers_before, unreadable = transfer_counts(p["transfers"], p["api_key"]) if p["transfers"] else ({}, [])
    answers = ask_all(url, p["api_key"], p["timeout"], bodies) if bodies else []
    generated = None
    if p["generate"] and p["router_url"]:
        generate_url = p["router_url"].rstrip("/") + "/generate"
        prompt = str(p["generate"].get("prompt") or "Hello")
        generated = generate(
            generate_url, p["api_key"], p["timeout"], prompt, int(p["generate"].get("max_new_tokens") or 16)
        )
    transfers = None
    if p["transfers"]:
        after, unreadable_after = transfer_counts(p["transfers"], p["api_key"])
        answered = sum(1 for a in answers if a.get("status") == 200) + int(
            bool(generated and generated["status"] == 200)
        )
        transfers = {
            "counted": {name: after[name] - transfers_before[name] for name in after if name in transfers_before},
            "answered": answered,
            "unreadable": unreadable + unreadable_after,
        }
    asked = {
        "ready": ready,
        "transfers": transfers,
        "modes": modes,
        "preferred": preferred,
        "logged": logged,
        "file_sampling": file_sampling,
        "answers": answers,
        "generated": generated,
        "weights": weights_read,
    }
    failures = sglang_verdict.failures(asked, p["judge"], p["router_url"]) if p["judge"] else []
    if failures:
        # Not proven: the lock stays with this run, for its rollback.
        module.fail_json(msg=" ".join(failures), failures=failures, closed=None, **asked)
    closed = None
    if p["close"] and not module.check_mode:
        sglang_lab_fault.at(p["lab_fault"], "before_close", lambda msg: module.fail_json(msg=msg, **asked))
        closed = sglang_close.close(module, p["close"])
    module.exit_json(changed=bool(closed), failures=[], closed=closed, **asked)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "servers": {"type": "list", "elements": "dict", "default": []},
            "router_url": {"type": "str", "default": ""},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "questions": {"type": "list", "elements": "raw", "default": []},
            # Not a secret: the number of tokens an answer may have.
            "max_tokens": {"type": "int", "default": 64, "no_log": False},
            "timeout": {"type": "int", "default": 120},
            "ready": {"type": "list", "elements": "dict", "default": []},
            "ready_timeout": {"type": "int", "default": 600},
            "generation_config": {"type": "path"},
            "model_path": {"type": "path"},
            "generate": {"type": "dict"},
            "transfers": {"type": "list", "elements": "dict", "default": []},
            "judge": {"type": "dict"},
            "close": {"type": "dict"},
            "fence": {"type": "dict"},
            "lab_fault": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    ask(module)


if __name__ == "__main__":
    main()
