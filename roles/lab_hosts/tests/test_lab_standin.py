"""The lab stand-in as a process: its HTTP surface, API key, startup line and sampling, behind the real router."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[1] / "files/sglang_lab_standin.py"
LAB_MODEL = Path(__file__).resolve().parents[3] / "roles/lab_hosts/files/model"
sys.path.insert(0, str(STANDIN.parent))
import sglang_lab_standin as standin  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, body: dict | None = None, key: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode())
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            ctype = response.headers.get("Content-Type", "")
            return response.status, json.loads(raw) if raw and "json" in ctype else raw.decode()
    except urllib.error.HTTPError as error:
        return error.code, None


def until(predicate, timeout: float = 10) -> bool:
    """Polls instead of sleeping a guessed time: a busy machine only makes it slower, never wrong."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def wait_status(url: str, status: int, timeout: float = 10) -> None:
    def answered() -> bool:
        try:
            return call(url)[0] == status
        except OSError:  # not listening yet
            return False

    if not until(answered, timeout):
        raise AssertionError(f"{url} never answered {status}")


class Proc:
    def __init__(self, *args: str, env: dict | None = None, program: list[str] | None = None) -> None:
        self.popen = subprocess.Popen(
            [*(program or [sys.executable, str(STANDIN)]), *args],
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "SGLANG_LAB_STARTUP_SECONDS": "0.3",
                "SGLANG_LAB_DRAIN_POLL_SECONDS": "0.2",
                **(env or {}),
            },
        )

    def stop(self) -> str:
        self.popen.terminate()
        return self.popen.communicate(timeout=10)[1]


def model_dir(path: Path) -> Path:
    (path / "config.json").write_text("{}")
    (path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.95, "eos_token_id": 1}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (path / name).write_text((LAB_MODEL / name).read_text())
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return model_dir(tmp_path)


# How long the real router may take to answer ready: its launcher imports sglang, torch and transformers (about 9 s
# of CPU; 35 s measured on this 2-core machine while make test's lanes ran). A guard against a hang, not a measure.
ROUTER_START = 180


def real_router() -> list[str]:
    """The real sglang-router 0.3.2 of the contract venv (scripts/test.sh sets SGLANG_CONTRACT_PYTHON)."""
    python = os.environ.get("SGLANG_CONTRACT_PYTHON")
    if not python:
        pytest.skip("SGLANG_CONTRACT_PYTHON is not set: run through scripts/test.sh")
    return [python, "-m", "sglang_router.launch_router"]


def start_stack(model: Path) -> tuple[dict, dict]:
    """A prefill and a decode stand-in behind the real router; (urls, processes)."""
    # The router first: without the contract venv the test is skipped before any stand-in starts (none is left).
    router_program = real_router()
    ports = {name: free_port() for name in ("prefill", "decode", "router", "bootstrap")}
    common = [
        "--model-path",
        str(model),
        "--sampling-defaults",
        "model",
        "--enable-metrics",
        "--served-model-name",
        "dsv4",
        # As the collection renders it: the managed defaults for native /generate.
        "--preferred-sampling-params",
        PREFERRED,
    ]
    prefill = Proc(
        "server",
        *common,
        "--port",
        str(ports["prefill"]),
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        str(ports["bootstrap"]),
        "--mem-fraction-static",
        "0.8",
    )
    decode = Proc("server", *common, "--port", str(ports["decode"]), "--disaggregation-mode", "decode")
    router = Proc(
        "--pd-disaggregation",
        "--prefill",
        f"http://127.0.0.1:{ports['prefill']}",
        str(ports["bootstrap"]),
        "--decode",
        f"http://127.0.0.1:{ports['decode']}",
        "--host",
        "127.0.0.1",
        "--port",
        str(ports["router"]),
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(free_port()),
        "--tokenizer-path",
        str(model),
        "--health-check-interval-secs",
        "1",
        "--health-failure-threshold",
        "1",
        program=router_program,
    )
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    return urls, {"prefill": prefill, "decode": decode, "router": router}


def stop_stack(procs: dict) -> None:
    for proc in procs.values():
        if proc.popen.poll() is None:
            proc.stop()


@pytest.fixture
def stack(model: Path):
    """A stack of the test's own, for a test that stops one of its processes."""
    urls, procs = start_stack(model)
    yield urls, procs
    stop_stack(procs)


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory):
    """One stack for the tests that only ask it (each launch of the real router costs about 9 s of CPU: its
    launcher imports sglang, torch and transformers). Never stopped or reconfigured by a test."""
    urls, procs = start_stack(model_dir(tmp_path_factory.mktemp("model")))
    yield urls, procs
    stop_stack(procs)


PREFERRED = '{"temperature": 0.6, "top_p": 0.95}'


def chat(url: str, **extra) -> dict:
    status, body = call(
        url + "/v1/chat/completions",
        {"model": "dsv4", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 48, **extra},
    )
    assert status == 200
    return body


def test_health_is_503_while_loading_then_200(model):
    port = free_port()
    proc = Proc("server", "--model-path", str(model), "--port", str(port), env={"SGLANG_LAB_STARTUP_SECONDS": "2"})
    try:
        wait_status(f"http://127.0.0.1:{port}/health", 503)
        assert call(f"http://127.0.0.1:{port}/ready")[0] == 503
        wait_status(f"http://127.0.0.1:{port}/health", 200)
    finally:
        proc.stop()


def test_servers_log_like_sglang_and_router_waits_for_both(stack):
    urls, procs = stack
    wait_status(urls["router"] + "/readiness", 200, timeout=ROUTER_START)
    for url in (urls["prefill"], urls["decode"]):
        assert call(url + "/ready")[0] == 200
        assert call(url + "/health_generate")[0] == 200
    log = procs["prefill"].stop()
    assert "Using default chat sampling params from model generation config: {'temperature': 0.6, 'top_p': 0.95}" in log
    assert "The server is fired up and ready to roll!" in log


def test_info_endpoints_have_sglang_keys(shared_stack):
    urls, _unused = shared_stack
    wait_status(urls["prefill"] + "/health", 200)
    for path in ("/server_info", "/get_server_info"):
        status, info = call(urls["prefill"] + path)
        assert status == 200
        assert info["sampling_defaults"] == "model" and info["disaggregation_mode"] == "prefill"
        assert info["version"] == "0.5.23" and info["tp_size"] == 1
        assert info["lab_unparsed_args"] == {"mem_fraction_static": "0.8"}
    _unused, model_info = call(urls["prefill"] + "/model_info")
    assert {"model_path", "served_model_name", "preferred_sampling_params", "disaggregation_mode"} <= set(model_info)
    _unused, models = call(urls["decode"] + "/v1/models")
    assert models["object"] == "list" and models["data"][0]["id"] == "dsv4"
    status, metrics = call(urls["decode"] + "/metrics")
    assert status == 200 and "sglang:num_running_reqs{" in metrics


def test_chat_without_temperature_uses_model_defaults_and_varies(shared_stack):
    urls, _unused = shared_stack
    wait_status(urls["router"] + "/readiness", 200, timeout=ROUTER_START)
    answers = [chat(urls["router"]) for _unused in range(4)]
    for answer in answers:
        assert answer["sglang_lab"]["sampling_params"] == {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
        }
        assert answer["sglang_lab"]["disaggregation_mode"] == "decode"
    assert len({a["choices"][0]["message"]["content"] for a in answers}) > 1


def test_greedy_is_deterministic_and_repetitive(shared_stack):
    urls, _unused = shared_stack
    wait_status(urls["decode"] + "/health", 200)
    first, second = (chat(urls["decode"], temperature=0, max_tokens=64) for _unused in range(2))
    text = first["choices"][0]["message"]["content"]
    assert text == second["choices"][0]["message"]["content"]
    words = text.split()
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    assert 1 - len(set(grams)) / len(grams) > 0.5


def test_completions_use_fixed_defaults(shared_stack):
    urls, _unused = shared_stack
    wait_status(urls["decode"] + "/health", 200)
    status, body = call(urls["decode"] + "/v1/completions", {"model": "dsv4", "prompt": "hello"})
    assert status == 200
    assert body["sglang_lab"]["sampling_params"]["temperature"] == 1.0
    assert call(urls["decode"] + "/v1/completions", {"prompt": "x", "temperature": None})[0] == 400


def test_generate_through_the_real_router_takes_the_preferred_params_for_what_it_leaves_out(shared_stack):
    urls, _unused = shared_stack
    wait_status(urls["router"] + "/readiness", 200, timeout=ROUTER_START)
    status, body = call(urls["router"] + "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 8}})
    assert status == 200 and isinstance(body["text"], str)
    resolved = body["sglang_lab"]["sampling_params"]
    assert resolved == {"temperature": 0.6, "top_p": 0.95, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    assert body["sglang_lab"]["defaults_source"] == "preferred sampling params"
    asked = {"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0.9}}
    status, body = call(urls["router"] + "/generate", asked)
    # The router forwards a request's floats as 32-bit ones (sglang-router 0.3.2): 0.9 arrives as 0.8999999761581421.
    assert status == 200 and abs(body["sglang_lab"]["sampling_params"]["temperature"] - 0.9) < 1e-6
    _unused, info = call(urls["decode"] + "/server_info")
    assert info["preferred_sampling_params"] == {"temperature": 0.6, "top_p": 0.95}


def test_real_router_is_ready_only_while_both_workers_are_healthy(stack):
    urls, procs = stack
    wait_status(urls["router"] + "/readiness", 200, timeout=ROUTER_START)
    procs["decode"].stop()
    wait_status(urls["router"] + "/readiness", 503, timeout=30)
    # /health says only that the router process is up.
    assert call(urls["router"] + "/health")[0] == 200


def test_api_key_from_config_file_is_enforced_except_on_health_and_metrics(model, tmp_path):
    port = free_port()
    config = tmp_path / "server.yaml"
    config.write_text(json.dumps({"api-key": "s3cret"}))
    proc = Proc("server", "--model-path", str(model), "--port", str(port), "--config", str(config), "--enable-metrics")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_status(url + "/health", 200)
        assert call(url + "/metrics")[0] == 200
        assert call(url + "/v1/models")[0] == 401
        assert call(url + "/v1/models", key="wrong")[0] == 401
        assert call(url + "/v1/models", key="s3cret")[0] == 200
        assert "s3cret" not in " ".join(proc.popen.args)
    finally:
        proc.stop()


def test_openai_sampling_defaults_ignore_the_file(model):
    assert standin.model_default_sampling_params(str(model), "openai") == {}
    assert standin.model_default_sampling_params(str(model), "model") == {"temperature": 0.6, "top_p": 0.95}


def test_only_the_server_is_imitated():
    assert standin.main([]) == 2
    assert standin.main(["router", "--port", "1"]) == 2


def _samples(text: str) -> dict[str, float]:
    """name{labels} -> value of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_metrics_move_with_the_traffic_it_serves(shared_stack):
    urls, _unused = shared_stack
    wait_status(urls["router"] + "/readiness", 200, timeout=ROUTER_START)
    before = _samples(call(urls["prefill"] + "/metrics")[1])
    for _unused in range(3):
        chat(urls["router"])
    after = _samples(call(urls["prefill"] + "/metrics")[1])
    labels = 'model_name="dsv4",engine_type="prefill",is_streaming="false"'
    scheduler = 'model_name="dsv4",engine_type="prefill",tp_rank="0",pp_rank="0",moe_ep_rank="0"'

    def moved(name: str) -> float:
        """How much a counter moved over the three chats (the stack is shared: it may have served others before)."""
        return after[name] - before.get(name, 0.0)

    assert moved(f"sglang:num_requests_total{{{labels}}}") == 3
    assert moved(f"sglang:time_to_first_token_seconds_count{{{labels}}}") == 3
    assert moved(f'sglang:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}}') == 3
    # The prefill side observes one KV transfer per request, as SGLang does.
    assert moved(f"sglang:kv_transfer_latency_ms_count{{{scheduler}}}") == 3
    assert after[f"sglang:max_total_num_tokens{{{scheduler}}}"] == standin.LAB_MAX_TOTAL_TOKENS


def test_metric_labels_are_checked_against_the_table():
    metrics = standin.Metrics("m", "decode")
    with pytest.raises(ValueError, match="is_streaming"):
        metrics.inc("sglang:num_requests_total")
    metrics.observe("sglang:inter_token_latency_seconds", 0.005)
    text = metrics.exposition()
    assert "# TYPE sglang:num_requests counter" not in text  # no request yet: counters appear with the first
    assert 'sglang:inter_token_latency_seconds_bucket{model_name="m",engine_type="decode",le="0.004"} 0.0' in text
    assert 'sglang:inter_token_latency_seconds_bucket{model_name="m",engine_type="decode",le="0.006"} 1.0' in text
    assert "# TYPE sglang:num_running_reqs gauge" in text


# --- under load and at stop -------------------------------------------------------------------------------


def stream(url: str, tokens: int = 40, key: str | None = None, greedy: bool = False) -> tuple[int, list[str], float]:
    """A streamed chat: (status, the data lines, seconds it took). Sampled, it may end early at a sampled
    end-of-text; greedy (temperature 0), it always runs to max_tokens (end-of-text never wins outright)."""
    body = {"model": "dsv4", "messages": [{"role": "user", "content": "hello"}], "max_tokens": tokens, "stream": True}
    if greedy:
        body["temperature"] = 0
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode())
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    began = time.monotonic()
    with urllib.request.urlopen(request, timeout=60) as response:
        lines = [line.decode().strip() for line in response if line.strip()]
        return response.status, lines, time.monotonic() - began


def decode_server(model: Path, *extra: str, env: dict | None = None) -> tuple[str, Proc]:
    port = free_port()
    proc = Proc(
        "server",
        "--model-path",
        str(model),
        "--port",
        str(port),
        "--disaggregation-mode",
        "decode",
        "--enable-metrics",
        *extra,
        env={"SGLANG_LAB_TOKEN_SECONDS": "0.05", **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    wait_status(url + "/health", 200)
    return url, proc


def gauge(url: str, name: str) -> float:
    text = call(url + "/metrics")[1]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_a_stream_is_one_event_per_token_paced_and_ends_with_done(model):
    url, proc = decode_server(model)
    try:
        status, lines, seconds = stream(url, tokens=20)
        assert status == 200 and lines[-1] == "data: [DONE]"
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        words = [c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]]
        assert len(words) >= 1 and seconds >= 0.05 * len(words) * 0.9
    finally:
        proc.stop()


def histogram_quantile_bucket(url: str, name: str) -> dict[str, float]:
    """The cumulative bucket counts of one histogram, by upper bound."""
    text = call(url + "/metrics")[1]
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            found[bound] = found.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def test_the_slow_first_token_fault_delays_the_first_token_and_shows_in_the_ttft_histogram(model):
    url, proc = decode_server(model, env={"SGLANG_LAB_FIRST_TOKEN_SECONDS": "0.6"})
    try:
        status, lines, seconds = stream(url, tokens=4)
        assert status == 200 and lines[-1] == "data: [DONE]" and seconds >= 0.6
        status, _body = call(
            url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
        )
        assert status == 200
        buckets = histogram_quantile_bucket(url, "sglang:time_to_first_token_seconds")
        # Both answers took their first token after at least 0.6 s: none is in a bucket below 0.6 s.
        assert buckets["0.4"] == 0 and buckets["+Inf"] == 2
    finally:
        proc.stop()


def test_sigterm_drains_like_sglang_health_503_new_requests_served_exit_when_idle(model):
    url, proc = decode_server(model, env={"SGLANG_LAB_DRAIN_POLL_SECONDS": "1"})
    results: dict = {}
    # 100 tokens of 50 ms, greedy so that no sampled end-of-text cuts it short: the stream runs for 5 s, far longer
    # than the checks below take, and the watchdog's first look (after 1 s) still sees it running.
    reader = threading.Thread(target=lambda: results.update(first=stream(url, tokens=100, greedy=True)))
    reader.start()
    assert until(lambda: gauge(url, "sglang:num_running_reqs") == 1)
    proc.popen.send_signal(signal.SIGTERM)
    wait_status(url + "/health", 503)
    assert call(url + "/health_generate")[0] == 503
    assert call(url + "/ready")[0] == 503
    # Still accepted while draining (SGLang does not refuse new requests when gracefully_exit is set).
    late = call(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
    assert late[0] == 200
    assert proc.popen.poll() is None
    reader.join(timeout=30)
    status, lines, _seconds = results["first"]
    assert status == 200 and lines[-1] == "data: [DONE]"
    assert proc.popen.wait(timeout=10) == 0
    # SGLang's watchdog line at each look: requests were still running at the first, none at the last.
    counts = [
        int(n)
        for n in re.findall(
            r"Gracefully exiting\.\.\. Remaining number of requests (\d+)\.", proc.popen.communicate()[1]
        )
    ]
    assert counts and counts[0] >= 1 and counts[-1] == 0, counts


def test_sgl_force_shutdown_exits_without_waiting(model):
    url, proc = decode_server(model, env={"SGL_FORCE_SHUTDOWN": "1", "SGLANG_LAB_DRAIN_POLL_SECONDS": "0.1"})
    reader = threading.Thread(target=lambda: stream(url, tokens=200, greedy=True), daemon=True)
    reader.start()
    time.sleep(0.3)
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.popen.wait(timeout=5) == 0


def test_max_running_requests_queues_the_rest(model):
    url, proc = decode_server(model, "--max-running-requests", "1")
    try:
        # Two streams of 5 s each: the first still runs while the second waits for it.
        readers = [threading.Thread(target=stream, args=(url, 100)), threading.Thread(target=stream, args=(url, 100))]
        for reader in readers:
            reader.start()

        def running() -> tuple[float, float]:
            return gauge(url, "sglang:num_running_reqs"), gauge(url, "sglang:num_queue_reqs")

        assert until(lambda: running() == (1, 1)), running()
        for reader in readers:
            reader.join(timeout=30)
        assert (gauge(url, "sglang:num_running_reqs"), gauge(url, "sglang:num_queue_reqs")) == (0, 0)
    finally:
        proc.stop()


def test_a_stream_through_the_real_router_arrives_whole(shared_stack):
    urls, _procs = shared_stack
    wait_status(urls["router"] + "/readiness", 200, timeout=ROUTER_START)
    status, lines, _seconds = stream(urls["router"], tokens=16)
    assert status == 200 and lines[-1] == "data: [DONE]", lines[-3:]


def test_the_prefill_bootstrap_port_answers_health(shared_stack):
    urls, _procs = shared_stack
    wait_status(urls["prefill"] + "/health", 200)
    assert call(urls["bootstrap"] + "/health") == (200, "OK")


def test_the_toy_models_scores_are_computed_once_per_word_and_never_differ_from_the_table():
    """The score table is cached (the hashing was half of the stand-in's CPU per request under steady load): every
    row equals the uncached computation, a generation reads its rows from the cache, and the cache never changes
    what is sampled (the same seed, the same answer, with the cache cold or warm)."""
    params = {"temperature": 0.6, "top_p": 0.95, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
    standin._logits.cache_clear()
    cold = standin.generate("tell me", params, 48, 7)
    assert all(standin._logits(w) == standin._logits.__wrapped__(w) for w in [*standin.VOCAB, "me"])
    hits = standin._logits.cache_info().hits
    warm = standin.generate("tell me", params, 48, 7)
    assert warm == cold and standin._logits.cache_info().hits >= hits + 48 - 1
    # A caller that masks end-of-text changes its own copy, never the cached row.
    assert standin._logits("the")[-1] != -math.inf


def test_a_decode_pulls_the_kv_cache_from_the_bootstrap_the_request_names_and_fails_it_when_that_cannot_be_reached(
    shared_stack,
):
    """SGLang's KV receiver asks the prefill's bootstrap server the router names (bootstrap_host, bootstrap_port);
    the prefill counts the transfer when asked (the real router's requests do so: the metrics test above counts one
    per chat). A bootstrap that does not answer is a failed transfer: counted on the decode, the request fails."""
    urls, _procs = shared_stack
    wait_status(urls["decode"] + "/health", 200)
    scheduler = 'model_name="dsv4",engine_type="decode",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    failed = f"sglang:num_transfer_failed_reqs_total{{{scheduler}}}"
    before = _samples(call(urls["decode"] + "/metrics")[1]).get(failed, 0.0)
    body = {"model": "dsv4", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    request = urllib.request.Request(
        urls["decode"] + "/v1/chat/completions",
        data=json.dumps(
            {**body, "bootstrap_host": "127.0.0.1", "bootstrap_port": free_port(), "bootstrap_room": 7}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 500
    assert "KV transfer from 127.0.0.1:" in json.loads(refused.value.read())["message"]
    assert _samples(call(urls["decode"] + "/metrics")[1])[failed] == before + 1
    # Sent to a decode without a bootstrap (not from a PD router), a request is served as before.
    assert call(urls["decode"] + "/v1/chat/completions", body)[0] == 200


def test_the_transfer_fault_makes_a_prefills_bootstrap_refuse_transfers_while_its_file_names_this_start(
    tmp_path, monkeypatch
):
    """The lab's KV transfer fault: while TRANSFER_FAULT names the server's systemd invocation, the prefill's
    bootstrap server refuses /route (the decode that asks counts a failed transfer, tested above); naming another
    start (the server restarted since) or removed, it answers again. Its health stays 200."""
    fault = tmp_path / "transfer-fault"
    monkeypatch.setattr(standin, "TRANSFER_FAULT", str(fault))
    monkeypatch.setenv("INVOCATION_ID", "0123abcd")
    server = standin.ThreadingHTTPServer(("127.0.0.1", 0), standin.BootstrapHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert call(url + "/route?bootstrap_room=1")[0] == 200
        fault.write_text("0123abcd\n")
        assert call(url + "/route?bootstrap_room=2")[0] == 503
        assert call(url + "/health")[0] == 200
        fault.write_text("another start\n")
        assert call(url + "/route?bootstrap_room=3")[0] == 200
        fault.unlink()
        assert call(url + "/route?bootstrap_room=4")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
