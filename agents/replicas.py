"""Engine replicas behind one handle (`rollout.num_engines`).

A `SamplingClient` over `Replicas` sees one engine. `generate` spreads its requests over the
replicas by load (tokens asked for and not yet returned), keeping the requests that share a
prompt together so each group's prompt is prefilled once, on one replica; new weights go to
every replica. Each result says which replica produced it (`extra["replica"]`).
"""

from __future__ import annotations

import threading
from typing import Any

from agents.engine import GenRequest, GenResult
from agents.sampling import APIFuture, Handle


class Replicas:
    """Several engine handles (in this process or Ray actors) as one."""

    def __init__(self, handles: list[Handle]) -> None:
        self.handles = handles
        self.load = [0] * len(handles)
        """Tokens each replica has been asked for and not yet returned."""
        self._lock = threading.Lock()

    def call(self, method: str, *args: Any, **kwargs: Any) -> APIFuture[Any]:
        if method == "generate":
            return self._generate(*args, **kwargs)
        if method == "compute_logprobs":
            return self.handles[self.load.index(min(self.load))].call(method, *args, **kwargs)
        # new weights (update_weights, load) and anything else: every replica
        return _All([h.call(method, *args, **kwargs) for h in self.handles])

    def _generate(self, requests: list[GenRequest], **kwargs: Any) -> APIFuture[list[GenResult]]:
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(tuple(r.prompt_ids), []).append(i)
        shards: list[list[int]] = [[] for _ in self.handles]
        cost = [0] * len(self.handles)
        with self._lock:
            # largest groups first, each to the replica with the least work
            for idx in sorted(
                groups.values(), key=lambda g: -sum(requests[i].max_new_tokens for i in g)
            ):
                k = min(range(len(self.handles)), key=lambda j: self.load[j] + cost[j])
                shards[k] += idx
                cost[k] += sum(requests[i].max_new_tokens for i in idx)
            for k, c in enumerate(cost):
                self.load[k] += c
        futures = {
            k: self.handles[k].call("generate", [requests[i] for i in shard], **kwargs)
            for k, shard in enumerate(shards)
            if shard
        }
        return _Gathered(self, futures, shards, cost, len(requests))


class _All:
    """Waits for every replica; the value is the first one's."""

    def __init__(self, futures: list[APIFuture[Any]]) -> None:
        self.futures = futures

    def result(self) -> Any:
        values = [f.result() for f in self.futures]
        return values[0]


class _Gathered:
    """The replicas' shards back in request order, each result stamped with its replica."""

    def __init__(
        self,
        owner: Replicas,
        futures: dict[int, APIFuture[list[GenResult]]],
        shards: list[list[int]],
        cost: list[int],
        n: int,
    ) -> None:
        self.owner, self.futures, self.shards, self.cost, self.n = owner, futures, shards, cost, n
        self._value: list[GenResult] | None = None

    def result(self) -> list[GenResult]:
        if self._value is None:
            out: list[GenResult | None] = [None] * self.n
            try:
                for k, fut in self.futures.items():
                    for i, r in zip(self.shards[k], fut.result(), strict=True):
                        r.extra["replica"] = k
                        out[i] = r
            finally:
                with self.owner._lock:
                    for k, c in enumerate(self.cost):
                        self.owner.load[k] -= c
                self.cost = [0] * len(self.cost)
            self._value = [r for r in out if r is not None]
        return self._value
