"""A bounded load test of `skyrl serve`: N concurrent short chat requests on loopback.

    skyrl serve --model tiny --port 8000 &
    python benchmarks/serve_load.py --base-url http://127.0.0.1:8000/v1 --requests 200

All requests go out at once through the real `openai` client (AsyncOpenAI, no retries);
prints completed/failed counts, wall time, requests/s, generated tokens/s and latency
percentiles. The server batches what is queued, so throughput comes from batching.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any


async def _run(base_url: str, n: int, max_tokens: int, model: str) -> dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="tml-local", max_retries=0, timeout=600)
    latencies: list[float] = []
    tokens = 0
    errors: list[str] = []

    async def one(i: int) -> None:
        nonlocal tokens
        t0 = time.perf_counter()
        try:
            r = await client.chat.completions.create(
                model=model,
                max_tokens=max_tokens,
                temperature=1.0,
                seed=i,
                messages=[{"role": "user", "content": f"Say something short ({i})."}],
            )
            tokens += r.usage.completion_tokens if r.usage else 0
            latencies.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t0
    await client.close()
    latencies.sort()

    def pct(q: float) -> float:
        return (
            latencies[min(len(latencies) - 1, int(q * len(latencies)))]
            if latencies
            else float("nan")
        )

    return {
        "requests": n,
        "completed": len(latencies),
        "failed": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 1),
        "tokens_per_s": round(tokens / wall, 1),
        "p50_s": round(pct(0.5), 2),
        "p95_s": round(pct(0.95), 2),
        "max_tokens": max_tokens,
    }


def run(
    base_url: str, requests: int = 200, max_tokens: int = 16, model: str = "tiny"
) -> dict[str, Any]:
    """Fire `requests` chat completions at once; the measurements as a dict."""
    return asyncio.run(_run(base_url, requests, max_tokens, model))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--model", default="tiny")
    a = ap.parse_args()
    print(json.dumps(run(a.base_url, a.requests, a.max_tokens, a.model), indent=1))
