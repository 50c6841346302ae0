"""LAB TOOL: a bounded load generator for the lab fleet: streaming chat requests at a steady rate, loopback only.

Each request is POST /v1/chat/completions with "stream": true and the client key; an answer counts as
  ok         200 and the stream ended with data: [DONE] (with a second --key, a 401 to the first key is asked again
             with the next, as a client does while a rotated key reaches the routers one at a time: `rekeyed`)
  non_2xx    any other status (the balancer had no router, a router refused, ...)
  truncated  200, but the stream ended before [DONE] (a server killed mid-stream)
  failed     no answer at all (connection refused or reset before the status line)
Used by molecule/traffic (a rollout under load must lose nothing) and by bench/bench.py (drain on and off).

    python bench/loadgen.py --port 25000 --key KEY --rate 20 --seconds 30   (SIGTERM ends it early)
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import signal
import sys
import time
from dataclasses import dataclass, field


@dataclass
class Tally:
    ok: int = 0
    non_2xx: int = 0
    truncated: int = 0
    failed: int = 0
    rekeyed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return self.ok + self.non_2xx + self.truncated + self.failed

    @property
    def lost(self) -> int:
        return self.non_2xx + self.truncated + self.failed

    def summary(self) -> dict:
        times = sorted(self.seconds)
        return {
            "sent": self.sent,
            "ok": self.ok,
            "non_2xx": self.non_2xx,
            "rekeyed": self.rekeyed,
            "truncated": self.truncated,
            "failed": self.failed,
            "lost": self.lost,
            "statuses": dict(sorted(self.statuses.items())),
            "median_seconds": times[len(times) // 2] if times else None,
        }


def _request(host: str, port: int, key: str, model: str, tokens: int) -> bytes:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "tell me"}], "max_tokens": tokens, "stream": True}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def one(host: str, port: int, payloads: list[bytes], tally: Tally, timeout: float) -> None:
    began = time.monotonic()
    for number, payload in enumerate(payloads):
        last = number == len(payloads) - 1
        if await ask(host, port, payload, tally, timeout, began, last) != "401" or last:
            return
        tally.rekeyed += 1


async def ask(
    host: str, port: int, payload: bytes, tally: Tally, timeout: float, began: float, last: bool
) -> str | None:
    """One request; its status, or None when it got none. A 401 that another key may answer is not counted."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError):
        tally.failed += 1
        return None
    try:
        writer.write(payload)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        if not status_line:
            tally.failed += 1
            return None
        status = status_line.split()[1].decode() if len(status_line.split()) > 1 else "?"
        body = await asyncio.wait_for(reader.read(), timeout)
        if status == "401" and not last:
            return status
        tally.statuses[status] = tally.statuses.get(status, 0) + 1
        if status != "200":
            tally.non_2xx += 1
        elif b"data: [DONE]" in body:
            tally.ok += 1
            tally.seconds.append(time.monotonic() - began)
        else:
            tally.truncated += 1
        return status
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        tally.truncated += 1
        return None
    finally:
        writer.close()


async def run(
    host: str,
    port: int,
    keys: list[str],
    rate: float,
    seconds: float,
    tokens: int,
    model: str,
    stop: asyncio.Event | None,
) -> Tally:
    """Starts `rate` requests per second for `seconds` (or until `stop` is set), then waits for all to end."""
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit(f"loadgen sends to loopback only, not {host}")
    tally = Tally()
    payloads = [_request(host, port, key, model, tokens) for key in keys]
    tasks = []
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < seconds and not (stop and stop.is_set()):
        tasks.append(asyncio.create_task(one(host, port, payloads, tally, timeout=300)))
        n += 1
        await asyncio.sleep(max(began + n / rate - time.monotonic(), 0))
    await asyncio.gather(*tasks)
    return tally


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True, action="append", help="the client key; again for the next key")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="deepseek-ai/DeepSeek-V4-Flash")
    args = parser.parse_args(argv)

    async def until_signal() -> Tally:
        # SIGTERM or SIGINT stops the sending; what is in flight still ends and is counted.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        return await run(args.host, args.port, args.key, args.rate, args.seconds, args.tokens, args.model, stop)

    tally = asyncio.run(until_signal())
    print(json.dumps(tally.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
