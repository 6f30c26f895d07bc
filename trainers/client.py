"""The training client: the loop's only way to train (Tinker's `TrainingClient` shape).

    out = training_client.forward_backward(data, "ppo", {"clip_low": 0.2, ...}).result()
    training_client.optim_step(AdamParams(learning_rate=1e-5)).result()
    sampler = training_client.save_weights_and_get_sampling_client(version)

A `Datum` is Tinker's: the model's input tokens and, per target position, `loss_fn_inputs`
(`target_tokens`, `weights` = the loss mask, `advantages`, `logprobs`). Gradients accumulate
over `forward_backward` calls until `optim_step`. The backend behind the client implements
`Learner` (the torch learner in `trainers/learner.py`; FSDP2 or DeepSpeed groups in
`trainers/learner_dist.py`), is built from a `LearnerSpec` (never the whole run config),
and lives in this process (`Local`) or on Ray actors (`trainers/placement.py`); every call
returns a future, so an async schedule can overlap training with sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agents.sampling import APIFuture, Handle, Local, SamplingClient

if TYPE_CHECKING:
    from trainers.config import RunConfig

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LearnerSpec:
    """All a learner backend (torch, fsdp, deepspeed) reads: built once from the run config
    (`learner_spec`) or by `skyrl serve` for a Tinker model, and sent to the learner's
    process in place of the whole config. The defaults are the run config's."""

    dtype: str = "float32"
    """Compute dtype (`model.dtype`): autocast for the passes; trained weights stay fp32."""
    threads: int = 0
    """torch threads in the learner's process (`trainer.threads`); 0 = torch's default."""
    seed: int = 0
    """torch's seed before the model is built and before LoRA adapters are initialised."""
    temperature: float = 1.0
    """The sampler's temperature (`rollout.temperature`): policy log-probs use the same."""
    micro_batch_size: int = 4
    """Sequences per forward pass (`algorithm.micro_batch_size`)."""
    mini_batch_size: int = 0
    """Sequences per optimizer step (`algorithm.mini_batch_size`); 0 = all of a call. A
    pass never holds more than this."""
    lr: float = 1e-5
    """The optimizer's learning rate until the first `optim_step` sets its own."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's betas until the first `optim_step` sets its own."""
    weight_decay: float = 0.0
    """AdamW's weight decay until the first `optim_step` sets its own."""
    grad_clip: float = 1.0
    """DeepSpeed's gradient clip (its engine clips; the others take it from `optim_step`)."""
    strategy: str = "torch"
    """`torch`, `fsdp` or `deepspeed` (`learner.strategy`)."""
    num_workers: int = 1
    """Learner processes in one torch.distributed group (`learner.num_workers`)."""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage (`learner.zero_stage`)."""
    lora_rank: int = 0
    """LoRA adapter rank; 0 = full fine-tuning."""
    lora_alpha: int = 32
    """LoRA scale numerator: the update is B A * alpha / rank."""
    lora_targets: tuple[str, ...] = ATTN + MLP
    """Layers that get adapters (those the model has); `lm_head` unties tied embeddings so
    the unembedding trains on its own."""
    lora_modules_to_save: tuple[str, ...] = ()
    """Small layers trained whole and saved with the adapter (peft's `modules_to_save`)."""


def learner_spec(cfg: RunConfig) -> LearnerSpec:
    """The learner's part of a run config."""
    lora = cfg.learner.lora
    return LearnerSpec(
        dtype=cfg.model.dtype,
        threads=cfg.trainer.threads,
        seed=cfg.trainer.seed,
        temperature=cfg.rollout.temperature,
        micro_batch_size=cfg.algorithm.micro_batch_size,
        mini_batch_size=cfg.algorithm.mini_batch_size,
        lr=cfg.optim.lr,
        betas=cfg.optim.betas,
        weight_decay=cfg.optim.weight_decay,
        grad_clip=cfg.optim.grad_clip,
        strategy=cfg.learner.strategy,
        num_workers=cfg.learner.num_workers,
        zero_stage=cfg.learner.zero_stage,
        lora_rank=lora.rank,
        lora_alpha=lora.alpha,
        lora_targets=tuple(lora.target_modules),
        lora_modules_to_save=tuple(lora.modules_to_save),
    )


@dataclass
class ModelInput:
    """The tokens the model reads: a datum's sequence without its last token."""

    tokens: list[int]
    prompt_len: int = 0
    """Leading tokens that are the prompt; a group's samples share them, and a backend may
    run that prefix once per group (a hint: it never changes a number)."""


@dataclass
class Datum:
    """One training sequence. Every `loss_fn_inputs` list has one entry per target position
    (len(model_input.tokens)); position t predicts `target_tokens[t]`.

    Keys: `target_tokens`; `weights` (1 where the token carries loss); `advantages`;
    `logprobs` (the policy the data is measured against: the ratio's denominator; absent =
    on-policy, ratio 1); `sampler_logprobs` (the engine's, for truncated importance
    sampling); `ref_logprobs` (a reference model's, for the KL term); `returns` and `values`
    (the `value` loss).
    """

    model_input: ModelInput
    loss_fn_inputs: dict[str, list[float]] = field(default_factory=dict)

    @staticmethod
    def from_sequence(
        tokens: list[int], loss_mask: list[int], prompt_len: int = 0, **per_token: list[float]
    ) -> Datum:
        """A datum from a whole sequence and per-token lists aligned with it (entry t belongs
        to token t; the first token is never predicted, so its entry is dropped)."""
        inputs = {k: list(v[1:]) for k, v in per_token.items()}
        inputs["target_tokens"] = [float(t) for t in tokens[1:]]
        inputs["weights"] = [float(m) for m in loss_mask[1:]]
        return Datum(ModelInput(list(tokens[:-1]), prompt_len), inputs)

    @property
    def tokens(self) -> list[int]:
        """The whole sequence: the input plus the last target."""
        return [*self.model_input.tokens, int(self.loss_fn_inputs["target_tokens"][-1])]

    @property
    def n_loss(self) -> int:
        """Positions that carry loss."""
        return sum(1 for w in self.loss_fn_inputs["weights"] if w)

    def at_loss(self, key: str) -> list[float]:
        """`loss_fn_inputs[key]` at the positions that carry loss, in order."""
        w = self.loss_fn_inputs["weights"]
        return [x for x, m in zip(self.loss_fn_inputs[key], w, strict=True) if m]


@dataclass
class AdamParams:
    """One optimizer step's hyper-parameters (Tinker's, plus the gradient clip)."""

    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float = 1.0
    """Clip the global gradient norm to this; a non-finite norm skips the step."""


@dataclass
class ForwardBackwardOutput:
    loss_fn_outputs: list[dict[str, list[float]]]
    """Per datum, at its loss positions: `logprobs` (policy losses) or `values` (`value`)."""
    metrics: dict[str, float]
    """Sums over the call's loss tokens (`name:sum`) and counts; the caller divides."""


class Learner(Protocol):
    """A training backend: a model, its optimizer, and state IO. One module per backend."""

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: dict[str, Any] | None
    ) -> ForwardBackwardOutput: ...

    def forward(self, data: list[Datum], loss_fn: str) -> ForwardBackwardOutput: ...

    def optim_step(self, adam_params: AdamParams) -> dict[str, float]: ...

    def reset_optimizer(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def save_weights(self, path: str) -> None: ...

    def save_state(self, path: str) -> None: ...

    def load_state(self, path: str, optimizer: bool = True) -> None: ...


def micro_batches(prompt_keys: list[Any], size: int) -> list[list[int]]:
    """Indices of runs of consecutive data that share a prompt (equal keys), cut to `size`:
    the learner's forward passes. Shared with the loop so its optimizer steps (whole runs)
    and the learner's passes line up."""
    out: list[list[int]] = []
    for i, key in enumerate(prompt_keys):
        if out and prompt_keys[out[-1][0]] == key and len(out[-1]) < size:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def mini_batches(micro: list[list[int]], size: int) -> list[list[int]]:
    """Consecutive micro-batches joined into optimizer steps of <= `size` data (0 = one
    step for everything)."""
    out: list[list[list[int]]] = []
    for mb in micro:
        if out and (not size or sum(map(len, out[-1])) + len(mb) <= size):
            out[-1].append(mb)
        else:
            out.append([mb])
    return [[i for mb in mini for i in mb] for mini in out]


class TrainingClient:
    """Trains one model on a learner backend; pushes its weights to its sampler."""

    def __init__(self, learner: Handle, sampler: SamplingClient | None = None) -> None:
        self.learner = learner
        self._sampler = sampler

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: dict[str, Any] | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """Loss and gradients (accumulated until `optim_step`). Losses: `cross_entropy`,
        `importance_sampling`, `ppo`, `gspo`, `cispo` (trainers/losses.py) and `value`."""
        return self.learner.call("forward_backward", data, loss_fn, loss_fn_config)

    def forward(
        self, data: list[Datum], loss_fn: str = "cross_entropy"
    ) -> APIFuture[ForwardBackwardOutput]:
        """The loss function's outputs (log-probs, or values) with no gradient."""
        return self.learner.call("forward", data, loss_fn)

    def optim_step(self, adam_params: AdamParams) -> APIFuture[dict[str, float]]:
        """Clip, step and zero the accumulated gradients; returns `grad_norm`."""
        return self.learner.call("optim_step", adam_params)

    def reset_optimizer(self) -> APIFuture[None]:
        """Forget the optimizer's moments (RL starts fresh after a supervised warm-up)."""
        return self.learner.call("reset_optimizer")

    def save_state(self, path: str | Path) -> APIFuture[None]:
        """Weights and optimizer state into the folder `path` (a checkpoint)."""
        return self.learner.call("save_state", str(Path(path).resolve()))

    def load_state(self, path: str | Path, optimizer: bool = True) -> APIFuture[None]:
        """Restore what `save_state` wrote; `optimizer=False` loads the weights only and
        starts the optimizer afresh."""
        where = str(Path(path).resolve())
        if optimizer:
            return self.learner.call("load_state", where)
        return self.learner.call("load_state", where, False)

    def save_weights_for_sampler(self, path: str | Path) -> APIFuture[None]:
        """The weights as an HF model folder a sampler can load (`SamplingClient.load_path`)."""
        return self.learner.call("save_weights", str(Path(path).resolve()))

    def save_weights_and_get_sampling_client(self, version: int) -> SamplingClient:
        """Push the current weights to this client's sampler, stamped `version`."""
        sampler = self.sampling_client()
        sampler.load_weights(self.learner.call("state_dict"), version).result()
        return sampler

    def sampling_client(self) -> SamplingClient:
        """The sampler that serves this client's weights (as last pushed)."""
        if self._sampler is None:
            raise ValueError("this training client has no sampler (a critic samples nothing)")
        return self._sampler


def local_training_client(model_path: str | Path, spec: LearnerSpec) -> TrainingClient:
    """A training client over a torch learner in this process (what `skyrl serve` trains)."""
    from trainers.learner import TorchLearner

    return TrainingClient(Local(TorchLearner(model_path, spec)))
