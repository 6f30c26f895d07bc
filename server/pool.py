"""Sampling for the server: one thread runs every engine call, batching what is queued.

HTTP handlers submit `GenRequest`s and await a future; the thread takes everything queued,
groups it by (weights, temperature, top_p) and runs each group as one `generate` call of a
`SamplingClient`, so 200 concurrent short requests cost a few batched decodes, not 200.
Engines come from the engine table (`agents/engines.py`): one per weights folder, kept in a
small LRU, or, for an engine that reserves device memory when built (vllm), a single one
that each group's weights are loaded into in place.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.engine import GenRequest, GenResult
from agents.sampling import Local, SamplingClient

MAX_BATCH = 64
"""Most requests one `generate` call decodes together."""


@dataclass
class _Job:
    weights: str
    requests: list[GenRequest]
    temperature: float
    top_p: float
    future: Future[Any] = field(default_factory=Future)


class SamplerPool:
    """Engines by weights folder, and the thread that samples from them."""

    def __init__(
        self, base_path: Path, threads: int = 0, keep: int = 4, engine: str = "hf"
    ) -> None:
        from agents import engines

        self.base = str(base_path)
        self._threads = threads
        self._keep = keep
        self._kind = engine
        self._row = engines.require(engine, weights=True)
        self._engines: OrderedDict[str, SamplingClient] = OrderedDict()
        base = engines.build(engine, base_path, threads=threads)
        self.tokenizer: Any = base.tokenizer
        self.eos_ids: list[int] = base.eos_ids
        self.context: int = base.context
        self._engines[self.base] = SamplingClient(Local(base))
        self._loaded = self.base
        """The weights the single engine holds (`one_per_process` engines)."""
        self._one: Any = base
        """The engine `one_per_process` engines keep, and the model config it was built with."""
        self._built = _model_config(self.base)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def submit(
        self, requests: list[GenRequest], temperature: float, top_p: float, weights: str = ""
    ) -> Future[list[GenResult]]:
        """Queue `requests` on the engine serving `weights` (a folder; "" = the base model)."""
        job = _Job(weights or self.base, requests, temperature, top_p)
        self._jobs.put(job)
        return job.future

    def compute_logprobs(self, sequences: list[list[int]], weights: str = "") -> Future[Any]:
        """Log-prob of every token of each sequence (first is 0.0), on the sampling thread."""
        job = _Job(weights or self.base, [], -1.0, 1.0)
        job.requests = [GenRequest(s, 0, 0) for s in sequences]
        self._jobs.put(job)
        return job.future

    def close(self) -> None:
        self._jobs.put(None)

    def _engine(self, weights: str) -> SamplingClient:
        from agents import engines

        if self._row.one_per_process:  # called on the sampling thread only: no other user
            return self._the_one(weights)
        with self._lock:
            if weights in self._engines:
                self._engines.move_to_end(weights)
                return self._engines[weights]
        client = SamplingClient(Local(engines.build(self._kind, weights, threads=self._threads)))
        with self._lock:
            self._engines[weights] = client
            while len(self._engines) > self._keep:
                oldest = next(k for k in self._engines if k != self.base)
                del self._engines[oldest]
        return client

    def _the_one(self, weights: str) -> SamplingClient:
        """The single engine, holding `weights`: loaded in place where the folder's model
        config is the one the engine was built with, else built anew from the folder (a LoRA
        sampler unties a tied base's unembedding: another shape of model)."""
        from agents import engines

        if weights != self._loaded:
            config = _model_config(weights)
            if config == self._built:
                self._engines[self.base].load_path(weights, 0).result()
            else:
                getattr(self._one, "close", lambda: None)()
                del self._engines[self.base]
                self._one = engines.build(self._kind, weights, threads=self._threads)
                self._engines[self.base] = SamplingClient(Local(self._one))
                self._built = config
            self._loaded = weights
        return self._engines[self.base]

    def _run(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            jobs = [first]
            while len(jobs) < MAX_BATCH:
                try:
                    nxt = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._jobs.put(None)
                    break
                jobs.append(nxt)
            groups: dict[tuple[str, float, float], list[_Job]] = {}
            for job in jobs:
                groups.setdefault((job.weights, job.temperature, job.top_p), []).append(job)
            for (weights, temperature, top_p), group in groups.items():
                self._run_group(weights, temperature, top_p, group)

    def _run_group(self, weights: str, temperature: float, top_p: float, group: list[_Job]) -> None:
        try:
            engine = self._engine(weights)
            if temperature < 0:  # scoring jobs
                for job in group:
                    seqs = [r.prompt_ids for r in job.requests]
                    job.future.set_result(engine.compute_logprobs(seqs).result())
                return
            reqs = [r for job in group for r in job.requests]
            results = engine.generate(reqs, temperature, top_p).result()
        except Exception as e:  # noqa: BLE001 - every waiting request learns of it
            for job in group:
                if not job.future.done():
                    job.future.set_exception(e)
            return
        i = 0
        for job in group:
            job.future.set_result(results[i : i + len(job.requests)])
            i += len(job.requests)


def _model_config(folder: str) -> dict[str, Any]:
    return json.loads((Path(folder) / "config.json").read_text())
