"""RL math as small pure functions over tensors.

Shapes are in name suffixes: P problems (tasks) in a step, G samples per problem,
B sequences in a micro-batch, T token positions. Every function here is unit-tested
against a hand computation in tests/trainers/test_algorithms.py.
"""

from __future__ import annotations

import math
from typing import get_args

import torch

from trainers.config import LossAgg


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
    return ppo_clip_loss(logp_B_T, old_logp_B_T, adv_B_T, clip_eps, clip_eps)


def kl_k3(logp_B_T: torch.Tensor, ref_logp_B_T: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1 with d = ref - logp."""
    d = ref_logp_B_T - logp_B_T
    return torch.exp(d) - d - 1.0


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of x over positions where mask is 1."""
    return (x * mask).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over positions where mask is 1; 0 when the mask is empty."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def linear_warmup_lr(base_lr: float, step: int, warmup_steps: int) -> float:
    """Learning rate at optimizer step `step` (0-based): linear ramp, then constant."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def scheduled_lr(
    base_lr: float,
    step: int,
    warmup_steps: int,
    total_steps: int,
    schedule: str = "constant",
    min_ratio: float = 0.0,
) -> float:
    """Learning rate at optimizer step `step` (0-based): linear warm-up, then `schedule`.

    After warm-up, progress p = (step - warmup) / (total - warmup) runs from 0 to 1 and
    lr = base * (min_ratio + (1 - min_ratio) * f(p)) with f = 1 (constant), 1 - p (linear)
    or (1 + cos(pi p)) / 2 (cosine).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return linear_warmup_lr(base_lr, step, warmup_steps)
    if schedule == "constant":
        return base_lr
    p = min(1.0, max(0.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)))
    f = 1.0 - p if schedule == "linear" else (1.0 + math.cos(math.pi * p)) / 2.0
    return base_lr * (min_ratio + (1.0 - min_ratio) * f)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / (std + eps) over positions where mask is 1 (population std); 0 elsewhere."""
    m = mask.to(x.dtype)
    mean = masked_mean(x, m)
    std = masked_mean((x - mean) ** 2, m).sqrt()
    return (x - mean) / (std + eps) * m


# --- advantage estimators --------------------------------------------------------------------


def dr_grpo_advantages(rewards_P_G: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO advantage: r_i - mean_j r_j within the group, with no std division.

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective": dividing by
    the group std over-weights near-unanimous groups (a difficulty bias), so it is dropped.
    A single-sample group is its own mean and gets 0.
    """
    return rewards_P_G - rewards_P_G.mean(dim=1, keepdim=True)


def rloo_advantages(rewards_P_G: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out: A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j.

    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for
    Learning from Human Feedback in LLMs". Equal to G / (G - 1) * (r_i - mean). G = 1 has no
    other sample to form a baseline from, so it gets 0.
    """
    g = rewards_P_G.shape[1]
    if g < 2:
        return torch.zeros_like(rewards_P_G)
    others_mean_P_G = (rewards_P_G.sum(dim=1, keepdim=True) - rewards_P_G) / (g - 1)
    return rewards_P_G - others_mean_P_G


def reinforce_pp_advantages(
    rewards_B: torch.Tensor,
    token_kl_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    kl_coef: float,
    eps: float = 1e-8,
) -> torch.Tensor:
    """REINFORCE++ token advantage (Hu 2025, "REINFORCE++: A Simple and Efficient Approach
    for Aligning Large Language Models").

    Per-token reward r_t = -kl_coef * kl_t on valid tokens, plus the sequence reward on the
    last valid token; the return (gamma = 1) is G_t = R - kl_coef * sum_{s >= t, mask_s = 1} kl_s.
    Returns are then whitened over every valid token of the batch: (G - mean) / (std + eps),
    with the population std. Masked positions (padding, environment tokens) get 0 and their
    KL is ignored.
    """
    mask = mask_B_T.to(token_kl_B_T.dtype)
    kl_B_T = token_kl_B_T * mask
    # sum over s >= t: reverse cumulative sum
    kl_to_go_B_T = kl_B_T.flip(-1).cumsum(-1).flip(-1)
    returns_B_T = rewards_B.unsqueeze(-1) - kl_coef * kl_to_go_B_T
    n = mask.sum().clamp(min=1.0)
    mean = (returns_B_T * mask).sum() / n
    var = (((returns_B_T - mean) * mask) ** 2).sum() / n
    return (returns_B_T - mean) / (var.sqrt() + eps) * mask


@torch.no_grad()
def gae_advantages(
    rewards_B_T: torch.Tensor,
    values_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, "High-Dimensional Continuous
    Control Using Generalized Advantage Estimation").

    delta_t = r_t + gamma * V_{t+1} - V_t,   A_t = delta_t + gamma * lam * A_{t+1},   R_t = A_t + V_t.

    Only mask == 1 positions are time steps: the recursion runs over the compacted sequence of
    valid tokens, so "t+1" is the next *valid* token, skipping environment tokens inside a
    multi-turn response and trailing padding. After the last valid token V = 0 and A = 0.
    Rewards at masked positions are ignored (put the terminal reward on the last valid
    token). Masked positions get advantage 0 and return 0. Both outputs are detached.
    """
    mask = mask_B_T.bool()
    b, t_len = rewards_B_T.shape
    next_value_B = rewards_B_T.new_zeros(b)
    next_adv_B = rewards_B_T.new_zeros(b)
    adv_B_T = torch.zeros_like(rewards_B_T)
    for t in reversed(range(t_len)):
        m_B = mask[:, t]
        delta_B = rewards_B_T[:, t] + gamma * next_value_B - values_B_T[:, t]
        a_B = delta_B + gamma * lam * next_adv_B
        adv_B_T[:, t] = torch.where(m_B, a_B, 0.0)
        # a masked position passes the carried state through unchanged
        next_value_B = torch.where(m_B, values_B_T[:, t], next_value_B)
        next_adv_B = torch.where(m_B, a_B, next_adv_B)
    returns_B_T = torch.where(mask, adv_B_T + values_B_T, 0.0)
    return adv_B_T, returns_B_T


def value_loss(
    values_B_T: torch.Tensor,
    old_values_B_T: torch.Tensor,
    returns_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss, token-mean over valid tokens (Schulman et al. 2017, PPO;
    the value clip as in OpenAI baselines' ppo2):

    V_clip = V_old + clip(V - V_old, -clip, +clip)
    loss_t = 0.5 * max((V - R)^2, (V_clip - R)^2)

    Returns (loss, clip_fraction): scalars, the fraction being the share of valid tokens where
    the clipped error was the larger one (so the clip removed the gradient).
    """
    v_clipped = old_values_B_T + torch.clamp(values_B_T - old_values_B_T, -clip, clip)
    err_unclipped = (values_B_T - returns_B_T) ** 2
    err_clipped = (v_clipped - returns_B_T) ** 2
    loss_B_T = 0.5 * torch.maximum(err_unclipped, err_clipped)
    mask = mask_B_T.to(loss_B_T.dtype)
    return masked_mean(loss_B_T, mask), masked_mean((err_clipped > err_unclipped).float(), mask)


@torch.no_grad()
def explained_variance(
    values_B_T: torch.Tensor, returns_B_T: torch.Tensor, mask_B_T: torch.Tensor
) -> torch.Tensor:
    """1 - Var[R - V] / Var[R] over valid tokens (population variances): 1 is a perfect
    critic, 0 no better than a constant, negative worse. NaN when Var[R] = 0 (undefined).
    """
    mask = mask_B_T.to(values_B_T.dtype)

    def var(x: torch.Tensor) -> torch.Tensor:
        mean = masked_mean(x, mask)
        return masked_mean((x - mean) ** 2, mask)

    var_r = var(returns_B_T)
    if var_r.item() == 0.0:
        return torch.tensor(float("nan"))
    return 1.0 - var(returns_B_T - values_B_T) / var_r


# --- policy losses ---------------------------------------------------------------------------


def ppo_clip_loss(
    logp_B_T: torch.Tensor,
    old_logp_B_T: torch.Tensor,
    adv_B_T: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with asymmetric bounds and optional dual clip, per token.

    ratio = exp(logp - old_logp)
    loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)
    clip_high > clip_low is DAPO's clip-higher (Yu et al. 2025, "DAPO: An Open-Source LLM
    Reinforcement Learning System at Scale"). Dual clip (Ye et al. 2020, "Mastering Complex
    Control in MOBA Games with Deep Reinforcement Learning"), c = dual_clip > 1: for A < 0,
    loss = min(loss, -c * A), so a huge ratio on a bad token cannot blow the loss up.

    Returns (loss_B_T, clipped_B_T); clipped marks tokens whose gradient either clip removed.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    ratio_B_T = torch.exp(logp_B_T - old_logp_B_T)
    unclipped = ratio_B_T * adv_B_T
    clipped = torch.clamp(ratio_B_T, 1.0 - clip_low, 1.0 + clip_high) * adv_B_T
    loss_B_T = -torch.minimum(unclipped, clipped)
    clipped_B_T = clipped < unclipped
    if dual_clip is not None:
        bound_B_T = -dual_clip * adv_B_T
        dual_B_T = (adv_B_T < 0) & (bound_B_T < loss_B_T)
        loss_B_T = torch.where(dual_B_T, bound_B_T, loss_B_T)
        clipped_B_T = clipped_B_T | dual_B_T
    return loss_B_T, clipped_B_T.float()


def gspo_loss(
    logp_B_T: torch.Tensor,
    old_logp_B_T: torch.Tensor,
    adv_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO: sequence-level importance ratio, clipped per sequence (Zheng et al. 2025, "Group
    Sequence Policy Optimization").

    s_i = exp((1 / |y_i|) * sum_{t valid} (logp_t - old_logp_t))
    s_i,t = sg[s_i] * pi_t / sg[pi_t]          (the paper's GSPO-token form)
    loss_i,t = -min(s_i,t * A_i,t, clip(s_i,t, 1 - clip_low, 1 + clip_high) * A_i,t)

    s_i,t has the value of s_i and a per-token gradient of s_i * d logp_t; with the same
    advantage on every token of a sequence (as GSPO uses) this equals GSPO's sequence loss.
    Aggregate with "seq-mean-token-mean" for the paper's objective. The paper's clip ranges
    are tiny (3e-4 / 4e-4) because the ratio is a per-token geometric mean.
    Returns (loss_B_T, clipped_B_T).
    """
    mask = mask_B_T.to(logp_B_T.dtype)
    log_ratio_B_T = (logp_B_T - old_logp_B_T) * mask
    seq_log_ratio_B = log_ratio_B_T.sum(-1) / mask.sum(-1).clamp(min=1.0)
    log_s_B_T = seq_log_ratio_B.detach().unsqueeze(-1) + logp_B_T - logp_B_T.detach()
    s_B_T = torch.exp(log_s_B_T)
    unclipped = s_B_T * adv_B_T
    clipped = torch.clamp(s_B_T, 1.0 - clip_low, 1.0 + clip_high) * adv_B_T
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).float()


@torch.no_grad()
def tis_weights(
    learner_old_logp_B_T: torch.Tensor, behaviour_logp_B_T: torch.Tensor, cap: float
) -> torch.Tensor:
    """Truncated importance sampling weight per token: min(exp(old - behaviour), cap), detached.

    Corrects for the sampler (e.g. vLLM) scoring tokens differently from the learner: the
    per-token policy loss is multiplied by it. Truncation as in IMPALA's V-trace (Espeholt et
    al. 2018); applied to the sampler/learner mismatch by Yao et al. 2025, "Your Efficient RL
    Framework Secretly Brings You Off-Policy RL Training".
    """
    return torch.exp(learner_old_logp_B_T - behaviour_logp_B_T).clamp(max=cap)


# --- KL --------------------------------------------------------------------------------------


def kl_k1(logp_B_T: torch.Tensor, ref_logp_B_T: torch.Tensor) -> torch.Tensor:
    """Schulman's k1 estimator of KL(pi || ref) per token: logp - ref_logp (unbiased, high
    variance, can be negative). From "Approximating KL Divergence" (Schulman 2020, blog note).
    """
    return logp_B_T - ref_logp_B_T


def kl_k2(logp_B_T: torch.Tensor, ref_logp_B_T: torch.Tensor) -> torch.Tensor:
    """Schulman's k2 estimator of KL(pi || ref) per token: 0.5 * (logp - ref_logp)^2 (biased,
    low variance, >= 0). From "Approximating KL Divergence" (Schulman 2020).
    """
    return 0.5 * (logp_B_T - ref_logp_B_T) ** 2


class FixedKLController:
    """A constant KL coefficient with the same shape as AdaptiveKLController."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef
        """The coefficient to multiply the KL penalty by."""

    def update(self, current_kl: float, n_steps: int) -> None:
        """Does nothing: the coefficient is fixed."""


class AdaptiveKLController:
    """Proportional controller driving the measured KL towards a target (Ziegler et al. 2019,
    "Fine-Tuning Language Models from Human Preferences"):

    e = clip(KL / target - 1, -0.2, 0.2),   beta <- beta * (1 + e * n_steps / horizon)
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        self.value = init_kl_coef
        """The coefficient to multiply the KL penalty by."""
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move `value` after `n_steps` samples whose mean KL was `current_kl`."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


# --- entropy, aggregation ----------------------------------------------------------------------


def entropy_from_logits(logits_N_V: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per row: H = -sum_v p_v log p_v (tokens with p = 0, e.g. a
    -inf logit, contribute 0). Returns entropy_N.
    """
    return entropy_from_logp(torch.log_softmax(logits_N_V.float(), dim=-1))


def entropy_from_logp(logp_N_V: torch.Tensor) -> torch.Tensor:
    """`entropy_from_logits` from log-probabilities already computed (no second softmax)."""
    p_N_V = logp_N_V.exp()
    return -(p_N_V * torch.where(p_N_V > 0, logp_N_V, 0.0)).sum(-1)


LOSS_AGG_MODES: tuple[str, ...] = get_args(LossAgg)


def aggregate_loss(
    loss_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    mode: LossAgg,
    constant: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar over valid (mask == 1) tokens.

    token-mean:               sum_{i,t} m l / sum_{i,t} m                 (DAPO; TRL "bnpo"/"dapo")
    seq-mean-token-mean:      (1/B) sum_i [sum_t m l / max(1, sum_t m)]   (GSPO; TRL "grpo")
    seq-mean-token-sum-norm:  sum_{i,t} m l / (B * constant)              (Dr. GRPO; TRL "dr_grpo")

    An all-masked sequence contributes 0 (and still counts in B); an all-masked batch gives 0.
    Dr. GRPO's constant should be the generation budget (max response tokens); when not
    given it falls back to the longest valid length in this batch.
    """
    mask = mask_B_T.to(loss_B_T.dtype)
    total = (loss_B_T * mask).sum()
    if mode == "token-mean":
        return total / mask.sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        per_seq_B = (loss_B_T * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq_B.mean()
    if mode == "seq-mean-token-sum-norm":
        norm = constant if constant is not None else mask.sum(-1).max().clamp(min=1.0).item()
        return total / (loss_B_T.shape[0] * norm)
    raise ValueError(f"unknown loss aggregation {mode!r}; known: {', '.join(LOSS_AGG_MODES)}")


def aggregation_weights(
    lengths_B: torch.Tensor, mode: LossAgg, constant: float | None = None
) -> torch.Tensor:
    """Per-sequence weight w_i with aggregate_loss(l, m, mode) = sum_i w_i * sum_t m l.

    The learner accumulates gradients micro-batch by micro-batch; weighting each token by
    its sequence's w_i gives exactly the mini-batch's aggregate. lengths_B = valid tokens
    per sequence. token-mean: 1 / sum_j n_j; seq-mean-token-mean: 1 / (B * max(1, n_i));
    seq-mean-token-sum-norm: 1 / (B * constant), constant defaulting to max(1, max_j n_j).
    """
    n_B = lengths_B.float()
    b = n_B.shape[0]
    if mode == "token-mean":
        return torch.full_like(n_B, 1.0 / max(1.0, n_B.sum().item()))
    if mode == "seq-mean-token-mean":
        return 1.0 / (b * n_B.clamp(min=1.0))
    if mode == "seq-mean-token-sum-norm":
        norm = constant if constant is not None else max(1.0, n_B.max().item() if b else 1.0)
        return torch.full_like(n_B, 1.0 / (b * norm))
    raise ValueError(f"unknown loss aggregation {mode!r}; known: {', '.join(LOSS_AGG_MODES)}")


# --- DAPO extras -----------------------------------------------------------------------------


def dynamic_sampling_keep(rewards_P_G: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic sampling (Yu et al. 2025): keep_P is False for a group whose rewards are all
    equal (all right or all wrong), since its group-relative advantages are all 0.
    """
    return rewards_P_G.amax(dim=1) != rewards_P_G.amin(dim=1)


def overlong_penalty(
    lengths_B: torch.Tensor, max_len: int, cache_len: int, penalty: float = 1.0
) -> torch.Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025), a reward added per sequence:

    0                                         if L <= max_len - cache_len
    -penalty * (L - (max_len - cache_len)) / cache_len   if max_len - cache_len < L <= max_len
    -penalty                                  if L > max_len
    """
    if not 0 <= cache_len <= max_len:
        raise ValueError(f"need 0 <= cache_len <= max_len, got {cache_len=} {max_len=}")
    lengths = lengths_B.float()
    if cache_len == 0:
        return torch.where(lengths > max_len, -penalty, 0.0)
    excess_B = (lengths - (max_len - cache_len)).clamp(min=0.0, max=float(cache_len))
    return -penalty * excess_B / cache_len


def turn_overlong_penalty(
    lengths_K: torch.Tensor, limits_K: torch.Tensor, buffer: int, penalty: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong penalty for a multi-turn episode of K model turns: each turn is
    judged by `overlong_penalty` against the limit that bounded it (limit_k: max_new_tokens,
    or the room the episode's token budget left), with cache_len = min(buffer, limit_k).
    The episode gets its worst turn's penalty (0 when it has no turns): a turn cut off at its
    own limit costs the full penalty, however short the other turns were.
    """
    per_turn = [
        overlong_penalty(n.reshape(1), int(m), min(buffer, int(m)), penalty)[0]
        for n, m in zip(lengths_K, limits_K, strict=True)
    ]
    return torch.stack(per_turn).min() if per_turn else torch.tensor(0.0)


def overlong_filter_mask(truncated_B: torch.Tensor) -> torch.Tensor:
    """DAPO overlong filtering (Yu et al. 2025): a float keep-mask, 0 for sequences cut off by
    the length budget, so they carry no loss. Multiply into the token mask: mask_B_T * keep_B[:, None].
    """
    return (~truncated_B.bool()).float()
