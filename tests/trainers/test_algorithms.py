"""RL math against hand computations (the arithmetic is in the comments)."""

import math
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trainers.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    aggregate_loss,
    aggregation_weights,
    clipped_policy_loss,
    dr_grpo_advantages,
    dynamic_sampling_keep,
    entropy_from_logits,
    explained_variance,
    gae_advantages,
    grpo_advantages,
    gspo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    linear_warmup_lr,
    masked_mean,
    masked_whiten,
    overlong_filter_mask,
    overlong_penalty,
    ppo_clip_loss,
    reinforce_pp_advantages,
    rloo_advantages,
    scheduled_lr,
    tis_weights,
    turn_overlong_penalty,
    value_loss,
)


def pad_T(x: torch.Tensor, n: int, value: float) -> torch.Tensor:
    """Append n positions filled with `value` on the last (T) dimension."""
    return torch.cat([x, torch.full((*x.shape[:-1], n), value)], dim=-1)


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


# --- advantage estimators --------------------------------------------------------------------


def test_dr_grpo_is_group_centred_without_std():
    # group [2, 0, 1]: mean 1 -> [1, -1, 0]; group [5, 1]: mean 3 -> [2, -2] (no std division)
    assert dr_grpo_advantages(torch.tensor([[2.0, 0.0, 1.0]])).tolist() == [[1.0, -1.0, 0.0]]
    assert dr_grpo_advantages(torch.tensor([[5.0, 1.0]])).tolist() == [[2.0, -2.0]]
    assert dr_grpo_advantages(torch.tensor([[0.3, 0.3, 0.3]])).abs().max() == 0
    assert dr_grpo_advantages(torch.tensor([[1.0], [0.0]])).abs().max() == 0


def test_rloo_leave_one_out_by_hand():
    # group [1, 0, 0, 1]: sample 0: 1 - (0 + 0 + 1) / 3 = 0.666667; sample 1: 0 - (1 + 0 + 1) / 3 = -0.666667
    adv = rloo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert adv.tolist()[0] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3], abs=1e-6)
    # group [3, 1]: 3 - 1 = 2, 1 - 3 = -2
    assert rloo_advantages(torch.tensor([[3.0, 1.0]])).tolist() == [[2.0, -2.0]]
    assert rloo_advantages(torch.tensor([[0.5, 0.5, 0.5]])).abs().max() == 0
    assert rloo_advantages(torch.tensor([[1.0], [7.0]])).tolist() == [[0.0], [0.0]]


def test_reinforce_pp_by_hand():
    # kl_coef 1. row 0: R = 1, kl [.1, .2, .3] -> kl-to-go [.6, .5, .3] -> returns [.4, .5, .7]
    # row 1: R = 0, kl [.4, .2, (9 masked)] -> kl-to-go [.6, .2] -> returns [-.6, -.2]
    # valid returns .4 .5 .7 -.6 -.2: mean .16, deviations .24 .34 .54 -.76 -.36,
    # population var (.0576 + .1156 + .2916 + .5776 + .1296) / 5 = .2344, std .484149
    # -> .24/.484149 = .495715, .702263, 1.115359, -1.569765, -.743573; masked -> 0
    rewards = torch.tensor([1.0, 0.0])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.2, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = reinforce_pp_advantages(rewards, kl, mask, kl_coef=1.0)
    expected = [[0.495715, 0.702263, 1.115359], [-1.569765, -0.743573, 0.0]]
    assert adv[0].tolist() == pytest.approx(expected[0], abs=1e-5)
    assert adv[1].tolist() == pytest.approx(expected[1], abs=1e-5)
    # padding positions with garbage KL change nothing
    padded = reinforce_pp_advantages(rewards, pad_T(kl, 2, 5.0), pad_T(mask, 2, 0.0), 1.0)
    assert torch.allclose(padded[:, :3], adv) and padded[:, 3:].abs().max() == 0


def test_reinforce_pp_ignores_kl_on_environment_tokens():
    # an env token (mask 0) inside the response: its KL 100 must not enter the return
    # R = 1, kl [.1, 100, .3] mask [1, 0, 1] -> returns [1 - .4, -, 1 - .3] = [.6, -, .7]
    # mean .65, population std .05 -> [-1, 0, 1]
    adv = reinforce_pp_advantages(
        torch.tensor([1.0]), torch.tensor([[0.1, 100.0, 0.3]]), torch.tensor([[1.0, 0.0, 1.0]]), 1.0
    )
    assert adv.tolist()[0] == pytest.approx([-1.0, 0.0, 1.0], abs=1e-5)


def test_gae_by_hand():
    # gamma .9, lam .8 (gamma * lam = .72); rewards [0, 0, 1], values [.5, .6, .7]
    # t2: delta = 1 + 0 - .7 = .3,            A2 = .3
    # t1: delta = 0 + .9 * .7 - .6 = .03,     A1 = .03 + .72 * .3 = .246
    # t0: delta = 0 + .9 * .6 - .5 = .04,     A0 = .04 + .72 * .246 = .21712
    # returns = A + V = [.71712, .846, 1.0]
    adv, ret = gae_advantages(
        torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]]), torch.ones(1, 3), 0.9, 0.8
    )
    assert adv.tolist()[0] == pytest.approx([0.21712, 0.246, 0.3], abs=1e-6)
    assert ret.tolist()[0] == pytest.approx([0.71712, 0.846, 1.0], abs=1e-6)


def test_gae_skips_environment_tokens_and_padding():
    # same episode with an env token (mask 0, garbage reward/value) between t1 and t2, and two
    # padding positions at the end: valid positions give the same numbers, masked ones 0
    rewards = torch.tensor([[0.0, 0.0, 5.0, 1.0, 3.0, 3.0]])
    values = torch.tensor([[0.5, 0.6, 99.0, 0.7, 42.0, 42.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0, 0.0]])
    adv, ret = gae_advantages(rewards, values, mask, 0.9, 0.8)
    assert adv.tolist()[0] == pytest.approx([0.21712, 0.246, 0.0, 0.3, 0.0, 0.0], abs=1e-6)
    assert ret.tolist()[0] == pytest.approx([0.71712, 0.846, 0.0, 1.0, 0.0, 0.0], abs=1e-6)


def test_gae_all_masked_sequence_is_zero():
    adv, ret = gae_advantages(torch.ones(1, 3), torch.ones(1, 3), torch.zeros(1, 3), 1.0, 1.0)
    assert adv.abs().max() == 0 and ret.abs().max() == 0


def test_value_loss_by_hand():
    # clip .2. token 0: V 1, V_old 0 -> V_clip .2; R 2: (1-2)^2 = 1, (.2-2)^2 = 3.24 -> .5 * 3.24 = 1.62, clipped
    # token 1: V 0 = V_old, R .5: both .25 -> .125, not clipped. token 2 masked (garbage)
    # mean (1.62 + .125) / 2 = .8725, clip fraction 1/2
    values = torch.tensor([[1.0, 0.0, 50.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, 0.0]])
    returns = torch.tensor([[2.0, 0.5, -50.0]])
    loss, clipfrac = value_loss(values, old, returns, torch.tensor([[1.0, 1.0, 0.0]]), clip=0.2)
    assert loss.item() == pytest.approx(0.8725, abs=1e-6)
    assert clipfrac.item() == 0.5
    # gradient: token 0 is clipped (0); token 1: d/dV .5 (V - R)^2 / 2 = (0 - .5) / 2 = -.25; masked 0
    loss.backward()
    assert values.grad.tolist()[0] == pytest.approx([0.0, -0.25, 0.0])


def test_explained_variance():
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    returns = torch.tensor([1.0, 2.0, 3.0, 100.0])
    # perfect critic -> 1; constant V = 2: Var[R - V] = Var[-1, 0, 1] = Var[R] -> 0
    assert explained_variance(torch.tensor([1.0, 2.0, 3.0, -7.0]), returns, mask).item() == 1.0
    assert explained_variance(torch.full((4,), 2.0), returns, mask).item() == pytest.approx(0.0)
    # V = [3, 2, 1]: R - V = [-2, 0, 2], var 8/3, Var[R] 2/3 -> 1 - 4 = -3
    assert explained_variance(
        torch.tensor([3.0, 2.0, 1.0, 0.0]), returns, mask
    ).item() == pytest.approx(-3.0)
    assert math.isnan(explained_variance(torch.ones(3), torch.ones(3), torch.ones(3)).item())


# --- policy losses ---------------------------------------------------------------------------


def test_ppo_clip_higher_by_hand():
    # clip_low .2, clip_high .28 -> ratio clipped to [.8, 1.28]
    # token 0: ratio e^.5 = 1.6487, A +1 -> min(1.6487, 1.28) -> loss -1.28, clipped
    # token 1: ratio e^-.5 = .6065, A -1 -> min(-.6065, -.8) = -.8 -> loss .8, clipped
    # token 2: ratio e^.2 = 1.2214, A +1 -> min(1.2214, 1.28) -> loss -1.2214, NOT clipped
    #          (a symmetric .2 clip would have clipped it at 1.2)
    logp = torch.tensor([0.5, -0.5, 0.2])
    adv = torch.tensor([1.0, -1.0, 1.0])
    loss, clipped = ppo_clip_loss(logp, torch.zeros(3), adv, clip_low=0.2, clip_high=0.28)
    assert loss.tolist() == pytest.approx([-1.28, 0.8, -math.exp(0.2)], abs=1e-5)
    assert clipped.tolist() == [1.0, 1.0, 0.0]
    _, sym_clipped = clipped_policy_loss(logp, torch.zeros(3), adv, clip_eps=0.2)
    assert sym_clipped.tolist() == [1.0, 1.0, 1.0]


def test_symmetric_ppo_clip_equals_clipped_policy_loss():
    logp, old, adv = torch.randn(2, 5), torch.randn(2, 5), torch.randn(2, 5)
    a = ppo_clip_loss(logp, old, adv, 0.2, 0.2)
    b = clipped_policy_loss(logp, old, adv, 0.2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_dual_clip_bounds_negative_advantage_loss():
    # c = 3, clip .2/.28. token 0: ratio e^2 = 7.389, A -1: standard -min(-7.389, -1.28) = 7.389
    #   -> dual min(7.389, 3 * 1) = 3, clipped, no gradient
    # token 1: ratio e^-.5, A -1: standard .8 < 3, unchanged
    # token 2: ratio e^2, A +1: A > 0, dual clip does not apply: -1.28
    logp = torch.tensor([2.0, -0.5, 2.0], requires_grad=True)
    adv = torch.tensor([-1.0, -1.0, 1.0])
    loss, clipped = ppo_clip_loss(logp, torch.zeros(3), adv, 0.2, 0.28, dual_clip=3.0)
    assert loss.tolist() == pytest.approx([3.0, 0.8, -1.28], abs=1e-5)
    assert clipped.tolist() == [1.0, 1.0, 1.0]
    loss.sum().backward()
    assert logp.grad.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(logp, torch.zeros(3), adv, 0.2, 0.2, dual_clip=0.5)


def test_gspo_sequence_ratio_by_hand():
    # seq 0: log-ratios [.2, .4] -> mean .3 -> s = e^.3 = 1.349859, A +1, clip .2 -> 1.2: loss -1.2, clipped
    # seq 1: log-ratios [.1, (9 masked)] -> mean .1 -> s = e^.1 = 1.105171, A -1
    #        -> -min(-1.105171, -1.105171 clipped at 1.2 is itself) -> loss 1.105171, not clipped
    logp = torch.tensor([[0.2, 0.4], [0.1, 9.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, clipped = gspo_loss(logp, torch.zeros(2, 2), adv, mask, 0.2, 0.2)
    assert loss[0].tolist() == pytest.approx([-1.2, -1.2], abs=1e-5)
    assert loss[1, 0].item() == pytest.approx(1.105171, abs=1e-5)
    assert clipped.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    # seq-mean-token-mean: seq 1's only token gets d/dlogp (-s * A) / (B=2 * |y|=1) = 1.105171 / 2
    aggregate_loss(loss, mask, "seq-mean-token-mean").backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, 0.0, 0.552585, 0.0], abs=1e-5)


def test_gspo_is_unchanged_by_padding_and_all_masked_rows_are_finite():
    logp, old, adv = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 1).expand(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    loss, _ = gspo_loss(logp, old, adv, mask, 0.2, 0.2)
    padded, _ = gspo_loss(
        pad_T(logp, 2, 3.0), pad_T(old, 2, -3.0), pad_T(adv, 2, 1.0), pad_T(mask, 2, 0.0), 0.2, 0.2
    )
    assert torch.allclose(padded[:, :3], loss)
    assert torch.isfinite(aggregate_loss(loss, mask, "seq-mean-token-mean"))


def test_tis_weights_truncate_and_detach():
    # exp(0 - -1) = e = 2.718 -> capped at 2; exp(0) = 1; exp(0 - .5) = .606531
    old = torch.zeros(3, requires_grad=True)
    w = tis_weights(old, torch.tensor([-1.0, 0.0, 0.5]), cap=2.0)
    assert w.tolist() == pytest.approx([2.0, 1.0, 0.606531], abs=1e-6)
    assert not w.requires_grad


# --- KL, entropy -----------------------------------------------------------------------------


def test_k1_k2_by_hand():
    # logp 0, ref -1: k1 = 0 - (-1) = 1; k2 = .5 * 1^2 = .5
    logp, ref = torch.tensor([0.0]), torch.tensor([-1.0])
    assert kl_k1(logp, ref).item() == 1.0
    assert kl_k2(logp, ref).item() == 0.5
    # k1 is signed: logp -1, ref 0 -> -1; k2 and k3 are never negative
    assert kl_k1(ref, logp).item() == -1.0
    same = torch.tensor([0.3])
    assert kl_k1(same, same).item() == kl_k2(same, same).item() == kl_k3(same, same).item() == 0.0


def test_k1_in_the_loss_is_refused_and_in_the_reward_allowed():
    from trainers.algorithm_table import ALGORITHMS
    from trainers.config import ConfigError, build_config, read_yaml

    # in the loss k1's gradient is the score function, whose expectation is 0: no pull at all
    with pytest.raises(ConfigError, match="zero expected gradient"):
        build_config([{"algorithm": {"kl_coef": 0.1, "kl_estimator": "k1"}}], env_name="math")
    with pytest.raises(ConfigError, match="zero expected gradient"):
        build_config([{"algorithm": {"name": "reinforce_pp", "kl_in_reward": False}}], "math")
    # REINFORCE++'s preset puts k1 in the reward, which is allowed; every preset and recipe builds
    for name in ALGORITHMS:
        build_config([{"algorithm": {"name": name}}], env_name="math")
    recipes = sorted((Path(__file__).parents[2] / "trainers" / "recipes").glob("*.yaml"))
    assert recipes
    for recipe in recipes:
        build_config([read_yaml(recipe)])
    assert build_config([{"algorithm": {"kl_estimator": "k1"}}], "math").algorithm.kl_coef == 0


def test_adaptive_kl_controller_by_hand():
    # target 6, horizon 10000. KL 12: error clip(12/6 - 1) = clip(1) = .2
    #   -> .1 * (1 + .2 * 1000 / 10000) = .102
    # KL 5.4: error 5.4/6 - 1 = -.1 -> .102 * (1 - .1 * .1) = .10098
    ctl = AdaptiveKLController(0.1, target=6.0, horizon=10000)
    ctl.update(12.0, n_steps=1000)
    assert ctl.value == pytest.approx(0.102)
    ctl.update(5.4, n_steps=1000)
    assert ctl.value == pytest.approx(0.10098)
    fixed = FixedKLController(0.05)
    fixed.update(100.0, n_steps=1000)
    assert fixed.value == 0.05


def test_entropy_from_logits_by_hand():
    # uniform over 2 -> ln 2 = .693147; over 4 -> ln 4 = 1.386294; one-hot via -inf -> 0
    logits = torch.tensor(
        [
            [0.0, 0.0, -math.inf, -math.inf],
            [1.0, 1.0, 1.0, 1.0],
            [0.0, -math.inf, -math.inf, -math.inf],
        ]
    )
    assert entropy_from_logits(logits).tolist() == pytest.approx(
        [0.693147, 1.386294, 0.0], abs=1e-6
    )


# --- aggregation -----------------------------------------------------------------------------

AGG_LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
AGG_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_aggregate_loss_by_hand():
    # valid: row 0 [1, 2, 3], row 1 [4]; sum 10, 4 tokens
    # token-mean 10 / 4 = 2.5; seq-mean-token-mean (2 + 4) / 2 = 3
    # sum-norm constant 5: 10 / (2 * 5) = 1; default constant = longest valid length 3: 10 / 6
    assert aggregate_loss(AGG_LOSS, AGG_MASK, "token-mean").item() == 2.5
    assert aggregate_loss(AGG_LOSS, AGG_MASK, "seq-mean-token-mean").item() == 3.0
    assert aggregate_loss(AGG_LOSS, AGG_MASK, "seq-mean-token-sum-norm", 5).item() == 1.0
    assert aggregate_loss(AGG_LOSS, AGG_MASK, "seq-mean-token-sum-norm").item() == pytest.approx(
        10 / 6
    )
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(AGG_LOSS, AGG_MASK, "sum")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_aggregate_loss_padding_and_all_masked(mode):
    ref = aggregate_loss(AGG_LOSS, AGG_MASK, mode)
    assert aggregate_loss(pad_T(AGG_LOSS, 3, 7.0), pad_T(AGG_MASK, 3, 0.0), mode) == ref
    # an all-masked row: finite; token-mean unchanged; per-sequence modes count it as a zero
    loss = torch.cat([AGG_LOSS, torch.full((1, 3), float("nan")).nan_to_num(7.0)])
    mask = torch.cat([AGG_MASK, torch.zeros(1, 3)])
    out = aggregate_loss(loss, mask, mode)
    assert torch.isfinite(out)
    # token-mean 2.5; seq-mean (2 + 4 + 0) / 3 = 2; sum-norm 10 / (3 * 3) = 1.111111
    assert out.item() == pytest.approx(
        {"token-mean": 2.5, "seq-mean-token-mean": 2.0, "seq-mean-token-sum-norm": 10 / 9}[mode]
    )
    assert aggregate_loss(AGG_LOSS, torch.zeros(2, 3), mode).item() == 0.0


# --- DAPO extras -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_aggregation_weights_reproduce_aggregate_loss(mode):
    # The learner accumulates sum_i w_i * sum_t m l micro-batch by micro-batch; it must equal
    # aggregate_loss over the whole mini-batch, including an all-masked row.
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0], [7.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    w = aggregation_weights(mask.sum(-1), mode, constant=4.0)
    split = sum(w[i] * (loss[i] * mask[i]).sum() for i in range(3))
    assert split == pytest.approx(aggregate_loss(loss, mask, mode, constant=4.0).item())


def test_aggregation_weights_by_hand():
    n = torch.tensor([3, 2, 0])
    # token-mean: 1 / (3 + 2 + 0) = 0.2 for every sequence
    assert aggregation_weights(n, "token-mean").tolist() == pytest.approx([0.2, 0.2, 0.2])
    # seq-mean-token-mean: 1 / (B * max(1, n_i)) = 1/9, 1/6, 1/3
    assert aggregation_weights(n, "seq-mean-token-mean").tolist() == pytest.approx(
        [1 / 9, 1 / 6, 1 / 3]
    )
    # Dr. GRPO: 1 / (B * constant) = 1 / (3 * 4) whatever the length
    assert aggregation_weights(n, "seq-mean-token-sum-norm", 4.0).tolist() == pytest.approx(
        [1 / 12] * 3
    )


def test_scheduled_lr_by_hand():
    # warm-up 2 of 10 steps: steps 0, 1 ramp 0.5, 1.0 (x base 1.0)
    assert scheduled_lr(1.0, 0, 2, 10, "linear") == pytest.approx(0.5)
    assert scheduled_lr(1.0, 1, 2, 10, "linear") == pytest.approx(1.0)
    # linear after warm-up: p = (6 - 2) / (10 - 2) = 0.5 -> 1 - 0.5 = 0.5
    assert scheduled_lr(1.0, 6, 2, 10, "linear") == pytest.approx(0.5)
    # with a floor of 0.1: 0.1 + 0.9 * 0.5 = 0.55
    assert scheduled_lr(1.0, 6, 2, 10, "linear", 0.1) == pytest.approx(0.55)
    # cosine at p = 0.5: (1 + cos(pi / 2)) / 2 = 0.5; at the end p = 1: 0
    assert scheduled_lr(1.0, 6, 2, 10, "cosine") == pytest.approx(0.5)
    assert scheduled_lr(1.0, 10, 2, 10, "cosine") == pytest.approx(0.0)
    assert scheduled_lr(3e-4, 7, 0, 10, "constant") == 3e-4


def test_masked_whiten_by_hand():
    # valid values 1, 2, 3: mean 2, population std sqrt(2/3) = 0.8165
    x = torch.tensor([[1.0, 2.0], [3.0, 99.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    out = masked_whiten(x, mask)
    s = math.sqrt(2 / 3)
    assert out.flatten().tolist() == pytest.approx([-1 / s, 0.0, 1 / s, 0.0], abs=1e-6)


def test_dynamic_sampling_keep():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert dynamic_sampling_keep(rewards).tolist() == [False, True, False]
    assert dynamic_sampling_keep(torch.tensor([[0.7]])).tolist() == [False]


def test_overlong_penalty_by_hand():
    # max 20, cache 4: free up to 16; 17 -> -(17-16)/4 = -.25; 18 -> -.5; 20 -> -1; beyond -> -1
    lengths = torch.tensor([10, 16, 17, 18, 20, 25])
    out = overlong_penalty(lengths, max_len=20, cache_len=4, penalty=1.0)
    assert out.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    assert overlong_penalty(torch.tensor([18]), 20, 4, penalty=0.5).tolist() == [-0.25]
    assert overlong_penalty(torch.tensor([19, 20, 21]), 20, 0).tolist() == [0.0, 0.0, -1.0]


def test_multi_turn_overlong_penalty_judges_each_turn_by_its_own_limit():
    """SQL's preset: 2 turns of at most 48 tokens, buffer 16, penalty 0.5. A turn cut off at 48
    costs the full 0.5 although the episode's 58 tokens are far below 2 x 48 - 16 = 80."""
    from agents.trajectory import Trajectory
    from trainers.config import build_config
    from trainers.steps import shaped_reward

    def pen(lengths, limits):
        out = turn_overlong_penalty(torch.tensor(lengths), torch.tensor(limits), 16, 0.5)
        return out.item()

    assert pen([48, 10], [48, 48]) == -0.5  # the first turn hit its limit
    assert pen([40, 5], [48, 48]) == pytest.approx(-0.25)  # (40 - 32) / 16 * 0.5, the worse turn
    assert pen([30, 31], [48, 48]) == 0.0  # both below 48 - 16 = 32
    # the second turn was limited to 20 by the episode's token budget and used all of it:
    # buffer min(16, 20), free up to 4, (20 - 4) / 16 * 0.5 = 0.5
    assert pen([10, 20], [48, 20]) == -0.5
    # a limit below the buffer: the whole turn is the soft zone, 3 of 8 -> 3 / 8 * 0.5
    assert pen([3], [8]) == pytest.approx(-0.1875)
    assert pen([], []) == 0.0

    layer = {
        "env": {"max_turns": 2},
        "rollout": {"max_new_tokens": 48},
        "algorithm": {"overlong_buffer": 16, "overlong_penalty": 0.5},
    }
    cfg = build_config([layer], env_name="sql")
    t = Trajectory("t", 0, reward=1.0, turn_tokens=[48, 10], turn_limits=[48, 48])
    t.loss_mask = [1] * 58
    assert shaped_reward(cfg, t) == 0.5
    off = build_config([{"algorithm": {"overlong_buffer": 0}}], env_name="sql")
    assert shaped_reward(off, t) == 1.0


def test_overlong_filter_mask():
    assert overlong_filter_mask(torch.tensor([True, False, True])).tolist() == [0.0, 1.0, 0.0]


# --- cross-check against TRL's GRPOTrainer._compute_loss -------------------------------------


def _trl_loss(grpo_trainer, logp, old, ref, adv_B, mask, tool_mask, cfg):
    """Run TRL's own GRPOTrainer._compute_loss on a stand-in `self` whose model forward
    returns `logp` (no model, no accelerator: single process, no accumulation)."""
    args = SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1)
    accel = SimpleNamespace(
        num_processes=1,
        sync_gradients=True,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction: x,
    )
    fake = SimpleNamespace(
        args=args,
        accelerator=accel,
        model=SimpleNamespace(training=True),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        use_vllm=False,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        current_gradient_accumulation_steps=1,
        **cfg,
    )
    inputs = {
        "prompt_ids": torch.zeros(logp.shape[0], 1, dtype=torch.long),
        "prompt_mask": torch.ones(logp.shape[0], 1, dtype=torch.long),
        "completion_ids": torch.zeros(logp.shape, dtype=torch.long),
        "completion_mask": mask.long(),
        "tool_mask": tool_mask.long(),
        "advantages": adv_B,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": (mask * tool_mask).sum(),
    }
    return grpo_trainer._compute_loss(fake, None, inputs)


TRL_CASES = {
    # name: (TRL config, our loss, our aggregation)
    "grpo": (
        dict(loss_type="grpo", importance_sampling_level="token"),
        "ppo",
        "seq-mean-token-mean",
    ),
    "bnpo": (dict(loss_type="bnpo", importance_sampling_level="token"), "ppo", "token-mean"),
    "dapo": (dict(loss_type="dapo", importance_sampling_level="token"), "ppo", "token-mean"),
    "dr_grpo": (
        dict(loss_type="dr_grpo", importance_sampling_level="token"),
        "ppo",
        "seq-mean-token-sum-norm",
    ),
    "grpo+k3": (
        dict(loss_type="grpo", importance_sampling_level="token", beta=0.04),
        "ppo",
        "seq-mean-token-mean",
    ),
    "gspo": (
        dict(loss_type="grpo", importance_sampling_level="sequence", epsilon_low=0.05),
        "gspo",
        "seq-mean-token-mean",
    ),
    "gspo-token-mean": (
        dict(loss_type="bnpo", importance_sampling_level="sequence", epsilon_low=0.05),
        "gspo",
        "token-mean",
    ),
}


@pytest.mark.parametrize("case", list(TRL_CASES))
def test_matches_trl_grpo_loss_and_gradient(case):
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    trl_cfg, ours, agg = TRL_CASES[case]
    cfg = dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.28, max_completion_length=8) | trl_cfg
    gen = torch.Generator().manual_seed(0)
    B, T = 4, 6
    base = -torch.rand(B, T, generator=gen) * 2
    # logp - old, chosen so the clip bounds matter (masked positions hold 9, which must not leak):
    # row 0 (A +1): token ratios e^.22 = 1.246 and e^.26 = 1.297 sit between 1 + .2 and 1 + .28;
    #   sequence mean .1467 -> 1.158, unclipped, so GSPO has a gradient here
    # row 1 (A -.5): token e^-.5 = .61 < .8 is clipped; sequence mean -.1 -> .905, clipped only
    #   when epsilon_low is .05
    # row 2 (A +2): valid tokens 0, 3, 4: mean (.22 + .2 + .26) / 3 = .2267 -> 1.254, clipped at
    #   1.2 but not at 1.28
    log_ratio = torch.tensor(
        [
            [0.22, 0.5, -0.5, 0.1, 0.3, 0.26],
            [-0.5, -0.1, 0.3, 9.0, 9.0, 9.0],
            [0.22, 9.0, 9.0, 0.2, 0.26, 9.0],
            [9.0, 9.0, 9.0, 9.0, 9.0, 9.0],
        ]
    )
    old = base - log_ratio
    ref = base + 0.3 * torch.randn(B, T, generator=gen)
    adv_B = torch.tensor([1.0, -0.5, 2.0, -1.5])
    # row 1 ends early (padding), row 2 has environment tokens inside (tool_mask), row 3 is all masked
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]]
    ).float()
    tool_mask = torch.ones(B, T)
    tool_mask[2, 1:3] = 0

    logp_trl = base.clone().requires_grad_(True)
    loss_trl = _trl_loss(GRPOTrainer, logp_trl, old, ref, adv_B, mask, tool_mask, cfg)
    loss_trl.backward()

    logp = base.clone().requires_grad_(True)
    m = mask * tool_mask
    adv_B_T = adv_B[:, None].expand(B, T)
    if ours == "ppo":
        tok, _ = ppo_clip_loss(logp, old, adv_B_T, cfg["epsilon_low"], cfg["epsilon_high"])
    else:
        tok, _ = gspo_loss(logp, old, adv_B_T, m, cfg["epsilon_low"], cfg["epsilon_high"])
    tok = tok + cfg["beta"] * kl_k3(logp, ref)
    loss = aggregate_loss(tok, m, agg, constant=cfg["max_completion_length"])
    loss.backward()

    assert loss.item() == pytest.approx(loss_trl.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(logp.grad, logp_trl.grad, atol=1e-6)
    assert logp.grad.abs().sum() > 0
