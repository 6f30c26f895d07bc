"""The seam between the loop and its backends (issue 12): the loop talks to clients only,
every algorithm is one table entry, and the losses it can name are pure functions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest
import torch

from trainers.algorithm_table import ALGORITHMS
from trainers.config import AlgorithmName, build_config
from trainers.estimators import ESTIMATORS
from trainers.losses import LOSSES, cispo, importance_sampling

TRAINERS = Path(__file__).parents[2] / "trainers"


@pytest.mark.parametrize("name", ["sync.py", "steps.py", "warmup.py"])
def test_the_loop_has_no_ray_call_and_no_algorithm_branch(name):
    src = (TRAINERS / name).read_text()
    assert ".remote(" not in src and "import ray" not in src
    assert not re.search(r"\bname\s*(==|!=|in)\s*[\"'(\[]", src), "branch on the algorithm's name"


def test_every_algorithm_is_one_table_entry_of_known_parts():
    assert set(ALGORITHMS) == set(get_args(AlgorithmName))
    for entry in ALGORITHMS.values():
        assert entry.estimator in ESTIMATORS and entry.loss in LOSSES
        assert not entry.critic or entry.token_level  # a critic only serves a token estimator


def test_choosing_a_name_applies_its_tables_preset_under_the_users_settings():
    cfg = build_config([{"algorithm": {"name": "dapo"}}], env_name="math")
    assert cfg.algorithm.clip_high == pytest.approx(0.28) and cfg.algorithm.dynamic_sampling
    mine = build_config([{"algorithm": {"name": "dapo", "clip_high": 0.3}}], env_name="math")
    assert mine.algorithm.clip_high == pytest.approx(0.3)


def test_importance_sampling_and_cispo_by_hand():
    logp = torch.tensor([[0.0, -1.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.5]])
    adv = torch.tensor([[2.0, -1.0]])
    mask = torch.ones(1, 2)
    loss, clipped = importance_sampling(logp, old, adv, mask, {})
    # -ratio * A: ratios 1 and e^0.5
    assert loss.tolist()[0] == pytest.approx([-2.0, torch.exp(torch.tensor(0.5)).item()])
    assert clipped.sum() == 0
    loss, clipped = cispo(logp, old, adv, mask, {"clip_low": 0.2, "clip_high": 0.2})
    # the weight is the ratio clipped to [0.8, 1.2] and detached; the gradient is w * A
    assert loss.tolist()[0] == pytest.approx([0.0, 1.2 * -1.0 * 1.0])
    assert clipped.tolist() == [[0.0, 1.0]]
    loss.sum().backward()
    assert logp.grad is not None
    assert logp.grad.tolist()[0] == pytest.approx([-2.0, 1.2])


def test_learners_read_a_frozen_spec_and_serve_reaches_them_through_a_client_only():
    """Issue 32: the learner backends take a `LearnerSpec` (not the run config), its
    defaults are the run config's, and `skyrl serve` neither imports nor builds a learner."""
    import dataclasses

    from trainers.client import LearnerSpec, learner_spec
    from trainers.config import RunConfig

    assert learner_spec(RunConfig()) == LearnerSpec()
    cfg = build_config([{"model": {"name": "tiny"}, "learner": {"lora": {"rank": 4}}}], "math")
    spec = learner_spec(cfg)
    assert (spec.lora_rank, spec.temperature) == (4, cfg.rollout.temperature)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.lora_rank = 8  # type: ignore[misc]
    for name in ("learner.py", "learner_dist.py", "learner_group.py"):
        assert "RunConfig" not in (TRAINERS / name).read_text(), name
    server = Path(__file__).parents[2] / "server"
    for f in server.rglob("*.py"):
        src = f.read_text()
        assert not re.search(r"(from|import)\s+trainers\.learner", src), f
        assert "TorchLearner" not in src and "RunConfig" not in src, f
