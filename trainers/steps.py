"""One training step's pieces, shared by both schedules (trainers/sync.py, async_loop.py).

`collect` a step's groups of episodes and their shaped rewards (each episode's shaped once),
`build_data` (one Tinker datum per trained episode), `freeze` the numbers fixed for the step
(old log-probs, the reference's, the critic's values), `compute_advantages` with the
algorithm's estimator (client side, as in Tinker), and `update` the policy (and critic) with
`forward_backward` + `optim_step` per mini-batch. They talk to the training and sampling
clients only.
"""

from __future__ import annotations

import random
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from agents.agent_loop import Budget, episode_seed, run_episodes
from agents.chat import ChatFormat
from agents.engines import ENGINES
from agents.evaluate import is_correct
from agents.sampling import SamplingClient
from agents.trajectory import Trajectory
from environments import registry
from tasks.task import Task, load_tasks, select_split
from trainers.algorithm_table import ALGORITHMS
from trainers.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    dynamic_sampling_keep,
    explained_variance,
    masked_mean,
    scheduled_lr,
    turn_overlong_penalty,
)
from trainers.client import AdamParams, Datum, micro_batches, mini_batches
from trainers.config import RunConfig
from trainers.estimators import ESTIMATORS, AdvantageInputs, rows
from trainers.losses import KL_ESTIMATORS
from trainers.placement import Clients
from trainers.rundir import RunDir, utc_now
from trainers.tracking import MLflowTracker, NullTracker, Tracker, default_store

T = TypeVar("T")


def load_split(cfg: RunConfig, split: str) -> list[Task]:
    """Tasks of a split: from the user's task file (all of it if unsplit, less the held-out
    part with eval.holdout; tasks/task.py's `select_split`) or the bundled suite."""
    spec = registry.resolve(cfg.env.name, cfg.environments)
    if cfg.env.tasks:
        path = Path(cfg.env.tasks)
        if not path.is_absolute() and cfg.project_dir:
            path = Path(cfg.project_dir) / path
        return select_split(
            load_tasks(path), split, holdout=cfg.eval.holdout, eval_split=cfg.eval.split
        )
    return registry.bundled_tasks(spec, split)


def batch_tasks(tasks: list[T], seed: int, step: int, size: int) -> list[T]:
    """The step's P tasks: walk seeded per-epoch permutations (data position = step * P)."""
    out = []
    for i in range((step - 1) * size, step * size):
        epoch, pos = divmod(i, len(tasks))
        order = np.random.default_rng([seed, epoch]).permutation(len(tasks))
        out.append(tasks[int(order[pos])])
    return out


def make_tracker(cfg: RunConfig, run: RunDir, run_id: str | None) -> Tracker:
    if not cfg.tracking.enabled:
        return NullTracker()
    uri, artifacts = default_store(run.path.parent)
    return MLflowTracker(
        cfg.tracking.uri or uri, cfg.tracking.experiment, run.path.name, artifacts, run_id
    )


def step_metrics(
    trajs: list[Trajectory], group_size: int, learn: dict[str, float]
) -> dict[str, float]:
    """Per-step numbers for metrics.jsonl (names documented in docs/run-format.md)."""
    rewards_P_G = torch.tensor([t.reward for t in trajs]).view(-1, group_size)
    lens = [t.response_len for t in trajs] or [0]
    zero_var = (rewards_P_G.max(dim=1).values == rewards_P_G.min(dim=1).values).float().mean()
    out = {
        "reward/mean": float(rewards_P_G.mean()),
        "reward/std": float(rewards_P_G.std()) if rewards_P_G.numel() > 1 else 0.0,
        "reward/min": float(rewards_P_G.min()),
        "reward/max": float(rewards_P_G.max()),
        "reward/accuracy": sum(map(is_correct, trajs)) / len(trajs),
        "response_len/mean": sum(lens) / len(lens),
        "response_len/max": float(max(lens)),
        "response/cut_off": sum(t.cut_off for t in trajs) / len(trajs),
        "turns/mean": sum(t.num_turns for t in trajs) / len(trajs),
        "episodes": float(len(trajs)),
        "episodes/failed": float(sum(t.error is not None for t in trajs)),
        "groups/zero_variance": float(zero_var),
    }
    out.update({k: float(v) for k, v in learn.items()})
    # a step with nothing to train on (every group dropped or failed) still has every key
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "approx_kl", "grad_norm", "lr"):
        out.setdefault(key, 0.0)
    for key in ("adv/mean", "adv/std", "updates", "trained_tokens"):
        out.setdefault(key, 0.0)
    return out


# ------------------------------------------------------------------ step health (issue 13)

ZERO_VARIANCE_FRACTION = 0.5
"""A step "cannot learn" when at least this fraction of its groups have one reward for all samples..."""
ZERO_VARIANCE_STEPS = 3
"""...for this many steps in a row (the same rule `skyrl watch` applies; docs/run-format.md)."""
NO_SIGNAL_WARNING = (
    "warning: for {steps} steps most groups ({pct:.0%} at step {step}) gave every sample the "
    "same reward, so their advantages are 0 and the policy barely learns; try more samples "
    "(rollout.group_size), easier tasks, a supervised warm-up (warmup.sft_steps) or a reward "
    "with partial credit"
)


class EpisodesFailed(RuntimeError):
    """Every episode of a step failed: nothing to train on, and the next step would fail alike."""


def check_failures(trajs: list[Trajectory], step: int, max_fraction: float) -> str | None:
    """EpisodesFailed when every episode of the step failed; a warning line (with the first
    error) when more than `max_fraction` of them did; None otherwise."""
    failed = [t for t in trajs if t.error is not None]
    if not failed:
        return None
    # the error may quote what the episode wrote: one line, control characters written out
    flat = " ".join(str(failed[0].error).split())[:300]
    first = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in flat)
    where = f"(task {failed[0].task_id!r})"
    if len(failed) == len(trajs):
        raise EpisodesFailed(
            f"every episode of step {step} failed ({len(trajs)} of {len(trajs)}); "
            f"the first {where}: {first}"
        )
    if len(failed) / len(trajs) > max_fraction:
        return (
            f"warning: {len(failed)} of {len(trajs)} episodes of step {step} failed "
            f"(trainer.max_failed_fraction={max_fraction:g}); the first {where}: {first}"
        )
    return None


def no_signal_warning(zero_variance: list[float], step: int) -> str | None:
    """The no-learning-signal warning, on the step that completes a streak of
    ZERO_VARIANCE_STEPS steps whose `groups/zero_variance` is at least ZERO_VARIANCE_FRACTION."""
    recent = zero_variance[-ZERO_VARIANCE_STEPS:]
    if len(recent) < ZERO_VARIANCE_STEPS or min(recent) < ZERO_VARIANCE_FRACTION:
        return None
    return NO_SIGNAL_WARNING.format(steps=ZERO_VARIANCE_STEPS, pct=recent[-1], step=step)


@dataclass
class Acting:
    """The sampling side of a step: tasks, environments, the agent loop's settings."""

    cfg: RunConfig
    train_tasks: list[Task]
    make_env: Any
    chat: ChatFormat
    budget: Budget
    pool: ThreadPoolExecutor


@dataclass
class Learning:
    """The training side of a step: the clients and the counters a checkpoint keeps."""

    cfg: RunConfig
    clients: Clients
    kl: FixedKLController | AdaptiveKLController
    version: int = 0
    """Weights version the sampler serves (one per update)."""
    optim_steps: int = 0
    """Policy optimizer steps so far (the learning-rate schedule's clock)."""


# ------------------------------------------------------------------------- collect


def shaped_reward(cfg: RunConfig, t: Trajectory) -> float:
    """The reward the update sees: DAPO's soft overlong penalty on top, when it is on, with
    each model turn judged against the token limit that bounded it."""
    a = cfg.algorithm
    if not a.overlong_buffer:
        return t.reward
    lengths_K, limits_K = torch.tensor(t.turn_tokens), torch.tensor(t.turn_limits)
    return t.reward + float(
        turn_overlong_penalty(lengths_K, limits_K, a.overlong_buffer, a.overlong_penalty)
    )


def shaped_rewards(cfg: RunConfig, groups: list[list[Trajectory]]) -> torch.Tensor:
    """rewards_K_G: each episode's `shaped_reward`, group by group."""
    return torch.tensor([[shaped_reward(cfg, t) for t in g] for g in groups])


def collect(
    ac: Acting, sampler: SamplingClient, step: int
) -> tuple[list[Trajectory], list[list[Trajectory]], torch.Tensor]:
    """Every episode of the step, the groups kept for the update (up to the batch), and the
    kept groups' shaped rewards (`rewards_K_G`, what the update's advantages start from).

    Without dynamic sampling that is one round of P tasks, all kept. With it, groups whose
    rewards are all equal are dropped and further rounds (new tasks, new seeds; a pure
    function of the step, so resume repeats them) refill the batch, up to a cap.
    """
    cfg, a, r = ac.cfg, ac.cfg.algorithm, ac.cfg.rollout
    want = a.train_batch_size or r.batch_size
    sample = lambda reqs: sampler.generate(reqs, r.temperature, r.top_p).result()  # noqa: E731
    trajs: list[Trajectory] = []
    kept: list[list[Trajectory]] = []
    kept_rewards: list[torch.Tensor] = []
    for k in range(a.max_sample_rounds if a.dynamic_sampling else 1):
        tasks_P = batch_tasks(ac.train_tasks, cfg.trainer.seed + 7919 * k, step, r.batch_size)
        first = k * r.batch_size  # group ids and seeds continue across rounds
        flat = [t for t in tasks_P for _ in range(r.group_size)]
        groups = [first + p for p in range(len(tasks_P)) for _ in range(r.group_size)]
        seeds = [
            episode_seed(cfg.trainer.seed, step, gid, g)
            for gid in groups[:: r.group_size]
            for g in range(r.group_size)
        ]
        new = run_episodes(sample, ac.make_env, ac.chat, flat, groups, seeds, ac.budget, ac.pool)
        trajs += new
        groups_P = [new[p * r.group_size : (p + 1) * r.group_size] for p in range(len(tasks_P))]
        rewards_P_G = shaped_rewards(cfg, groups_P)
        keep_P = (
            dynamic_sampling_keep(rewards_P_G) if a.dynamic_sampling else [True] * len(groups_P)
        )
        for group, rewards_G, keep in zip(groups_P, rewards_P_G, keep_P, strict=True):
            if keep:
                kept.append(group)
                kept_rewards.append(rewards_G)
        if len(kept) >= want:
            break
    rewards_K_G = torch.stack(kept_rewards[:want]) if kept else torch.zeros(0, r.group_size)
    return trajs, kept[:want], rewards_K_G


# ----------------------------------------------------------------- data, advantages


def build_data(
    cfg: RunConfig, kept: list[list[Trajectory]]
) -> tuple[list[Datum], list[tuple[int, int]]]:
    """A datum per trainable episode, and its (group, sample): a failed episode keeps its
    place in its group's baseline (reward 0) but carries no loss."""
    a = cfg.algorithm
    data, trained = [], []
    for k, group in enumerate(kept):
        for g, t in enumerate(group):
            if t.error is None and t.response_len > 0 and not (a.overlong_filter and t.cut_off):
                sampled = t.logprobs or [0.0] * len(t.token_ids)  # TIS, rollout/logprob_diff
                data.append(
                    Datum.from_sequence(
                        t.token_ids, t.loss_mask, t.prompt_len, sampler_logprobs=sampled
                    )
                )
                trained.append((k, g))
    return data, trained


def optimizer_steps(cfg: RunConfig, data: list[Datum]) -> list[list[int]]:
    """The step's optimizer steps (one per mini-batch, per epoch): indices into data."""
    a = cfg.algorithm
    keys = [
        (d.model_input.prompt_len, tuple(d.model_input.tokens[: d.model_input.prompt_len]))
        for d in data
    ]
    micro = micro_batches(keys, min(a.micro_batch_size, a.mini_batch_size or a.micro_batch_size))
    return mini_batches(micro, a.mini_batch_size) * a.ppo_epochs


def freeze(
    tr: Learning, data: list[Datum], steps: int, need_old: bool = False
) -> dict[str, list[torch.Tensor] | None]:
    """The numbers fixed for the whole step, at each datum's loss positions: the policy's
    log-probs before the update (`old`; with one optimizer step the old policy *is* the
    current one, so the pass is skipped unless `need_old`), the reference's (`ref`), the
    critic's values."""
    a, c = tr.cfg.algorithm, tr.clients
    need_old = (
        need_old
        or steps > 1
        or tis_cap(tr.cfg) is not None
        or (a.kl_in_reward and c.reference is not None)
    )
    old = c.policy.forward(data).result() if need_old else None
    values = c.critic.forward(data, "value").result() if c.critic else None
    if c.reference is not None:
        ref = c.reference.compute_logprobs([d.tokens for d in data], tr.cfg.rollout.temperature)
        for d, lps in zip(data, ref.result(), strict=True):
            d.loss_fn_inputs["ref_logprobs"] = lps[1:]
    return {
        "old": [torch.tensor(o["logprobs"]) for o in old.loss_fn_outputs] if old else None,
        "ref": [torch.tensor(d.at_loss("ref_logprobs")) for d in data] if c.reference else None,
        "values": [torch.tensor(v["values"]) for v in values.loss_fn_outputs] if values else None,
    }


def compute_advantages(
    tr: Learning,
    rewards_K_G: torch.Tensor,
    trained: list[tuple[int, int]],
    data: list[Datum],
    frozen: dict[str, Any],
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per-token advantages (and returns, for a critic) by the algorithm's estimator, from
    the kept groups' shaped rewards."""
    a = tr.cfg.algorithm
    kl = None
    if a.kl_in_reward and frozen["ref"] is not None:
        kl = [
            KL_ESTIMATORS[a.kl_estimator](o, r)
            for o, r in zip(frozen["old"], frozen["ref"], strict=True)
        ]
    lengths = [d.n_loss for d in data]
    inputs = AdvantageInputs(rewards_K_G, trained, lengths, kl, frozen["values"], tr.kl.value, a)
    return ESTIMATORS[ALGORITHMS[a.name].estimator](inputs)


def _scatter(d: Datum, at_loss: torch.Tensor) -> list[float]:
    """Values at a datum's loss positions spread over all its positions (0 elsewhere)."""
    it = iter(at_loss.tolist())
    return [next(it) if w else 0.0 for w in d.loss_fn_inputs["weights"]]


# ------------------------------------------------------------------------ update


AUTO_TIS_CAP = 2.0
"""The TIS cap when the engine is not the learner's own model and none is set (veRL's)."""


def tis_cap(cfg: RunConfig) -> float | None:
    """`algorithm.tis_cap`; unset, AUTO_TIS_CAP with an engine whose log-probs do not come
    from the learner's kernels (vllm): another implementation of the model (other kernels,
    another summation order) samples, so its log-probs differ from the learner's by a little
    and truncated importance sampling corrects for it."""
    if cfg.algorithm.tis_cap is not None or ENGINES[cfg.rollout.engine].learner_kernels:
        return cfg.algorithm.tis_cap
    return AUTO_TIS_CAP


def logprob_diff(data: list[Datum], learner: list[list[float]]) -> float:
    """Mean |sampler - learner| log-prob over the trained tokens (`learner` at each datum's
    loss positions): how far the engine's numbers are from the learner's."""
    diffs = [
        abs(s - float(lp))
        for d, lps in zip(data, learner, strict=True)
        for s, lp in zip(d.at_loss("sampler_logprobs"), lps, strict=True)
    ]
    return sum(diffs) / max(1, len(diffs))


def loss_config(cfg: RunConfig, kl_coef: float) -> dict[str, Any]:
    """The policy loss's `loss_fn_config` for this step (see trainers/losses.py)."""
    a = cfg.algorithm
    keys = {"clip_low", "clip_high", "dual_clip", "loss_agg", "kl_estimator", "entropy_coef"}
    return {
        **a.model_dump(include=keys),
        "tis_cap": tis_cap(cfg),
        "loss_agg_constant": a.loss_agg_constant or cfg.rollout.max_new_tokens * cfg.env.max_turns,
        "kl_coef": 0.0 if a.kl_in_reward else kl_coef,  # in the reward, it is not in the loss
    }


def attach(
    data: list[Datum],
    frozen: dict[str, Any],
    adv: list[torch.Tensor],
    returns: list[torch.Tensor] | None,
) -> list[Datum]:
    """Put the advantages (and the old log-probs) into the policy's data; returns the
    critic's data (rollout-time values and returns), empty without a critic."""
    for i, d in enumerate(data):
        d.loss_fn_inputs["advantages"] = _scatter(d, adv[i])
        if frozen["old"] is not None:
            d.loss_fn_inputs["logprobs"] = _scatter(d, frozen["old"][i])
    if returns is None:
        return []
    keep = ("target_tokens", "weights")
    return [
        Datum(
            d.model_input,
            {
                **{k: d.loss_fn_inputs[k] for k in keep},
                "values": _scatter(d, v),
                "returns": _scatter(d, r),
            },
        )
        for d, v, r in zip(data, frozen["values"], returns, strict=True)
    ]


def update(
    tr: Learning,
    data: list[Datum],
    frozen: dict[str, Any],
    adv: list[torch.Tensor],
    returns: list[torch.Tensor] | None,
) -> dict[str, float]:
    """`ppo_epochs` passes of mini-batches: each one `forward_backward` and one `optim_step`
    of the policy (and of the critic, on the value loss). Returns the step's learner metrics."""
    cfg, c = tr.cfg, tr.clients
    a, o = cfg.algorithm, cfg.optim
    critic_data = attach(data, frozen, adv, returns)
    beta, loss_fn = tr.kl.value, ALGORITHMS[a.name].loss
    steps = optimizer_steps(cfg, data)
    sums: dict[str, float] = defaultdict(float)
    out: dict[str, float] = {}
    # the learner's log-probs before the update: `old`, or (one optimizer step) its pass's
    learner = None if frozen["old"] is None else [o.tolist() for o in frozen["old"]]
    for mini in steps:
        fbs = [c.policy.forward_backward([data[i] for i in mini], loss_fn, loss_config(cfg, beta))]
        if learner is None and len(mini) == len(data):
            learner = [o["logprobs"] for o in fbs[0].result().loss_fn_outputs]
        if c.critic is not None:
            value_cfg = {"value_clip": a.value_clip}
            fbs.append(
                c.critic.forward_backward([critic_data[i] for i in mini], "value", value_cfg)
            )
        total = cfg.trainer.max_steps * len(steps)
        lr = scheduled_lr(o.lr, tr.optim_steps, o.warmup_steps, total, o.schedule, o.min_lr_ratio)
        adam = AdamParams(lr, *o.betas, weight_decay=o.weight_decay, grad_clip_norm=o.grad_clip)
        out = {**c.policy.optim_step(adam).result(), "lr": lr}
        if c.critic is not None:
            adam = AdamParams(
                lr * a.critic_lr / o.lr,
                *o.betas,
                weight_decay=o.weight_decay,
                grad_clip_norm=a.critic_grad_clip,
            )
            out["critic/grad_norm"] = c.critic.optim_step(adam).result()["grad_norm"]
        for fb in fbs:
            for k, v in fb.result().metrics.items():
                sums[k] += v
        tr.optim_steps += 1
    out |= update_metrics(data, frozen, adv, returns, sums, len(steps), beta)
    if learner is not None:
        out["rollout/logprob_diff"] = logprob_diff(data, learner)
    tr.kl.update(out["kl"], len(data))  # the controller moves on the KL this step measured
    return out


def update_metrics(
    data: list[Datum],
    frozen: dict[str, Any],
    adv: list[torch.Tensor],
    returns: list[torch.Tensor] | None,
    sums: dict[str, float],
    n_steps: int,
    beta: float,
) -> dict[str, float]:
    """Loss-token means of the learners' sums, and the advantages' (and critic's) health."""
    seen = max(1.0, sums["tokens"])
    adv_all = torch.cat(adv) if adv else torch.zeros(0)
    out = {k.removesuffix(":sum"): v / seen for k, v in sums.items() if k.endswith(":sum")}
    if "tis_weight" in out:
        out["tis/mean_weight"] = out.pop("tis_weight")
    out |= {
        "loss": sums["loss:sum"] / n_steps,
        "kl": sums["kl:sum"] / seen,
        "kl_coef": beta,
        "adv/mean": float(adv_all.mean()) if adv_all.numel() else 0.0,
        "adv/std": float(adv_all.std()) if adv_all.numel() > 1 else 0.0,
        "updates": float(n_steps),
        "trained_tokens": float(sum(d.n_loss for d in data)),
    }
    if returns is not None:
        values_B_T, mask_B_T = rows(frozen["values"])
        returns_B_T, _ = rows(returns)
        out["explained_variance"] = float(explained_variance(values_B_T, returns_B_T, mask_B_T))
        out["returns/mean"] = float(masked_mean(returns_B_T, mask_B_T.float()))
    return out


def stale_tokens(
    tr: Learning, kept: list[list[Trajectory]], trained: list[tuple[int, int]], data: list[Datum]
) -> list[torch.Tensor]:
    """Per datum, at its loss positions: True where weights older than the learner's
    sampled the token (the async schedule's in-flight and ahead-of-time samples)."""
    out = []
    for (k, g), d in zip(trained, data, strict=True):
        versions = kept[k][g].token_versions
        if len(versions) != d.n_loss:  # an engine that records no per-token versions
            versions = [tr.version] * d.n_loss
        out.append(torch.tensor([v < tr.version for v in versions], dtype=torch.bool))
    return out


def behaviour_weights(
    adv: list[torch.Tensor],
    stale: list[torch.Tensor],
    old: list[torch.Tensor],
    data: list[Datum],
    cap: float,
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Decoupled PPO (Hilton et al. 2022; AReaL): each stale token's advantage times
    w = min(pi_old / mu, cap), pi_old the learner's policy before the update, mu the sampling
    log-prob. The clipped surrogate is positively homogeneous in A, so this is the weight on
    the token's loss while the PPO ratio and clip stay against pi_old; fresh tokens keep w = 1."""
    out, weights = [], []
    for a_T, s_T, o_T, d in zip(adv, stale, old, data, strict=True):
        mu_T = torch.tensor(d.at_loss("sampler_logprobs"), dtype=o_T.dtype)
        w_T = torch.where(s_T, torch.exp(o_T - mu_T).clamp(max=cap), torch.ones_like(o_T))
        out.append(a_T * w_T.to(a_T.dtype))
        weights.append(w_T[s_T])
    w_N = torch.cat(weights)
    return out, {
        "async/behaviour_weight": float(w_N.mean()),
        "async/behaviour_capped": float((w_N >= cap).float().mean()),
        "async/stale_tokens": float(w_N.numel()),
    }


def train_step(
    tr: Learning,
    kept: list[list[Trajectory]],
    behaviour_cap: float | None = None,
    rewards_K_G: torch.Tensor | None = None,
) -> dict[str, float]:
    """The kept groups in, the policy (and critic) updated, the learner's metrics out. With
    `behaviour_cap` (the async schedule), tokens sampled by older weights get decoupled
    PPO's behaviour weight, unless `tis_cap` already weights every token. `rewards_K_G`:
    the groups' shaped rewards as `collect` returned them (shaped here when not given)."""
    data, trained = build_data(tr.cfg, kept)
    if not data:
        return {}
    stale = None
    if behaviour_cap is not None and tis_cap(tr.cfg) is None:
        stale = stale_tokens(tr, kept, trained, data)
        stale = stale if any(bool(s_T.any()) for s_T in stale) else None
    frozen = freeze(tr, data, len(optimizer_steps(tr.cfg, data)), stale is not None)
    if rewards_K_G is None:
        rewards_K_G = shaped_rewards(tr.cfg, kept)
    adv, returns = compute_advantages(tr, rewards_K_G, trained, data, frozen)
    extra: dict[str, float] = {}
    if stale is not None and behaviour_cap is not None:
        adv, extra = behaviour_weights(adv, stale, frozen["old"], data, behaviour_cap)  # type: ignore[arg-type]
    return update(tr, data, frozen, adv, returns) | extra


# -------------------------------------------------------------------- checkpoint


def save_checkpoint(
    tr: Learning,
    run: RunDir,
    step: int,
    tracker_run_id: str | None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Policy (and critic) state, RNGs and the loop's counters (and a schedule's `extra`
    state, JSON): written to a temp dir, then renamed — complete or absent."""
    tmp = run.checkpoint_tmp(step)
    saves = [tr.clients.policy.save_state(tmp)]
    if tr.clients.critic is not None:
        saves.append(tr.clients.critic.save_state(tmp))
    for f in saves:
        f.result()
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    torch.save(rng, tmp / "rng.pt")
    state = {
        "step": step,
        "version": tr.version,
        "optim_steps": tr.optim_steps,
        "kl_coef": tr.kl.value,
        "data_position": step * tr.cfg.rollout.batch_size,
        "tracker_run_id": tracker_run_id,
        "saved": utc_now(),
        **(extra or {}),
    }
    return run.commit_checkpoint(tmp, step, state, tr.cfg.trainer.keep_checkpoints)


def load_checkpoint(tr: Learning, ckpt: Path, state: dict[str, Any]) -> None:
    """Weights, optimizers and the loop's counters back from a checkpoint (the caller,
    `trainers.checkpoint.restore`, checks it counts and restores the RNGs)."""
    c = tr.clients
    if "optim_steps" not in state:  # written before the counters moved to the loop
        legacy = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=False)
        state = {**state, "optim_steps": legacy["opt_steps"]}
        state.setdefault("kl_coef", legacy.get("kl_coef", tr.kl.value))
    tr.version, tr.optim_steps = state["version"], state["optim_steps"]
    tr.kl.value = state.get("kl_coef", tr.kl.value)
    model = str((ckpt / "model").resolve())
    if (ckpt / "model" / "adapter_config.json").is_file():  # LoRA: the engine gets merged weights
        c.policy.load_state(ckpt).result()
        loads = [c.policy.sampling_client().load_weights(c.policy.learner.call("state_dict"), tr.version)]  # fmt: skip # the two branches read side by side
    else:
        loads = [c.policy.load_state(ckpt), c.policy.sampling_client().load_path(model, tr.version)]  # fmt: skip # the two branches read side by side
    if c.critic is not None:
        loads.append(c.critic.load_state(ckpt))
    for f in loads:
        f.result()
