"""server/training.py: a Tinker model is a LearnerSpec and a training client, nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.models import resolve_model
from server.training import ModelSpec, TrainModel
from trainers.client import ATTN, MLP


def test_a_tinker_lora_model_is_the_learners_lora_on_the_chosen_layers() -> None:
    spec = ModelSpec("s:train:0", "tiny", 8, train_mlp=False, seed=3).learner(threads=1)
    assert spec.lora_targets == (*ATTN, "lm_head") and spec.lora_rank == 8
    assert (spec.lora_alpha, spec.seed, spec.temperature) == (32, 3, 1.0)
    full = ModelSpec("s:train:1", "tiny", 0).learner(threads=1)
    assert full.lora_rank == 0 and full.lora_targets == (*ATTN, *MLP, "lm_head")


def test_an_old_layout_checkpoint_is_refused_in_one_sentence(tmp_path: Path) -> None:
    model = TrainModel(ModelSpec("s:train:0", "tiny", 4), resolve_model("tiny", quiet=True), 1)
    try:
        old = tmp_path / "ckpt-000001"
        old.mkdir()
        (old / "adapter.safetensors").write_bytes(b"")
        with pytest.raises(ValueError, match="layout of an older skyrl serve"):
            model.load_state(old, with_optimizer=True)
    finally:
        model.close()
