"""The sampling client: the loop's only way to sample (Tinker's `SamplingClient` shape).

    sampler = training_client.save_weights_and_get_sampling_client(version)
    response = sampler.sample(prompt_tokens, num_samples=4, sampling_params=params).result()
    response.sequences[0].tokens, .logprobs, .stop_reason, .version

An engine backend (`agents/engine_hf.py`, `agents/engine_vllm.py`; `openai` for
evaluation) sits behind a `Handle`: in this process (`Local`) or on a Ray actor
(`trainers/placement.py`). Every call returns a future, so a schedule can overlap sampling
with training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from agents.engine import GenRequest, GenResult

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class APIFuture(Protocol[T_co]):
    """A pending result; `result()` waits for it."""

    def result(self) -> T_co: ...


@dataclass
class Done(Generic[T]):
    """A future that is already resolved (in-process backends run calls at once)."""

    value: T

    def result(self) -> T:
        return self.value


class Handle(Protocol):
    """Where a backend object lives. `call` runs one of its methods; arguments that are
    futures are resolved first (on Ray without passing through this process)."""

    def call(self, method: str, *args: Any, **kwargs: Any) -> APIFuture[Any]: ...


class Local:
    """A backend in this process: calls run synchronously."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def call(self, method: str, *args: Any, **kwargs: Any) -> APIFuture[Any]:
        args = tuple(a.result() if hasattr(a, "result") else a for a in args)
        return Done(getattr(self.backend, method)(*args, **kwargs))


@dataclass
class SamplingParams:
    """How to sample one prompt (Tinker's `SamplingParams`, plus a seed for exact replays)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int = 0
    """Sample i of a call is seeded with seed + i, independent of batching."""


@dataclass
class SampledSequence:
    """One continuation."""

    tokens: list[int]
    logprobs: list[float]
    """Log-prob of each sampled token under the temperature-scaled distribution."""
    stop_reason: str
    """`stop` (a stop string), `eos`, or `length`."""
    version: int
    """Weights version that produced it."""


@dataclass
class SampleResponse:
    sequences: list[SampledSequence]


class SamplingClient:
    """Samples from, and scores with, one set of weights on an engine."""

    def __init__(self, engine: Handle) -> None:
        self.engine = engine

    def sample(
        self, prompt_tokens: list[int], num_samples: int, sampling_params: SamplingParams
    ) -> APIFuture[SampleResponse]:
        """`num_samples` continuations of one prompt."""
        p = sampling_params
        reqs = [
            GenRequest(list(prompt_tokens), p.max_tokens, p.seed + i, p.stop)
            for i in range(num_samples)
        ]
        results = self.generate(reqs, p.temperature, p.top_p).result()
        return Done(
            SampleResponse(
                [
                    SampledSequence(r.token_ids, r.logprobs, r.finish_reason, r.version)
                    for r in results
                ]
            )
        )

    def generate(
        self, requests: list[GenRequest], temperature: float, top_p: float = 1.0
    ) -> APIFuture[list[GenResult]]:
        """Many prompts at once, each with its own budget, seed and stop strings (what the
        multi-turn agent loop sends)."""
        return self.engine.call("generate", requests, temperature=temperature, top_p=top_p)

    def compute_logprobs(
        self, sequences: list[list[int]], temperature: float = 1.0
    ) -> APIFuture[list[list[float]]]:
        """Log-prob of every token given the ones before it (the first token gets 0.0),
        under the temperature-scaled distribution: a reference model's scores."""
        return self.engine.call("compute_logprobs", sequences, temperature)

    def load_weights(self, weights: Any, version: int) -> APIFuture[None]:
        """New weights: a state dict (or a future of one) pushed by a training client."""
        return self.engine.call("update_weights", weights, version)

    def load_path(self, path: str, version: int) -> APIFuture[None]:
        """New weights from an HF model folder (a checkpoint, `save_weights_for_sampler`)."""
        return self.engine.call("load", path, version)
