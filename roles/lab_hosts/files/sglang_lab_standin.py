"""LAB TOOL: a GPU-less stand-in for the SGLang 0.5.23 server (prefill and decode).

It exists so that the units, restarts, health gates and sampling defaults of this collection can be
tested on hosts without GPUs. It is never installed on a production inventory (the sglang_runtime
role refuses it there). It answers on the HTTP surface the deployment depends on with SGLang's
statuses and JSON keys, and resolves sampling parameters exactly as SGLang does; tests under
tests/contract prove that against the real sglang package. Text comes from a seeded toy sampler.

    sglang_lab_standin.py server --model-path DIR --port 30000 --sampling-defaults model ...

The router in front of it is the real sglang-router 0.3.2 (it runs without a GPU); this stand-in answers
everything that router asks of a worker (/health, /get_model_info, /get_server_info, /v1/models and the
requests it forwards with bootstrap fields).

Under load and at stop it behaves as SGLang 0.5.23 does (the lines it imitates are named where it does so):
answers take SGLANG_LAB_TOKEN_SECONDS per generated token on a decode (or plain) server, streamed as
server-sent events when asked, the first after SGLANG_LAB_FIRST_TOKEN_SECONDS more (a lab fault: the slow first
token a bad change makes, that only a canary's comparison of live latency finds); the model load at start takes
SGLANG_LAB_STARTUP_SECONDS; with SGLANG_LAB_TRANSFORMERS_CLASS_DEFAULTS=1 its defaults take transformers' class
defaults for the keys generation_config.json leaves out (a lab fault: the leak of sglang issue 11574); with
--max-running-requests N the N+1st request waits in the queue; on SIGTERM it drains as SGLang does. While the file
TRANSFER_FAULT on its host names its systemd invocation (INVOCATION_ID), a prefill's KV bootstrap server refuses every
transfer (a lab fault of that one start of the server: the decode that pulls counts the failure in
sglang:num_transfer_failed_reqs_total and aborts the request, as SGLang does when a KV transfer fails; the server's
next start, a rollback's, is sound again); a test puts it on a held run's new server.

Standard library only, so it runs on a bare Debian host.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import random
import secrets
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _installed_sglang() -> str:
    """The sglang version of the release this process runs from (the lab installs the real wheel there without
    its GPU stack), as /get_server_info's `version` reports it for the real server; 0.5.23 outside a release."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "0.5.23"


VERSION = _installed_sglang()
# The five keys SGLang takes from generation_config.json (ModelConfig.get_default_sampling_params),
# in SGLang's order, which is also the order of its startup log line.
MODEL_SAMPLING_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
CHAT_FALLBACK = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
COMPLETION_FIELD_DEFAULTS = CHAT_FALLBACK
UNAUTHENTICATED_PREFIXES = ("/health", "/ready", "/metrics")
VOCAB = (
    "the of and to in is was for on that with as by at from it an be this which or are his "
    "model server token cache decode prefill router sample light river stone window garden "
    "north quiet bright winter signal paper orange market silver forest engine letter morning "
    "harbor planet circle music ladder castle candle meadow pocket rocket shadow thunder valley "
    "whisper yellow zephyr anchor basket canyon dragon falcon glacier hollow island jungle kernel "
    "lantern marble nebula orchard pepper quartz ribbon saddle timber umbrella velvet walnut"
).split()
EOS = "<eos>"

log = logging.getLogger("sglang")


# --- sampling: the part held to SGLang by the contract tests -----------------------------------


# Lab fault (SGLANG_LAB_TRANSFORMERS_CLASS_DEFAULTS=1): a transformers release whose GenerationConfig.to_dict()
# fills in its class defaults for the keys a file leaves out (the 4.x classes' values; sglang issue 11574 saw
# top_k 50 logged). SGLang keeps every non-None value it reads, so a server samples with what nobody set.
TRANSFORMERS_CLASS_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 50, "repetition_penalty": 1.0}


def model_default_sampling_params(
    model_path: str, sampling_defaults: str, class_defaults: bool = False
) -> dict[str, Any]:
    """What SGLang's ModelConfig.get_default_sampling_params() returns for this model directory (with the locked
    transformers; with class_defaults, with a release that fills its class defaults in)."""
    if sampling_defaults != "model":
        return {}
    path = Path(model_path) / "generation_config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if class_defaults:
        config = {**TRANSFORMERS_CLASS_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    return {key: config[key] for key in MODEL_SAMPLING_KEYS if config.get(key) is not None}


def startup_line(model_defaults: dict[str, Any]) -> str:
    """The line SGLang's chat serving layer logs once when the model's defaults are non-empty."""
    return f"Using default chat sampling params from model generation config: {model_defaults}"


def resolve_chat_sampling(request: dict[str, Any], model_defaults: dict[str, Any]) -> dict[str, Any]:
    """ChatCompletionRequest.to_sampling_params: request value, then model default, then fallback."""
    resolved = {}
    for key, fallback in CHAT_FALLBACK.items():
        value = request.get(key)
        resolved[key] = value if value is not None else model_defaults.get(key, fallback)
    return resolved


# SamplingParams' own defaults (sglang/srt/sampling/sampling_params.py): what a key no one set samples with.
SAMPLING_PARAMS_DEFAULTS = CHAT_FALLBACK


def resolve_generate_sampling(sampling_params: dict[str, Any], preferred: dict[str, Any] | None) -> dict[str, Any]:
    """Native /generate (TokenizerManager._create_tokenized_object): the server's --preferred-sampling-params under
    the keys the request leaves out, `{**preferred, **obj.sampling_params}`, then SamplingParams' defaults.
    generation_config.json is never read here."""
    merged = {**preferred, **sampling_params} if preferred else dict(sampling_params)
    return {key: merged.get(key, default) for key, default in SAMPLING_PARAMS_DEFAULTS.items()}


def parse_preferred(value: str | None) -> dict[str, Any] | None:
    """--preferred-sampling-params as SGLang's serving hook parses it (a JSON object), or None when not given."""
    if not value:
        return None
    parsed = json.loads(value)
    if not isinstance(parsed, dict):
        raise ValueError(f"--preferred-sampling-params must be a JSON object, got {value!r}")
    return parsed


def resolve_completion_sampling(request: dict[str, Any]) -> dict[str, Any]:
    """CompletionRequest: fixed field defaults; generation_config.json is never read.

    The fields are plain numbers there, so an explicit null is a validation error (HTTP 400).
    """
    resolved = {}
    for key, default in COMPLETION_FIELD_DEFAULTS.items():
        value = request.get(key, default)
        if value is None:
            raise ValueError(f"{key}: Input should be a valid number")
        resolved[key] = value
    return resolved


# --- the toy language model ----------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _logits(previous: str) -> tuple[float, ...]:
    """Fixed pseudo-random next-token scores that depend only on the previous token.

    Greedy decoding over a first-order table is a walk on a finite graph, so it always ends in a
    cycle: the repetition DeepSeek shows at temperature 0. End-of-text never wins outright.
    A pure function of the previous word, so each row is computed once: the hashing was half of the stand-in's CPU
    per request under the traffic scenario's steady load, which shares the lab's two cores with the other lanes.
    """
    scores = []
    for word in VOCAB:
        digest = hashlib.sha256(f"{previous}\x00{word}".encode()).digest()
        uniform = int.from_bytes(digest[:8], "big") / 2**64
        scores.append(-0.5 * math.log(-math.log(max(uniform, 1e-12))))
    scores.append(max(scores) - 2.5)
    return tuple(scores)


# A chat model asked for a paragraph does not stop after a few words; this toy's end-of-text, sampled from the first
# token on, would (about 4% of answers under 12 words at temperature 0.6), and the canary rightly fails an answer too
# short to judge. End-of-text is not sampled before this many words.
MIN_ANSWER_WORDS = 16


def generate(prompt: str, params: dict[str, Any], max_tokens: int, seed: int | None) -> tuple[str, str, int]:
    """Returns (text, finish_reason, completion_tokens)."""
    words = [*VOCAB, EOS]
    rng = random.Random(seed if seed is not None else secrets.randbits(64))  # noqa: S311 - a toy sampler
    previous = prompt.split()[-1] if prompt.split() else "the"
    out: list[str] = []
    temperature = float(params["temperature"])
    for _unused in range(max_tokens):
        scores = list(_logits(previous))
        if len(out) < MIN_ANSWER_WORDS:
            scores[-1] = -math.inf
        scores = _penalize(scores, words, set(out), float(params["repetition_penalty"]))
        if temperature <= 1e-5:
            index = max(range(len(scores)), key=scores.__getitem__)
        else:
            index = _sample(scores, params, temperature, rng)
        word = words[index]
        if word == EOS:
            return " ".join(out), "stop", len(out) + 1
        out.append(word)
        previous = word
    return " ".join(out), "length", len(out)


def _penalize(scores: list[float], words: list[str], seen: set[str], penalty: float) -> list[float]:
    """The usual repetition penalty: scores of tokens already produced move towards 'unlikely'."""
    if penalty == 1.0:
        return scores
    return [(s / penalty if s > 0 else s * penalty) if w in seen else s for s, w in zip(scores, words, strict=True)]


def _sample(scores: list[float], params: dict[str, Any], temperature: float, rng: random.Random) -> int:
    top = max(scores)
    probs = [math.exp((s - top) / temperature) for s in scores]
    total = sum(probs)
    ranked = sorted(((p / total, i) for i, p in enumerate(probs)), reverse=True)
    top_k = int(params["top_k"])
    if top_k > 0:
        ranked = ranked[:top_k]
    min_p = float(params["min_p"])
    if min_p > 0:
        ranked = [(p, i) for p, i in ranked if p >= min_p * ranked[0][0]]
    kept, mass = [], 0.0
    for p, i in ranked:
        kept.append((p, i))
        mass += p
        if mass >= float(params["top_p"]):
            break
    pick = rng.random() * sum(p for p, _unused in kept)
    for p, i in kept:
        pick -= p
        if pick <= 0:
            return i
    return kept[-1][1]


# --- metrics: names, types and labels held to sglang's own definitions by the contract tests -----------

# The labels SGLang puts on every series of its scheduler and of its tokenizer manager
# (sglang/srt/observability/metrics_collector.py, without priority scheduling or custom labels).
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TOKENIZER_LABELS = ("model_name", "engine_type")
# SGLang's default buckets (TokenizerMetricsCollector) for the latency histograms the stand-in fills.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)
E2E_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
    600.0,
    1200.0,
    1800.0,
    2400.0,
)
# name -> (type, collector, extra labels, buckets). Series SGLang exports from its first stats log on (the
# gauges) are always emitted; counters and histograms appear with the first request, as in SGLang. The
# failure counters appear in SGLang only after a failure, which the stand-in never has: the alert rules
# on them are proven by `promtool test rules` (roles/sglang_monitoring/tests).
METRICS: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]] = {
    "sglang:num_running_reqs": ("gauge", "scheduler", (), ()),
    "sglang:num_queue_reqs": ("gauge", "scheduler", (), ()),
    "sglang:gen_throughput": ("gauge", "scheduler", (), ()),
    "sglang:cache_hit_rate": ("gauge", "scheduler", (), ()),
    "sglang:token_usage": ("gauge", "scheduler", (), ()),
    "sglang:num_used_tokens": ("gauge", "scheduler", (), ()),
    "sglang:max_total_num_tokens": ("gauge", "scheduler", (), ()),
    "sglang:num_prefill_bootstrap_queue_reqs": ("gauge", "scheduler", (), ()),
    "sglang:num_prefill_inflight_queue_reqs": ("gauge", "scheduler", (), ()),
    "sglang:num_decode_prealloc_queue_reqs": ("gauge", "scheduler", (), ()),
    "sglang:num_decode_transfer_queue_reqs": ("gauge", "scheduler", (), ()),
    "sglang:kv_transfer_speed_gb_s": ("histogram", "scheduler", (), (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)),
    "sglang:kv_transfer_latency_ms": (
        "histogram",
        "scheduler",
        (),
        (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
    ),
    "sglang:num_bootstrap_failed_reqs_total": ("counter", "scheduler", (), ()),
    "sglang:num_transfer_failed_reqs_total": ("counter", "scheduler", (), ()),
    "sglang:prompt_tokens_total": ("counter", "tokenizer", ("is_streaming",), ()),
    "sglang:generation_tokens_total": ("counter", "tokenizer", ("is_streaming",), ()),
    "sglang:num_requests_total": ("counter", "tokenizer", ("is_streaming",), ()),
    "sglang:num_aborted_requests_total": ("counter", "tokenizer", (), ()),
    "sglang:time_to_first_token_seconds": ("histogram", "tokenizer", ("is_streaming",), TTFT_BUCKETS),
    "sglang:inter_token_latency_seconds": ("histogram", "tokenizer", (), ITL_BUCKETS),
    "sglang:e2e_request_latency_seconds": ("histogram", "tokenizer", ("is_streaming",), E2E_BUCKETS),
}
# A word of the toy sampler stands for one token; the lab's KV pool is this many tokens.
LAB_MAX_TOTAL_TOKENS = 65536
# Size of one token's KV cache in the lab's toy transfer figures.
LAB_KV_MB_PER_TOKEN = 0.07


def _label_text(labels: dict[str, str]) -> str:
    return ",".join(f'{key}="{value}"' for key, value in labels.items())


def _number(value: float) -> str:
    return repr(float(value)) if not math.isinf(value) else "+Inf"


class Metrics:
    """SGLang's Prometheus series for one server, moved by the requests the stand-in serves."""

    def __init__(self, served_model_name: str, engine_type: str) -> None:
        base = {"model_name": served_model_name, "engine_type": engine_type}
        self.base = {
            "scheduler": {**base, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"},
            "tokenizer": base,
        }
        self.lock = threading.Lock()
        self.running = 0
        self.queued = 0
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        self.window: list[tuple[float, int]] = []

    def _key(self, name: str, extra: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
        _unused, collector, names, _unused2 = METRICS[name]
        if tuple(extra) != names:
            raise ValueError(f"{name} takes the extra labels {names}, not {tuple(extra)}")
        return name, tuple({**self.base[collector], **extra}.items())

    def inc(self, name: str, amount: float = 1.0, **extra: str) -> None:
        key = self._key(name, extra)
        with self.lock:
            self.values[key] = self.values.get(key, 0.0) + amount

    def observe(self, name: str, value: float, **extra: str) -> None:
        key = self._key(name, extra)
        buckets = METRICS[name][3]
        with self.lock:
            counts, total, count = self.values.get(key, ([0] * len(buckets), 0.0, 0))
            counts = [c + (1 if value <= bound else 0) for c, bound in zip(counts, buckets, strict=True)]
            self.values[key] = (counts, total + value, count + 1)

    def waiting(self, delta: int) -> None:
        with self.lock:
            self.queued += delta

    def started(self) -> None:
        with self.lock:
            self.running += 1

    def in_flight(self) -> int:
        with self.lock:
            return self.running + self.queued

    def transferred(self, prompt_tokens: int, seconds: float) -> None:
        """A prefill server's KV transfer of one request (SGLang observes these on the prefill side)."""
        megabytes = prompt_tokens * LAB_KV_MB_PER_TOKEN
        seconds = max(seconds, 1e-4)
        self.observe("sglang:kv_transfer_latency_ms", seconds * 1000)
        self.observe("sglang:kv_transfer_speed_gb_s", megabytes / 1024 / seconds)

    def finished(self, prompt_tokens: int, output_tokens: int, ttft: float, e2e: float) -> None:
        streaming = {"is_streaming": "false"}
        self.inc("sglang:num_requests_total", **streaming)
        self.inc("sglang:prompt_tokens_total", prompt_tokens, **streaming)
        self.inc("sglang:generation_tokens_total", output_tokens, **streaming)
        self.observe("sglang:time_to_first_token_seconds", ttft, **streaming)
        self.observe("sglang:e2e_request_latency_seconds", e2e, **streaming)
        if output_tokens > 1:
            self.observe("sglang:inter_token_latency_seconds", max(e2e - ttft, 0.0) / (output_tokens - 1))
        now = time.time()
        with self.lock:
            self.running -= 1
            self.window = [(t, n) for t, n in self.window if now - t < 10] + [(now, output_tokens)]

    def gauges(self) -> dict[str, float]:
        now = time.time()
        with self.lock:
            recent = sum(n for t, n in self.window if now - t < 10)
            running, queued = self.running, self.queued
        used = min(running * 512, LAB_MAX_TOTAL_TOKENS)
        return {
            "sglang:num_running_reqs": running,
            "sglang:num_queue_reqs": queued,
            "sglang:gen_throughput": recent / 10.0,
            "sglang:cache_hit_rate": 0.0,
            "sglang:token_usage": used / LAB_MAX_TOTAL_TOKENS,
            "sglang:num_used_tokens": used,
            "sglang:max_total_num_tokens": LAB_MAX_TOTAL_TOKENS,
            "sglang:num_prefill_bootstrap_queue_reqs": 0,
            "sglang:num_prefill_inflight_queue_reqs": 0,
            "sglang:num_decode_prealloc_queue_reqs": 0,
            "sglang:num_decode_transfer_queue_reqs": 0,
        }

    def exposition(self) -> str:
        """The Prometheus text format, as prometheus_client writes it (counters without _total in TYPE)."""
        scheduler = _label_text(self.base["scheduler"])
        samples: dict[str, list[str]] = {}
        for name, value in self.gauges().items():
            samples.setdefault(name, []).append(f"{name}{{{scheduler}}} {_number(value)}")
        with self.lock:
            values = dict(self.values)
        for (name, labels), value in sorted(values.items()):
            kind, _unused, _unused2, buckets = METRICS[name]
            text = _label_text(dict(labels))
            if kind == "counter":
                samples.setdefault(name, []).append(f"{name}{{{text}}} {_number(value)}")
                continue
            counts, total, count = value
            lines = samples.setdefault(name, [])
            for bound, cumulative in zip(buckets, counts, strict=True):
                lines.append(f'{name}_bucket{{{text},le="{_number(bound)}"}} {_number(cumulative)}')
            lines.append(f'{name}_bucket{{{text},le="+Inf"}} {_number(count)}')
            lines += [f"{name}_sum{{{text}}} {_number(total)}", f"{name}_count{{{text}}} {_number(count)}"]
        out = []
        for name, lines in samples.items():
            kind = METRICS[name][0]
            family = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
            out += [f"# HELP {family} {family} (SGLang {VERSION}, lab stand-in)", f"# TYPE {family} {kind}", *lines]
        return "\n".join(out) + "\n"


# --- HTTP plumbing -------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    app: App

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: Any = None, content_type: str = "application/json") -> None:
        if isinstance(body, Stream):
            # Server-sent events, delimited by the connection's end (HTTP/1.0), one event per token.
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            try:
                for event in body:
                    self.wfile.write(event)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                log.info("client went away during a stream")
            finally:
                body.close()
            return
        data = b"" if body is None else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            return None
        return body if isinstance(body, dict) else None

    def _authorized(self) -> bool:
        key = self.app.api_key
        if not key or self.path.startswith(UNAUTHENTICATED_PREFIXES):
            return True
        scheme, _unused, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token, key)

    def _dispatch(self, method: str) -> None:
        if not self._authorized():
            self._send(401, {"error": "Unauthorized"})
            return
        path = self.path.split("?", 1)[0]
        body = self._body() if method == "POST" else {}
        if body is None:
            self._send(400, {"object": "error", "message": "invalid JSON body", "type": "BadRequest", "code": 400})
            return
        status, payload, content_type = self.app.handle(method, path, body)
        self._send(status, payload, content_type)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")


Reply = tuple[int, Any, str]
JSON = "application/json"
EVENTS = "text/event-stream"


class Stream:
    """A streamed reply: its events as bytes, and what to do when it ends (or the client leaves)."""

    def __init__(self, events: Any, on_close: Any) -> None:
        self.events, self.on_close = events, on_close

    def __iter__(self) -> Any:
        return iter(self.events)

    def close(self) -> None:
        self.on_close()


def _not_found() -> Reply:
    return 404, {"detail": "Not Found"}, JSON


class App:
    api_key: str | None = None

    def handle(self, method: str, path: str, body: dict[str, Any]) -> Reply:
        raise NotImplementedError


class ServerApp(App):
    """One SGLang server (prefill, decode or plain)."""

    def __init__(self, args: argparse.Namespace, unparsed: list[str], argv: list[str]) -> None:
        self.args = args
        self.api_key = args.api_key
        self.unparsed = unparsed
        self.argv = argv
        self.served_model_name = args.served_model_name or args.model_path
        self.ready = False
        # SIGTERM sets it (SGLang: SignalHandler.sigterm_handler sets tokenizer_manager.gracefully_exit).
        self.draining = False
        self.started = time.time()
        # Decode (and plain) servers make one token per this many seconds; prefill computes the prompt at once.
        self.token_seconds = float(os.environ.get("SGLANG_LAB_TOKEN_SECONDS", "0") or 0)
        self.first_token_seconds = float(os.environ.get("SGLANG_LAB_FIRST_TOKEN_SECONDS", "0") or 0)
        limit = args.max_running_requests
        self.slots = threading.BoundedSemaphore(limit) if limit else None
        engine_type = {"prefill": "prefill", "decode": "decode"}.get(args.disaggregation_mode, "unified")
        self.metrics = Metrics(self.served_model_name, engine_type)
        class_defaults = os.environ.get("SGLANG_LAB_TRANSFORMERS_CLASS_DEFAULTS", "0") == "1"
        self.model_defaults = model_default_sampling_params(args.model_path, args.sampling_defaults, class_defaults)
        self.preferred = parse_preferred(args.preferred_sampling_params)
        if self.model_defaults:
            log.info("%s", startup_line(self.model_defaults))

    def server_info(self) -> dict[str, Any]:
        info = {key: value for key, value in vars(self.args).items() if key != "config"}
        info.update(
            # As SGLang reports it (http_server.py: get_serving().preferred_sampling_params, the parsed object).
            preferred_sampling_params=self.preferred,
            launch_command=" ".join(["python3", "-m", "sglang.launch_server", *self.argv]),
            lab_standin=True,
            lab_unparsed_args=_pairs(self.unparsed),
            startup_time=self.started,
            internal_states=[{"last_gen_throughput": 0.0}],
            version=VERSION,
            frontend="python",
        )
        return info

    def handle(self, method: str, path: str, body: dict[str, Any]) -> Reply:
        gets = {
            "/ready": self._health,
            "/health": self._health,
            "/health_generate": self._health,
            "/server_info": lambda: (200, self.server_info(), JSON),
            "/get_server_info": lambda: (200, self.server_info(), JSON),
            "/model_info": self._model_info,
            "/get_model_info": self._model_info,
            "/v1/models": self._models,
            "/metrics": self._metrics,
        }
        posts = {"/v1/chat/completions": self._chat, "/v1/completions": self._completion, "/generate": self._generate}
        if method == "GET" and path in gets:
            return gets[path]()
        if method == "POST" and path in posts:
            return posts[path](body)
        return _not_found()

    def _health(self) -> Reply:
        # 503 while loading and while draining (sglang 0.5.23 srt/entrypoints/http_server.py, health_generate:
        # "if _global_state.tokenizer_manager.gracefully_exit: ... return Response(status_code=503)").
        if self.draining:
            log.info("Health check request received during shutdown. Returning 503.")
            return 503, None, JSON
        return (200, None, JSON) if self.ready else (503, None, JSON)

    def _model_info(self) -> Reply:
        return (
            200,
            {
                "model_path": self.args.model_path,
                "served_model_name": self.served_model_name,
                "tokenizer_path": self.args.model_path,
                "is_generation": True,
                "preferred_sampling_params": self.preferred,
                # The value in effect (sglang 0.5.23: tokenizer_manager.config_value("weight_version")).
                "weight_version": self.args.weight_version,
                "load_format": "auto",
                "reasoning_parser": self.args.reasoning_parser,
                "tool_call_parser": self.args.tool_call_parser,
                "disaggregation_mode": self.args.disaggregation_mode,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "deepseek_v4",
                "architectures": ["DeepseekV4ForCausalLM"],
            },
            JSON,
        )

    def _models(self) -> Reply:
        card = {
            "id": self.served_model_name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "sglang",
            "root": self.served_model_name,
            "parent": None,
            "max_model_len": 1048576,
        }
        return 200, {"object": "list", "data": [card]}, JSON

    def _metrics(self) -> Reply:
        if not self.args.enable_metrics:
            return _not_found()
        return 200, self.metrics.exposition(), "text/plain; version=0.0.4; charset=utf-8"

    def _admit(self) -> None:
        """Wait for a running slot (--max-running-requests): the request counts as queued meanwhile. New requests
        are admitted during a drain too (SGLang keeps serving while gracefully_exit is set)."""
        if self.slots is not None:
            self.metrics.waiting(1)
            self.slots.acquire()
            self.metrics.waiting(-1)
        self.metrics.started()

    def _receive_kv(self, body: dict[str, Any], prompt: str) -> str | None:
        """A decode's KV receive, as far as a GPU-less host can go: the router names the prefill's bootstrap server
        in the request it sends both (bootstrap_host, bootstrap_port, bootstrap_room); SGLang's KV receiver asks
        that server where the prefill's KV sender is (GET /route) and pulls the cache from there. The stand-in
        makes that contact across hosts, and the prefill counts the transfer when it is asked (BootstrapHandler).
        A contact that fails is a failed transfer: counted, and the request fails, as SGLang aborts it. None when
        the request names no bootstrap (not from a PD router) or the transfer succeeded; else why not."""
        host, port = body.get("bootstrap_host"), body.get("bootstrap_port")
        if self.args.disaggregation_mode != "decode" or host is None or port is None:
            return None
        address = f"[{host}]" if ":" in str(host) else str(host)
        query = urllib.parse.urlencode(
            {
                "engine_rank": 0,
                "target_dp_group": 0,
                "bootstrap_room": body.get("bootstrap_room", ""),
                "lab_prompt_tokens": len(prompt.split()),
            }
        )
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/route?{query}", timeout=10) as answer:
                if answer.status == 200:
                    return None
                why = f"answered {answer.status}"
        except (OSError, urllib.error.URLError) as error:
            why = str(error)
        self.metrics.inc("sglang:num_transfer_failed_reqs_total")
        log.error("KV transfer from the prefill's bootstrap server %s:%s failed: %s", host, port, why)
        return f"KV transfer from {host}:{port} failed: {why}"

    def _release(self, began: float, first: float, prompt_tokens: int, produced: int) -> None:
        ended = time.monotonic()
        self.metrics.finished(prompt_tokens, produced, first - began, ended - began)
        if self.slots is not None:
            self.slots.release()

    def _pace(self) -> float:
        """Seconds per generated token: decode and plain servers generate, prefill only computes the prompt."""
        return 0.0 if self.args.disaggregation_mode == "prefill" else self.token_seconds

    def _first_delay(self) -> float:
        """The lab fault's extra wait before the first generated token (not on prefill)."""
        return 0.0 if self.args.disaggregation_mode == "prefill" else self.first_token_seconds

    def _run(self, prompt: str, params: dict[str, Any], body: dict[str, Any]) -> tuple[str, str, dict[str, int]]:
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 64)
        began = time.monotonic()
        self._admit()
        text, finish, produced = generate(prompt, params, max_tokens, body.get("seed"))
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": produced}
        usage["total_tokens"] = usage["prompt_tokens"] + produced
        pace, delay = self._pace(), self._first_delay()
        time.sleep(delay + pace * produced)
        # Without a pace the toy sampler makes every token in one go: the first is taken to arrive after 1/produced.
        first = began + delay + (pace if pace else (time.monotonic() - began - delay) / max(produced, 1))
        self._release(began, first, usage["prompt_tokens"], produced)
        return text, finish, usage

    def _stream(self, prompt: str, params: dict[str, Any], body: dict[str, Any], chunk: Any) -> Stream:
        """A streamed answer: one event per token, then the finish and [DONE] (OpenAI's chunk format)."""
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 64)
        began = time.monotonic()
        self._admit()
        text, finish, _produced = generate(prompt, params, max_tokens, body.get("seed"))
        words = text.split()
        state: dict[str, Any] = {"first": None, "sent": 0}

        def events() -> Any:
            for index, word in enumerate(words):
                time.sleep(self._pace() + (self._first_delay() if index == 0 else 0.0))
                state["first"] = state["first"] or time.monotonic()
                state["sent"] = index + 1
                yield _event(chunk(word if index == 0 else " " + word, None))
            yield _event(chunk("", finish))
            yield b"data: [DONE]\n\n"

        def closed() -> None:
            self._release(began, state["first"] or time.monotonic(), len(prompt.split()), state["sent"])

        return Stream(events(), closed)

    def _extension(self, params: dict[str, Any], source: str) -> dict[str, Any]:
        return {
            "sampling_params": params,
            "defaults_source": source,
            "disaggregation_mode": self.args.disaggregation_mode,
            "pid": os.getpid(),
        }

    def _chat(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return (
                400,
                {"object": "error", "message": "messages must be a non-empty list", "type": "BadRequest", "code": 400},
                JSON,
            )
        params = resolve_chat_sampling(body, self.model_defaults)
        prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        failed = self._receive_kv(body, prompt)
        if failed:
            return _transfer_failed(failed)
        if body.get("stream"):
            rid, model = secrets.token_hex(16), body.get("model") or self.served_model_name

            def chunk(content: str, finish: str | None) -> dict[str, Any]:
                delta = {"content": content} if content or finish is None else {}
                return {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }

            return 200, self._stream(prompt, params, body, chunk), EVENTS
        text, finish, usage = self._run(prompt, params, body)
        return (
            200,
            {
                "id": secrets.token_hex(16),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or self.served_model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": usage,
                "sglang_lab": self._extension(params, "model generation config" if self.model_defaults else "built-in"),
            },
            JSON,
        )

    def _generate(self, body: dict[str, Any]) -> Reply:
        """Native /generate, one text, not streamed: the lab's answer carries the sampling it resolved."""
        text_in = body.get("text")
        if isinstance(text_in, list):
            text_in = text_in[0] if text_in else ""
        if not isinstance(text_in, str):
            return 400, {"object": "error", "message": "text must be a string", "type": "BadRequest", "code": 400}, JSON
        requested = body.get("sampling_params") or {}
        if not isinstance(requested, dict):
            return 400, {"object": "error", "message": "sampling_params must be an object", "code": 400}, JSON
        params = resolve_generate_sampling(requested, self.preferred)
        failed = self._receive_kv(body, text_in)
        if failed:
            return _transfer_failed(failed)
        run_body = {"max_tokens": int(requested.get("max_new_tokens") or 128), "seed": requested.get("sampling_seed")}
        text, finish, usage = self._run(text_in, params, run_body)
        source = "preferred sampling params" if self.preferred else "SamplingParams defaults"
        return (
            200,
            {
                "text": text,
                "meta_info": {
                    "id": secrets.token_hex(16),
                    "finish_reason": {"type": finish},
                    "prompt_tokens": usage["prompt_tokens"],
                    "completion_tokens": usage["completion_tokens"],
                },
                "sglang_lab": self._extension(params, source),
            },
            JSON,
        )

    def _completion(self, body: dict[str, Any]) -> Reply:
        try:
            params = resolve_completion_sampling(body)
        except ValueError as error:
            return 400, {"object": "error", "message": str(error), "type": "BadRequest", "code": 400}, JSON
        prompt = body.get("prompt") if isinstance(body.get("prompt"), str) else ""
        failed = self._receive_kv(body, prompt)
        if failed:
            return _transfer_failed(failed)
        body = {"max_tokens": 16, **body}
        text, finish, usage = self._run(prompt, params, body)
        return (
            200,
            {
                "id": secrets.token_hex(16),
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or self.served_model_name,
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
                "usage": usage,
                "sglang_lab": self._extension(params, "completion field defaults"),
            },
            JSON,
        )


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _pairs(tokens: list[str]) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    key = None
    for token in tokens:
        if token.startswith("--"):
            key = token[2:].replace("-", "_")
            pairs[key] = True
        elif key is not None:
            pairs[key] = token if pairs[key] is True else [*_as_list(pairs[key]), token]
    return pairs


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --- command lines -------------------------------------------------------------------------------


def server_parser() -> argparse.ArgumentParser:
    """The flags the deployment renders, with SGLang's names, defaults and choices."""
    p = argparse.ArgumentParser(prog="sglang.launch_server (lab stand-in)", allow_abbrev=False)
    p.add_argument("--config")
    p.add_argument("--model-path", required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key")
    p.add_argument("--sampling-defaults", choices=["openai", "model"], default="model")
    p.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
    p.add_argument(
        "--disaggregation-transfer-backend",
        default="mooncake",
        choices=["mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"],
    )
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-ib-device")
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--preferred-sampling-params")
    # sglang 0.5.23 srt/arg_groups/fields/serving.py: weight_version, a str, "default" when not given.
    p.add_argument("--weight-version", default="default")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--reasoning-parser")
    p.add_argument("--tool-call-parser")
    return p


def _apply_config_file(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """--config FILE: keys are flag names; flags on the command line win (as in SGLang).

    The deployment writes this file as JSON, which is also YAML, so the standard library reads it.
    """
    known, _unused = parser.parse_known_args(argv)
    if not known.config:
        return argv
    options = json.loads(Path(known.config).read_text())
    given = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    extra: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if flag in given or value is False or value is None:
            continue
        extra += [flag] if value is True else [flag, str(value)]
    return extra + argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", stream=sys.stderr)
    if not argv or argv[0] != "server":
        print("usage: sglang_lab_standin.py server FLAGS...", file=sys.stderr)
        return 2
    flags = argv[1:]
    fault = os.environ.get("SGLANG_LAB_FAIL_START", "0")
    if fault == "1":
        # Lab fault injection: a server that exits at once, for rollback tests.
        log.error("lab fault injection: SGLANG_LAB_FAIL_START=1, exiting before serving")
        return 1
    parser = server_parser()
    args, unparsed = parser.parse_known_args(_apply_config_file(parser, flags))
    # As SGLang 0.5.23 does at every start (srt/entrypoints/engine.py): every resolved argument at INFO, the client
    # key among them, so that the lab proves the launcher keeps it out of the journal.
    log.info("server_args=%s", vars(args))
    app = ServerApp(args, unparsed, flags)
    handler = type("BoundHandler", (Handler,), {"app": app})
    httpd = ThreadingHTTPServer((args.host, args.port), handler)
    httpd.daemon_threads = True
    if args.disaggregation_mode == "prefill":
        _serve_bootstrap(args, app)
    if fault == "never_ready":
        # Lab fault injection: a server that runs but never answers /health with 200 (a model that never loads).
        log.error("lab fault injection: SGLANG_LAB_FAIL_START=never_ready, /health stays 503")
    else:
        # Model loading takes minutes on the GPU host; the lab keeps a short, visible 503 window.
        delay = float(os.environ.get("SGLANG_LAB_STARTUP_SECONDS", "1"))
        threading.Thread(target=_become_ready, args=(app, delay), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda signum, frame: _sigterm(app, httpd))
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def _sigterm(app: ServerApp, httpd: ThreadingHTTPServer) -> None:
    """SGLang 0.5.23's SIGTERM (srt/managers/tokenizer_manager.py, SignalHandler.sigterm_handler and
    TokenizerManager.sigterm_watchdog): mark the server as exiting (health answers 503, new requests are still
    accepted), look every 5 s (SGLANG_LAB_DRAIN_POLL_SECONDS) until no request is left, then exit; no bound
    of its own (the unit's TimeoutStopSec is the only one); SGL_FORCE_SHUTDOWN=1 exits at once."""
    log.warning("SIGTERM received. Draining requests and shutting down...")
    app.draining = True
    poll = float(os.environ.get("SGLANG_LAB_DRAIN_POLL_SECONDS", "5") or 5)

    def watchdog() -> None:
        time.sleep(poll)  # sigterm_watchdog: "while not self.gracefully_exit: await asyncio.sleep(5)"
        while os.environ.get("SGL_FORCE_SHUTDOWN") != "1":
            remaining = app.metrics.in_flight()
            log.info("Gracefully exiting... Remaining number of requests %d.", remaining)
            if remaining == 0:
                break
            time.sleep(poll)
        httpd.shutdown()

    threading.Thread(target=watchdog, daemon=True).start()


# LAB FAULT: while this file on a lab host names a prefill's systemd invocation, its KV bootstrap server refuses
# every transfer.
TRANSFER_FAULT = os.environ.get("SGLANG_LAB_TRANSFER_FAULT_FILE", "/run/sglang-dsv4-lab-transfer-fault")


def _transfer_fault() -> bool:
    """Whether the lab's transfer fault names this server's start (its systemd invocation)."""
    invocation = os.environ.get("INVOCATION_ID")
    try:
        return bool(invocation) and Path(TRANSFER_FAULT).read_text().strip() == invocation
    except OSError:
        return False


class BootstrapHandler(BaseHTTPRequestHandler):
    """The prefill's KV bootstrap server, as far as a GPU-less host can go: it listens on
    --disaggregation-bootstrap-port at --host and answers GET /health with "OK" (sglang 0.5.23,
    srt/disaggregation/common/conn.py, CommonKVBootstrapServer._setup_routes and _handle_health_check; started in
    a thread by the tokenizer manager). A decode's KV receiver asks GET /route where the prefill's KV sender is:
    the lab answers with this address (no KV cache moves without GPUs) and counts the request's transfer on the
    prefill's metrics (sglang:kv_transfer_*, observed on the prefill side as SGLang does), so that a transfer is
    only counted where a decode really reached the prefill. /register_dp_rank and /query_dp_ranks exchange
    endpoints between GPU processes, which the lab has none of: they answer 501."""

    server_version = "Python/3.11 aiohttp/3.14.5"
    app: Any = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("bootstrap %s %s", self.address_string(), format % args)

    def _reply(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, "OK")
        elif (self.path.startswith("/route?") or self.path == "/route") and _transfer_fault():
            log.error("lab fault injection: %s names this start, this KV transfer is refused", TRANSFER_FAULT)
            self._reply(503, "lab fault: KV transfer refused")
        elif self.path.startswith("/route?") or self.path == "/route":
            began = time.monotonic()
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            try:
                tokens = int((query.get("lab_prompt_tokens") or ["0"])[0])
            except ValueError:
                tokens = 0
            if self.app is not None:
                self.app.metrics.transferred(tokens, time.monotonic() - began)
            address, port = self.server.server_address[:2]
            data = json.dumps({"rank_ip": address, "rank_port": port, "lab": "no KV cache moves in the lab"})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())
        else:
            self._reply(404, "404: Not Found")

    def do_POST(self) -> None:
        known = self.path in ("/register_dp_rank", "/query_dp_ranks") or self.path.startswith("/route")
        self._reply(501 if known else 404, "lab stand-in: no KV transfer" if known else "404: Not Found")

    do_PUT = do_POST  # noqa: N815 - http.server dispatches on this name


def _transfer_failed(why: str) -> Reply:
    """A request whose KV cache did not arrive: SGLang aborts it (the router passes the error on)."""
    return 500, {"object": "error", "message": why, "type": "InternalServerError", "code": 500}, JSON


def _serve_bootstrap(args: argparse.Namespace, app: Any = None) -> None:
    handler = type("BoundBootstrapHandler", (BootstrapHandler,), {"app": app})
    httpd = ThreadingHTTPServer((args.host, args.disaggregation_bootstrap_port), handler)
    httpd.daemon_threads = True
    log.info("CommonKVBootstrapServer started successfully on %s:%s", args.host, args.disaggregation_bootstrap_port)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()


def _become_ready(app: ServerApp, delay: float) -> None:
    time.sleep(delay)
    app.ready = True
    log.info("The server is fired up and ready to roll!")


if __name__ == "__main__":
    sys.exit(main())
