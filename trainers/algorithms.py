"""RL math as small pure functions over tensors.

Shapes are in name suffixes: P problems (tasks) in a step, G samples per problem,
B sequences in a micro-batch, T token positions. Every function here is unit-tested
against a hand computation in tests/trainers/test_algorithms.py.
"""

from __future__ import annotations

import torch


def grpo_advantages(
    rewards_P_G: torch.Tensor, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantage: (r - mean of its group) / (std of its group + eps).

    A group whose rewards are all equal gets zero advantage (it carries no signal). The std
    is the unbiased sample std, as in DeepSeekMath's GRPO; a single-sample group gets 0.
    """
    centred_P_G = rewards_P_G - rewards_P_G.mean(dim=1, keepdim=True)
    if not normalize_std or rewards_P_G.shape[1] < 2:
        return centred_P_G if rewards_P_G.shape[1] >= 2 else torch.zeros_like(rewards_P_G)
    std_P_1 = rewards_P_G.std(dim=1, keepdim=True)
    return centred_P_G / (std_P_1 + eps)


def clipped_policy_loss(
    logp_B_T: torch.Tensor,
    old_logp_B_T: torch.Tensor,
    adv_B_T: torch.Tensor,
    clip_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token: -min(ratio * A, clip(ratio, 1-eps, 1+eps) * A).

    Returns (loss_B_T, clipped_B_T) where clipped marks tokens whose gradient the clip removed.
    """
    ratio_B_T = torch.exp(logp_B_T - old_logp_B_T)
    unclipped = ratio_B_T * adv_B_T
    clipped = torch.clamp(ratio_B_T, 1.0 - clip_eps, 1.0 + clip_eps) * adv_B_T
    loss_B_T = -torch.minimum(unclipped, clipped)
    return loss_B_T, (clipped < unclipped).float()


def kl_k3(logp_B_T: torch.Tensor, ref_logp_B_T: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1 with d = ref - logp."""
    d = ref_logp_B_T - logp_B_T
    return torch.exp(d) - d - 1.0


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def linear_warmup_lr(base_lr: float, step: int, warmup_steps: int) -> float:
    """Learning rate at optimizer step `step` (0-based): linear ramp, then constant."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)
