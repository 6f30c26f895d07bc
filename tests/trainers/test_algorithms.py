"""GRPO math against hand computations (the arithmetic is in the comments)."""

import math

import pytest
import torch

from trainers.algorithms import (
    clipped_policy_loss,
    grpo_advantages,
    kl_k3,
    linear_warmup_lr,
    masked_mean,
)


def test_grpo_advantages_by_hand():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735
    # -> (+0.5 / 0.57735, -0.5 / 0.57735, ...) = +-0.866025
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), eps=0.0)
    assert adv.tolist()[0] == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)


def test_grpo_without_std_is_centred_reward():
    # group [2, 0, 1]: mean 1 -> [1, -1, 0]
    adv = grpo_advantages(torch.tensor([[2.0, 0.0, 1.0]]), normalize_std=False)
    assert adv.tolist()[0] == pytest.approx([1.0, -1.0, 0.0])


def test_identical_rewards_and_single_sample_groups_carry_no_signal():
    assert grpo_advantages(torch.tensor([[0.3, 0.3, 0.3]])).abs().max() == 0
    assert grpo_advantages(torch.tensor([[1.0], [0.0]])).abs().max() == 0


def test_groups_are_independent():
    # row 2 = row 1 + 10: same advantages
    a = grpo_advantages(torch.tensor([[1.0, 0.0], [11.0, 10.0]]))
    assert torch.allclose(a[0], a[1])


def test_clipped_loss_by_hand():
    # token 1: ratio e^0.5 = 1.6487, A = +1 -> min(1.6487, 1.2) = 1.2 -> loss -1.2, clipped
    # token 2: ratio e^-0.5 = 0.6065, A = +1 -> min(0.6065, 0.8) = 0.6065 -> loss -0.6065, not clipped
    # token 3: ratio e^-0.5 = 0.6065, A = -1 -> min(-0.6065, -0.8) = -0.8 -> loss 0.8, clipped
    logp = torch.tensor([0.5, -0.5, -0.5])
    old = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, clipped = clipped_policy_loss(logp, old, adv, clip_eps=0.2)
    assert loss.tolist() == pytest.approx([-1.2, -math.exp(-0.5), 0.8], abs=1e-5)
    assert clipped.tolist() == [1.0, 0.0, 1.0]


def test_on_policy_gradient_is_advantage_weighted_score():
    # at ratio 1 the gradient of -ratio*A w.r.t. logp is -A
    logp = torch.zeros(2, requires_grad=True)
    loss, _ = clipped_policy_loss(logp, logp.detach(), torch.tensor([2.0, -3.0]), 0.2)
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-2.0, 3.0])


def test_k3_by_hand():
    # d = ref - logp = -1 - 0 = -1: e^-1 - (-1) - 1 = 0.367879
    assert kl_k3(torch.tensor([0.0]), torch.tensor([-1.0])).item() == pytest.approx(
        0.367879, abs=1e-6
    )
    assert kl_k3(torch.tensor([0.3]), torch.tensor([0.3])).item() == 0.0


def test_masked_mean_ignores_padding_and_empty_masks():
    assert masked_mean(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1.0, 1.0, 0.0])).item() == 2.0
    assert masked_mean(torch.tensor([5.0]), torch.tensor([0.0])).item() == 0.0


def test_warmup():
    assert [linear_warmup_lr(1.0, s, 4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert linear_warmup_lr(0.1, 0, 0) == 0.1
