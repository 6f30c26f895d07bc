"""Advantage estimators, computed in the loop (client side, as in Tinker), by table name.

Each takes the step's `AdvantageInputs` and returns per-token advantages for every trained
episode (at its loss positions) and, for estimators that train a critic, the returns.
The math is in trainers/algorithms.py; these adapt it to the step's shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainers.algorithms import (
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    rloo_advantages,
)
from trainers.config import AlgorithmConfig


@dataclass
class AdvantageInputs:
    """What a step knows when it computes advantages. K kept groups of G episodes; the
    trained episodes are a subset (failed or filtered ones keep their place in a group's
    baseline but carry no loss)."""

    rewards_K_G: torch.Tensor
    """Shaped rewards of the kept groups."""
    trained: list[tuple[int, int]]
    """(group, sample) of each trained episode, in data order."""
    lengths: list[int]
    """Loss tokens of each trained episode."""
    kl: list[torch.Tensor] | None
    """Per-token KL(policy || reference) of each trained episode, when the KL is in the reward."""
    values: list[torch.Tensor] | None
    """The critic's values at each trained episode's loss positions."""
    kl_coef: float
    a: AlgorithmConfig


Advantages = tuple[list[torch.Tensor], list[torch.Tensor] | None]


def _per_sequence(x: AdvantageInputs, adv_K_G: torch.Tensor) -> Advantages:
    """One advantage per episode, on each of its tokens."""
    return [
        torch.full((n,), float(adv_K_G[k, g]))
        for (k, g), n in zip(x.trained, x.lengths, strict=True)
    ], None


def grpo(x: AdvantageInputs) -> Advantages:
    return _per_sequence(x, grpo_advantages(x.rewards_K_G, x.a.normalize_std))


def dr_grpo(x: AdvantageInputs) -> Advantages:
    return _per_sequence(x, dr_grpo_advantages(x.rewards_K_G))


def rloo(x: AdvantageInputs) -> Advantages:
    return _per_sequence(x, rloo_advantages(x.rewards_K_G))


def rows(xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-aligned rows of 1-D tensors: (x_B_T, mask_B_T); keeps gradients (the learner uses it)."""
    width = max([len(v) for v in xs] + [1])
    x_B_T = torch.stack([torch.nn.functional.pad(v, (0, width - len(v))) for v in xs])
    mask_B_T = torch.zeros_like(x_B_T, dtype=torch.bool)
    for b, v in enumerate(xs):
        mask_B_T[b, : len(v)] = True
    return x_B_T, mask_B_T


def _unrows(x_B_T: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    return [x_B_T[b, :n] for b, n in enumerate(lengths)]


def _token_kl(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(rewards_B, kl_B_T, mask_B_T, beta): the KL is zero unless it goes into the reward."""
    rewards_B = torch.stack([x.rewards_K_G[k, g] for k, g in x.trained])
    kl = x.kl if x.kl is not None else [torch.zeros(n) for n in x.lengths]
    kl_B_T, mask_B_T = rows(kl)
    return rewards_B, kl_B_T, mask_B_T, x.kl_coef if x.a.kl_in_reward else 0.0


def reinforce_pp(x: AdvantageInputs) -> Advantages:
    rewards_B, kl_B_T, mask_B_T, beta = _token_kl(x)
    return _unrows(reinforce_pp_advantages(rewards_B, kl_B_T, mask_B_T, beta), x.lengths), None


def gae(x: AdvantageInputs) -> Advantages:
    """PPO: the episode reward on the last model token, the KL penalty on every token; GAE
    over the critic's values, advantages whitened over the step."""
    rewards_B, kl_B_T, mask_B_T, beta = _token_kl(x)
    token_rewards_B_T = -beta * kl_B_T
    for b, n in enumerate(x.lengths):
        if n:
            token_rewards_B_T[b, n - 1] += rewards_B[b]
    assert x.values is not None, "gae needs the critic's values"
    values_B_T, _ = rows(x.values)
    adv_B_T, returns_B_T = gae_advantages(
        token_rewards_B_T, values_B_T, mask_B_T, x.a.gamma, x.a.lam
    )
    adv_B_T = masked_whiten(adv_B_T, mask_B_T)
    return _unrows(adv_B_T, x.lengths), _unrows(returns_B_T, x.lengths)


ESTIMATORS: dict[str, Callable[[AdvantageInputs], Advantages]] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "gae": gae,
}
