"""Synchronous RL: generate, score, update, push weights — one step at a time.

    skyrl train --env sql                                  # GRPO, embedded defaults
    skyrl train --env math --set algorithm.name=ppo        # any algorithm, by configuration
    skyrl train --resume runs/<id>                         # continue from the last checkpoint

A step: take P tasks, run G episodes of each through the multi-turn agent loop, turn the
rewards into advantages (group-relative here; token-level ones for ppo and reinforce_pp
in the learner), update the policy with a clipped policy-gradient loss (`ppo_epochs`
passes of mini-batches), then send the new weights to the engine. Every step writes its metrics and
rollouts to the run directory; every `checkpoint_every` steps a complete checkpoint.

Everything random is a pure function of (seed, step, task, sample, turn), so a resumed
run repeats exactly the steps an uninterrupted one would have taken.
"""

from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from agents.agent_loop import Budget, demonstration, episode_seed, run_episodes
from agents.chat import ChatFormat
from agents.models import resolve_model
from agents.trajectory import Trajectory
from environments import registry
from tasks.task import Task, load_tasks
from trainers import stopping
from trainers.algorithms import (
    dr_grpo_advantages,
    dynamic_sampling_keep,
    grpo_advantages,
    rloo_advantages,
    turn_overlong_penalty,
)
from trainers.checkpoint import restore
from trainers.config import RunConfig
from trainers.evaluate import evaluate, is_correct
from trainers.learner import Sample
from trainers.progress import StepProgress
from trainers.rundir import RunDir, utc_now
from trainers.tracking import MLflowTracker, NullTracker, Tracker, default_uri, flatten

T = TypeVar("T")


def load_split(cfg: RunConfig, split: str) -> list[Task]:
    """Tasks of a split: from the user's task file (all of it if unsplit) or the bundled suite."""
    spec = registry.resolve(cfg.env.name, cfg.environments)
    if cfg.env.tasks:
        path = Path(cfg.env.tasks)
        if not path.is_absolute() and cfg.project_dir:
            path = Path(cfg.project_dir) / path
        tasks = load_tasks(path)
        if any(t.split for t in tasks):
            tasks = [t for t in tasks if t.split == split]
        return tasks
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
    runs_dir = run.path.parent
    uri = cfg.tracking.uri or default_uri(runs_dir)
    return MLflowTracker(
        uri, cfg.tracking.experiment, run.path.name, runs_dir / "mlartifacts", run_id
    )


def main(cfg: RunConfig, run: RunDir, resume: bool = False) -> dict[str, Any]:
    """Train; returns a summary (final step, eval before/after). Raises on fatal errors."""
    import ray

    from trainers.placement import place, start_ray

    # --------------------------------------------------------------------- setup
    threads = cfg.trainer.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    spec = registry.resolve(cfg.env.name, cfg.environments)
    project = Path(cfg.project_dir) if cfg.project_dir else None
    make_env = partial(
        registry.make_env, spec, project, max_turns=cfg.env.max_turns, **cfg.env.kwargs
    )
    train_tasks = load_split(cfg, cfg.env.train_split)
    if not train_tasks:
        raise ValueError(f"no tasks in split {cfg.env.train_split!r} for env {cfg.env.name!r}")
    eval_tasks = load_split(cfg, cfg.eval.split)[: cfg.eval.limit] if cfg.eval.limit else []
    model_path = resolve_model(cfg.model.name)
    progress = StepProgress(cfg.trainer.max_steps)
    progress.note(
        f"run {run.path}  env={cfg.env.name} model={cfg.model.name} tasks={len(train_tasks)}"
    )
    start_ray(cfg.ray.address)
    stop = stopping.install(progress.note)  # again: ray.init replaced the SIGTERM handler
    learner, engine = place(cfg, model_path)
    from transformers import AutoTokenizer

    chat = ChatFormat(AutoTokenizer.from_pretrained(str(model_path)))
    budget = Budget(cfg.rollout.max_new_tokens, cfg.rollout.max_total_tokens)
    pool = ThreadPoolExecutor(cfg.rollout.env_workers, thread_name_prefix="skyrl-env")
    r = cfg.rollout

    def sample(reqs: list[Any]) -> list[Any]:
        return ray.get(engine.generate.remote(reqs, r.temperature, r.top_p))

    def greedy(reqs: list[Any]) -> list[Any]:
        return ray.get(engine.generate.remote(reqs, 0.0, 1.0))

    # ------------------------------------------------------------- resume state
    done, version, tracker_run_id = 0, 0, None
    # the newest checkpoint that is complete and loads strictly; broken newer ones are named
    ckpt, state = restore(run, learner, engine, progress.note) if resume else (None, {})
    if ckpt is not None:
        done, version, tracker_run_id = state["step"], state["version"], state.get("tracker_run_id")
        progress.note(f"resumed from {ckpt.name} (step {done})")
    elif resume:
        tracker_run_id = run.read_status().get("tracker_run_id")
        progress.note("no checkpoint yet: starting from step 0")
    run.truncate_after(done)
    tracker = make_tracker(cfg, run, tracker_run_id)
    tracker.log_params(flatten(cfg.model_dump(mode="json")))
    run.set_status(
        state="running",
        step=done,
        max_steps=cfg.trainer.max_steps,
        tracker_run_id=tracker.run_id,
        env=cfg.env.name,
        model=cfg.model.name,
        error=None,
        started=run.status.get("started", utc_now()),
    )
    summary: dict[str, Any] = {"run_dir": str(run.path)}

    def run_eval(name: str, at_step: int) -> dict[str, Any]:
        progress.note(f"evaluating on {len(eval_tasks)} {cfg.eval.split} tasks (greedy)...")
        report, trajs = evaluate(greedy, make_env, chat, eval_tasks, budget, pool, cfg.trainer.seed)
        report.update(name=name, step=at_step, split=cfg.eval.split)
        run.write_eval(name, report)
        (run.path / "eval" / f"{name}.jsonl").write_text(
            "".join(json.dumps(t.to_record(at_step)) + "\n" for t in trajs), encoding="utf-8"
        )
        tracker.log_metrics({f"eval/{cfg.eval.split}/accuracy": report["accuracy"]}, at_step)
        progress.note(
            f"{cfg.eval.split} accuracy at step {at_step}: {report['accuracy']:.1%} ({report['n']} tasks)"
        )
        return report

    if eval_tasks and cfg.eval.before:
        before = run.path / "eval" / "before.json"
        summary["eval_before"] = (
            json.loads(before.read_text()) if before.exists() else run_eval("before", 0)
        )

    # ------------------------------------------------------ supervised warm-up
    # Before step 1, when asked: a checkpoint "step-000000" follows it, so a resumed run
    # never repeats it; its report is eval/warmup.json.
    reference_dir = run.path / "warmup" / "reference"
    if cfg.warmup.sft_steps and ckpt is None:
        warm_up(cfg, run, learner, make_env, chat, train_tasks, progress, tracker)
        ray.get(learner.end_warmup.remote(str(reference_dir.resolve())))
        ray.get(engine.update_weights.remote(learner.state_dict.remote(), version))
        if eval_tasks:
            summary["eval_warmup"] = run_eval("warmup", 0)
        save_checkpoint(run, learner, 0, version, 0, tracker.run_id, cfg.trainer.keep_checkpoints)
    elif cfg.warmup.sft_steps:
        if cfg.algorithm.kl_coef > 0:
            ray.get(learner.load_reference.remote(str(reference_dir.resolve())))
        saved = run.path / "eval" / "warmup.json"
        if saved.exists():
            summary["eval_warmup"] = json.loads(saved.read_text())

    a = cfg.algorithm
    want_groups = a.train_batch_size or r.batch_size

    def collect_groups(step: int) -> tuple[list[Trajectory], list[list[Trajectory]]]:
        """Every episode of the step, and the groups kept for the update (up to want_groups).

        Without dynamic sampling that is one round of P tasks, all kept. With it, groups whose
        rewards are all equal are dropped and further rounds (new tasks, new seeds; a pure
        function of the step, so resume repeats them) refill the batch, up to a cap.
        """
        trajs: list[Trajectory] = []
        kept: list[list[Trajectory]] = []
        rounds = a.max_sample_rounds if a.dynamic_sampling else 1
        for k in range(rounds):
            tasks_P = batch_tasks(train_tasks, cfg.trainer.seed + 7919 * k, step, r.batch_size)
            first = k * r.batch_size  # group ids and seeds continue across rounds
            flat = [t for t in tasks_P for _ in range(r.group_size)]
            groups = [first + p for p in range(len(tasks_P)) for _ in range(r.group_size)]
            seeds = [
                episode_seed(cfg.trainer.seed, step, gid, g)
                for gid in sorted(set(groups))
                for g in range(r.group_size)
            ]
            new = run_episodes(sample, make_env, chat, flat, groups, seeds, budget, pool)
            trajs += new
            for p in range(len(tasks_P)):
                group = new[p * r.group_size : (p + 1) * r.group_size]
                rewards_G = torch.tensor([[shaped_reward(cfg, t) for t in group]])
                if not a.dynamic_sampling or bool(dynamic_sampling_keep(rewards_G)[0]):
                    kept.append(group)
            if len(kept) >= want_groups:
                break
        return trajs, kept[:want_groups]

    # ---------------------------------------------------------------- the loop
    # Ctrl-C (SIGTERM, SIGHUP) finishes the current step and checkpoints it; a second one
    # stops at once. A flag, not an exception: the main thread may be inside ray.get.
    stop.graceful = True
    progress.start(done)
    step_times: list[float] = []
    for step in range(done + 1, cfg.trainer.max_steps + 1):
        t_step = time.perf_counter()
        # 1. rollouts: G episodes for each of P tasks (DAPO: more rounds until enough groups vary)
        trajs, kept = collect_groups(step)
        t_gen = time.perf_counter() - t_step

        # 2. advantages from the (shaped) rewards of the kept groups; a failed episode keeps
        #    its place in its group's baseline (reward 0) but carries no loss
        rewards_K_G = torch.tensor([[shaped_reward(cfg, t) for t in g] for g in kept])
        adv_K_G = sequence_advantages(cfg, rewards_K_G)
        batch = [
            Sample(t.token_ids, t.loss_mask, float(adv), t.prompt_len, float(rew), t.logprobs)
            for g, adv_G, rew_G in zip(kept, adv_K_G, rewards_K_G, strict=True)
            for t, adv, rew in zip(g, adv_G, rew_G, strict=True)
            if t.error is None and t.response_len > 0 and not (a.overlong_filter and t.cut_off)
        ]

        # 3. update, then push the new weights to the engine
        t0 = time.perf_counter()
        learn = ray.get(learner.train_step.remote(batch)) if batch else {}
        t_train = time.perf_counter() - t0
        t0 = time.perf_counter()
        version += 1
        ray.get(engine.update_weights.remote(learner.state_dict.remote(), version))
        t_sync = time.perf_counter() - t0

        # 4. record
        metrics = step_metrics(trajs, r.group_size, learn)
        metrics["groups/kept"] = float(len(kept))
        t_all = time.perf_counter() - t_step
        step_times.append(t_all)
        metrics.update(
            {
                "time/generate": t_gen,
                "time/train": t_train,
                "time/sync": t_sync,
                "time/step": t_all,
                "perf/episodes_per_s": len(trajs) / t_all,
                "perf/tokens_per_s": sum(t.response_len for t in trajs) / max(t_gen, 1e-9),
                "policy_version": version,
            }
        )
        if (
            eval_tasks
            and cfg.eval.every
            and step % cfg.eval.every == 0
            and step < cfg.trainer.max_steps
        ):
            report = run_eval(f"step-{step:06d}", step)
            metrics["eval/accuracy"] = report["accuracy"]
            metrics["eval/mean_reward"] = report["mean_reward"]
        run.write_rollouts(step, [t.to_record(step) for t in trajs])
        run.append_metrics({"step": step, "time": time.time(), **metrics})
        tracker.log_metrics(metrics, step)
        run.set_status(step=step, last_reward=metrics["reward/mean"])
        eta = (cfg.trainer.max_steps - step) * sum(step_times[-5:]) / len(step_times[-5:])
        progress.step(step, metrics, eta)

        # 5. checkpoint: written to a temp dir, then renamed — complete or absent
        last = step == cfg.trainer.max_steps
        if step % cfg.trainer.checkpoint_every == 0 or last or stop.is_set():
            save_checkpoint(
                run,
                learner,
                step,
                version,
                r.batch_size,
                tracker.run_id,
                cfg.trainer.keep_checkpoints,
            )
        if stop.is_set():
            progress.close()
            tracker.close("KILLED")
            raise KeyboardInterrupt
    stop.graceful = False  # from here (the final eval) a signal stops at once
    progress.close()

    # ------------------------------------------------------------------ finish
    if eval_tasks and cfg.eval.after:
        summary["eval_after"] = run_eval("after", cfg.trainer.max_steps)
    final = run.latest_checkpoint()
    if final is not None:
        tracker.log_artifacts(final / "model", "model")
    run.set_status(state="finished", step=cfg.trainer.max_steps, finished=utc_now())
    tracker.close("FINISHED")
    pool.shutdown()
    summary["final_checkpoint"] = str(final) if final else None
    return summary


def warm_up(
    cfg: RunConfig,
    run: RunDir,
    learner: Any,
    make_env: Any,
    chat: ChatFormat,
    tasks: list[Task],
    progress: StepProgress,
    tracker: Tracker,
) -> None:
    """`warmup.sft_steps` supervised steps on the environment's reference answers for the
    train tasks, laid out exactly as an episode's first turn. Losses go to
    warmup/metrics.jsonl and to the tracker as `warmup/loss`."""
    import ray

    w, seed = cfg.warmup, cfg.trainer.seed
    examples = [
        d
        for i, t in enumerate(tasks)
        if (d := demonstration(make_env, chat, t, episode_seed(seed, "warmup", i))) is not None
    ]
    if not examples:
        raise ValueError(
            f"env {cfg.env.name!r} writes no reference answers for its tasks, so there is "
            "nothing to warm up on; set warmup.sft_steps=0"
        )
    progress.note(
        f"warm-up: {w.sft_steps} supervised steps of {w.batch_size} on "
        f"{len(examples)} reference answers (lr {w.lr:g})..."
    )
    out = run.path / "warmup"
    out.mkdir(exist_ok=True)
    t_start = time.perf_counter()
    with (out / "metrics.jsonl").open("w", encoding="utf-8") as log:
        for k in range(1, w.sft_steps + 1):
            batch = [
                Sample(ids, mask, prompt_len=p)
                for ids, mask, p in batch_tasks(examples, seed + 104729, k, w.batch_size)
            ]
            m = ray.get(learner.sft_step.remote(batch, w.lr))
            log.write(json.dumps({"step": k, "time": time.time(), **m}) + "\n")
            log.flush()
            tracker.log_metrics({"warmup/loss": m["sft_loss"]}, k)
            if k % 10 == 0 or k == w.sft_steps:
                elapsed = time.perf_counter() - t_start
                eta = elapsed / k * (w.sft_steps - k)
                progress.note(
                    f"warm-up {k}/{w.sft_steps} loss {m['sft_loss']:.3f} "
                    f"({elapsed:.0f}s, ETA {eta:.0f}s)"
                )


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


def sequence_advantages(cfg: RunConfig, rewards_K_G: torch.Tensor) -> torch.Tensor:
    """One advantage per episode for the group estimators; zeros for ppo and reinforce_pp,
    whose token-level advantages the learner computes (they need the KL and the critic)."""
    a = cfg.algorithm
    if rewards_K_G.numel() == 0:
        return rewards_K_G
    if a.name == "rloo":
        return rloo_advantages(rewards_K_G)
    if a.name == "dr_grpo":
        return dr_grpo_advantages(rewards_K_G)
    if a.name in ("grpo", "dapo", "gspo"):
        return grpo_advantages(rewards_K_G, a.normalize_std)
    return torch.zeros_like(rewards_K_G)


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


def save_checkpoint(
    run: RunDir,
    learner: Any,
    step: int,
    version: int,
    batch_size: int,
    tracker_run_id: str | None,
    keep: int,
) -> Path:
    import ray

    tmp = run.checkpoint_tmp(step)
    ray.get(learner.save.remote(str(tmp.resolve())))  # actors may run in another cwd
    torch.save(
        {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
        },
        tmp / "rng.pt",
    )
    state = {
        "step": step,
        "version": version,
        "data_position": step * batch_size,
        "tracker_run_id": tracker_run_id,
        "saved": utc_now(),
    }
    return run.commit_checkpoint(tmp, step, state, keep)
