"""The models Tinker clients train: a `TrainingClient` per model, LoRA or full.

Each model is a `LearnerSpec` (trainers/client.py) built from what the client asked for
and a training client over its own torch learner (its own copy of the base weights), with
its own one-thread executor, so two clients train at once without touching each other's
weights, and one model's calls run in the order they arrived. LoRA (peft, on attention, MLP
and, when the embeddings are not tied, the unembedding; only the adapter trains), its
checkpoints and the merged weights for samplers are the learner's, as in `skyrl train`.
"""

from __future__ import annotations

import json
import math
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.client import (
    ATTN,
    MLP,
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    LearnerSpec,
    local_training_client,
)

LORA_ALPHA = 32
"""LoRA scale numerator: the update is B A * LORA_ALPHA / rank."""


@dataclass
class ModelSpec:
    """What a Tinker client created (a row of the `models` table)."""

    model_id: str
    base_model: str
    lora_rank: int
    """0 = full fine-tuning."""
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True
    seed: int = 0

    def learner(self, threads: int) -> LearnerSpec:
        """The learner this model trains on: sampler temperature 1 (Tinker's log-probs),
        adapters on the layers the client chose."""
        targets = (ATTN if self.train_attn else ()) + (MLP if self.train_mlp else ())
        targets += ("lm_head",) if self.train_unembed else ()
        return LearnerSpec(
            threads=threads,
            seed=self.seed,
            temperature=1.0,
            lora_rank=self.lora_rank,
            lora_alpha=LORA_ALPHA,
            lora_targets=targets,
        )


class TrainModel:
    """One trained model: the training client and the thread its calls run on."""

    def __init__(self, spec: ModelSpec, base_path: Path, threads: int) -> None:
        self.spec = spec
        self.base_path = base_path
        self.client = local_training_client(base_path, spec.learner(threads))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"train-{spec.model_id}")

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        """Run `fn(*args)` on this model's thread, after the calls queued before it."""
        return self._thread.submit(fn, *args)

    # -- the calls (run on the model's thread) ----------------------------------------

    def forward_backward(
        self, data: list[Datum], loss_fn: str, config: dict[str, Any], forward_only: bool
    ) -> ForwardBackwardOutput:
        if forward_only:  # log-probs at every position, as Tinker's forward returns them
            full = [
                Datum(
                    d.model_input,
                    {**d.loss_fn_inputs, "weights": [1.0] * len(d.model_input.tokens)},
                )
                for d in data
            ]
            return self.client.forward(full, "cross_entropy").result()
        return self.client.forward_backward(data, loss_fn, config).result()

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        return self.client.optim_step(adam).result()

    def save_state(self, directory: Path) -> None:
        """The learner's checkpoint (`model/`: the adapter or the full model, and
        `optimizer.pt`) and the model's spec."""
        directory.mkdir(parents=True, exist_ok=True)
        self.client.save_state(directory).result()
        (directory / "spec.json").write_text(json.dumps(self.spec.__dict__))

    def load_state(self, directory: Path, with_optimizer: bool) -> None:
        if (directory / "adapter.safetensors").is_file() and not (directory / "model").is_dir():
            raise ValueError(
                f"checkpoint {directory.name} is in the layout of an older skyrl serve "
                "(adapter.safetensors); load it with that version and save it again"
            )
        self.client.load_state(directory, optimizer=with_optimizer).result()

    def save_for_sampler(self, directory: Path) -> None:
        """An HF model folder of the merged weights, complete or absent (temp, then rename)."""
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.client.save_weights_for_sampler(tmp).result()
        shutil.rmtree(directory, ignore_errors=True)
        tmp.rename(directory)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


def adam_params(raw: dict[str, Any]) -> AdamParams:
    """Tinker's AdamParams (grad_clip_norm 0 = no clipping) as the learner's."""
    clip = float(raw.get("grad_clip_norm", 0.0) or 0.0)
    return AdamParams(
        learning_rate=float(raw.get("learning_rate", 1e-4)),
        beta1=float(raw.get("beta1", 0.9)),
        beta2=float(raw.get("beta2", 0.95)),
        eps=float(raw.get("eps", 1e-12)),
        weight_decay=float(raw.get("weight_decay", 0.0)),
        grad_clip_norm=clip if clip > 0 else math.inf,
    )
