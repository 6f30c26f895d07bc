"""The losses a training client computes, by Tinker's names, as pure functions over tensors.

`LOSSES[name](logp_B_T, old_B_T, adv_B_T, mask_B_T, config)` gives the per-token policy loss
and which tokens a clip touched. `policy_loss` adds what our algorithms need beyond Tinker's
losses, all as documented `loss_fn_config` keys:

    clip_low, clip_high   ratio clip bounds (ppo, gspo, cispo); default 0.2
    dual_clip             dual-clip bound c > 1 for negative advantages (ppo); default off
    loss_agg              token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    loss_agg_constant     seq-mean-token-sum-norm's normaliser (default: longest sequence)
    kl_coef, kl_estimator a KL(policy || reference) term, from `ref_logprobs` (k1, k2, k3)
    entropy_coef          an entropy bonus
    tis_cap               truncated importance weight vs `sampler_logprobs`

Aggregation is over the data of one `forward_backward` call (one optimizer step's worth).
Formulas and references: trainers/algorithms.py and docs/algorithms.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainers.algorithms import (
    aggregation_weights,
    gspo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    ppo_clip_loss,
    tis_weights,
)

KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
TokenLoss = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def ppo(logp_B_T, old_B_T, adv_B_T, mask_B_T, c: dict[str, Any]):  # type: ignore[no-untyped-def]
    """PPO's clipped surrogate, asymmetric bounds, optional dual clip."""
    low, high = c.get("clip_low", 0.2), c.get("clip_high", 0.2)
    return ppo_clip_loss(logp_B_T, old_B_T, adv_B_T, low, high, c.get("dual_clip"))


def gspo(logp_B_T, old_B_T, adv_B_T, mask_B_T, c: dict[str, Any]):  # type: ignore[no-untyped-def]
    """GSPO: one clipped importance ratio per sequence."""
    low, high = c.get("clip_low", 0.2), c.get("clip_high", 0.2)
    return gspo_loss(logp_B_T, old_B_T, adv_B_T, mask_B_T, low, high)


def importance_sampling(logp_B_T, old_B_T, adv_B_T, mask_B_T, c: dict[str, Any]):  # type: ignore[no-untyped-def]
    """Tinker's `importance_sampling`: -ratio * A, no clip."""
    return -torch.exp(logp_B_T - old_B_T) * adv_B_T, torch.zeros_like(logp_B_T)


def cispo(logp_B_T, old_B_T, adv_B_T, mask_B_T, c: dict[str, Any]):  # type: ignore[no-untyped-def]
    """CISPO (MiniMax-M1, 2025): -sg(clip(ratio, 1 - low, 1 + high)) * A * logp; the clip
    bounds the weight but every token keeps its gradient."""
    low, high = c.get("clip_low", 0.2), c.get("clip_high", 0.2)
    ratio_B_T = torch.exp(logp_B_T - old_B_T).detach()
    weight_B_T = ratio_B_T.clamp(1.0 - low, 1.0 + high)
    return -weight_B_T * adv_B_T * logp_B_T, (weight_B_T != ratio_B_T).float()


LOSSES: dict[str, TokenLoss] = {
    "ppo": ppo,
    "gspo": gspo,
    "importance_sampling": importance_sampling,
    "cispo": cispo,
}


def policy_loss(
    loss_fn: str,
    c: dict[str, Any],
    logp_B_T: torch.Tensor,
    ent_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    adv_B_T: torch.Tensor,
    old_B_T: torch.Tensor,
    w_B: torch.Tensor,
    sampler_B_T: torch.Tensor | None = None,
    ref_B_T: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch's share of the loss (tokens weighted by their sequence's aggregation
    weight `w_B`) and its metric sums over loss tokens."""
    pg_B_T, clipped_B_T = LOSSES[loss_fn](logp_B_T, old_B_T, adv_B_T, mask_B_T, c)
    loss_B_T = pg_B_T
    m = mask_B_T.float()
    sums: dict[str, float] = {}
    if c.get("tis_cap") is not None and sampler_B_T is not None:
        tis_B_T = tis_weights(old_B_T, sampler_B_T, c["tis_cap"])
        loss_B_T = loss_B_T * tis_B_T
        sums["tis_weight:sum"] = float((tis_B_T * mask_B_T).sum())
    if ref_B_T is not None:
        kl_B_T = KL_ESTIMATORS[c.get("kl_estimator", "k3")](logp_B_T, ref_B_T)
        if c.get("kl_coef", 0.0):
            loss_B_T = loss_B_T + c["kl_coef"] * kl_B_T
        sums["kl:sum"] = float((kl_B_T.detach() * mask_B_T).sum())
    if c.get("entropy_coef"):
        loss_B_T = loss_B_T - c["entropy_coef"] * ent_B_T
    sums["tokens"] = float(m.sum())
    sums["pg_loss:sum"] = float((pg_B_T.detach() * m).sum())
    sums["entropy:sum"] = float((ent_B_T.detach() * m).sum())
    sums["clip_frac:sum"] = float((clipped_B_T * m).sum())
    # the tokens were sampled from the old policy: mean(old - new) estimates KL(old || new)
    sums["approx_kl:sum"] = float(((old_B_T - logp_B_T.detach()) * m).sum())
    return (loss_B_T * m * w_B[:, None]).sum(), sums


def sequence_weights(lengths: list[int], c: dict[str, Any]) -> list[float]:
    """Each sequence's aggregation weight for one optimizer step's data."""
    mode = c.get("loss_agg", "token-mean")
    w_B = aggregation_weights(torch.tensor(lengths), mode, c.get("loss_agg_constant"))
    return w_B.tolist()
