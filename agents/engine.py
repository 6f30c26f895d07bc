"""The Engine contract: token ids in, token ids and log-probs out.

Backends implement this shape (no base class): `hf` (transformers, runs anywhere) lives in
`agents/engine_hf.py`; `vllm` and `openai` slot in beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class GenRequest:
    """One sequence to continue."""

    prompt_ids: list[int]
    max_new_tokens: int
    seed: int
    """Seeds this request's sampling alone, so results do not depend on batch composition."""
    stop: tuple[str, ...] = ()
    """Generation stops once the decoded continuation contains any of these."""


@dataclass
class GenResult:
    """What the engine sampled for one request."""

    token_ids: list[int]
    logprobs: list[float]
    """Log-prob of each sampled token under the temperature-scaled full distribution."""
    finish_reason: str
    """`stop` (stop string), `eos`, or `length` (max_new_tokens)."""
    version: int
    """Policy version of the weights that produced its first token."""
    extra: dict[str, Any] = field(default_factory=dict)
    token_versions: list[int] = field(default_factory=list)
    """Version of the weights that produced each token (new weights may arrive between decode
    steps, see `HFEngine.update_weights`); empty = every token is `version`."""


class Engine(Protocol):
    """Samples continuations; receives new weights from the learner."""

    version: int

    def generate(
        self, requests: list[GenRequest], *, temperature: float, top_p: float = 1.0
    ) -> list[GenResult]: ...

    def update_weights(self, named_tensors: dict[str, Any], version: int) -> None: ...
