"""What one agent episode produced, in tokens and in text.

Token-in/token-out: `token_ids` are exactly the ids the engine sampled (model turns) and
the ids the chat template produced (prompt, environment turns). The learner trains on
these ids, never on a re-tokenisation of decoded text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    """One message of the episode."""

    role: str
    """`system`, `user` (the task / an environment observation) or `assistant` (the model)."""
    text: str


@dataclass
class Trajectory:
    """One episode: the conversation, its tokens, and how it was scored."""

    task_id: str
    group_id: int
    """Index of the task within the step's batch; samples of one task share it."""
    turns: list[Turn] = field(default_factory=list)
    prompt_len: int = 0
    """Number of leading tokens that are the initial prompt (never trained on)."""
    token_ids: list[int] = field(default_factory=list)
    """Prompt + every model and environment turn, in order."""
    loss_mask: list[int] = field(default_factory=list)
    """1 for tokens the model sampled, 0 for prompt and environment tokens (len == token_ids)."""
    logprobs: list[float] = field(default_factory=list)
    """Sampling log-prob of each token (0.0 where loss_mask is 0)."""
    versions: list[int] = field(default_factory=list)
    """Policy version that produced each model turn (its first token, where new weights
    arrived mid-turn: see `token_versions`)."""
    token_versions: list[int] = field(default_factory=list)
    """Policy version that produced each sampled token (loss mask 1), in order: the async
    schedule swaps weights in between decode steps, so one episode may carry several."""
    reward: float = 0.0
    stop_reason: str = ""
    """`terminated` (env ended it), `truncated` (turn budget), `token_budget`, `error`."""
    num_turns: int = 0
    """Number of model turns."""
    cut_off: bool = False
    """A model turn ran out of `max_new_tokens` (DAPO's overlong filter drops these)."""
    turn_tokens: list[int] = field(default_factory=list)
    """Tokens the model sampled in each model turn."""
    turn_limits: list[int] = field(default_factory=list)
    """Each model turn's token limit: max_new_tokens, or less where the episode's
    max_total_tokens left less room (DAPO's overlong penalty judges each turn by it)."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in `generate` and in `env` for this episode."""
    error: str | None = None
    """Why the episode failed; failed episodes are excluded from the update."""
    info: dict[str, Any] = field(default_factory=dict)
    """The environment's last info dict (JSON-safe values only)."""

    @property
    def response_len(self) -> int:
        return sum(self.loss_mask)

    def to_record(self, step: int) -> dict[str, Any]:
        """The JSON object written to `rollouts/step-NNNNNN.jsonl` (see docs/run-format.md)."""
        rec = asdict(self)
        rec["step"] = step
        rec["response_len"] = self.response_len
        return rec
