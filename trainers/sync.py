"""Synchronous RL: sample, score, update, push weights — one step at a time.

    skyrl train --env sql                                  # GRPO, embedded defaults
    skyrl train --env math --set algorithm.name=ppo        # any algorithm, by configuration
    skyrl train --resume runs/<id>                         # continue from the last checkpoint

The loop talks to a training client and a sampling client only (Tinker's shape; backends
and their placement are trainers/placement.py's business; docs/architecture.md). A step:
take P tasks, run G episodes of each through the multi-turn agent loop (`collect`), then
`train_step`: score what stays fixed for the step (old log-probs, the reference's, the
critic's values), turn rewards into advantages with the algorithm's estimator, and run
`ppo_epochs` passes of `forward_backward` + `optim_step` per mini-batch; then push the new
weights to the sampler. Every step writes its metrics and rollouts; every
`checkpoint_every` steps a complete checkpoint. The pieces are top-level functions in
trainers/steps.py, which an async schedule reuses.

Everything random is a pure function of (seed, step, task, sample, turn), so a resumed
run repeats exactly the steps an uninterrupted one would have taken.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from agents.agent_loop import Budget
from agents.chat import ChatFormat
from agents.evaluate import evaluate
from agents.models import resolve_model
from environments import registry
from tasks.task import Task
from trainers import stopping
from trainers.algorithms import AdaptiveKLController, FixedKLController
from trainers.checkpoint import restore
from trainers.config import RunConfig
from trainers.placement import place
from trainers.progress import StepProgress, phase
from trainers.rundir import RunDir, utc_now
from trainers.steps import (
    Acting,
    EpisodesFailed,
    Learning,
    check_failures,
    collect,
    load_checkpoint,
    load_split,
    make_tracker,
    no_signal_warning,
    save_checkpoint,
    step_metrics,
    train_step,
)
from trainers.tracking import Tracker, flatten
from trainers.warmup import warm_up


@dataclass
class Record:
    """Where a run's results go: the run directory, the tracker, the terminal."""

    run: RunDir
    tracker: Tracker
    progress: StepProgress
    eval_tasks: list[Task]


def run_eval(ac: Acting, tr: Learning, rec: Record, name: str, at_step: int) -> dict[str, Any]:
    """Greedy episodes on the eval split; the report goes to eval/NAME.json(l)."""
    split = ac.cfg.eval.split
    sampler = tr.clients.policy.sampling_client()
    greedy = lambda reqs: sampler.generate(reqs, 0.0, 1.0).result()  # noqa: E731
    rec.progress.note(f"evaluating on {len(rec.eval_tasks)} {split} tasks (greedy)...")
    bar = rec.progress.eval_bar(len(rec.eval_tasks), split)
    report, trajs = evaluate(
        greedy, ac.make_env, ac.chat, rec.eval_tasks, ac.budget, ac.pool, ac.cfg.trainer.seed,
        on_done=bar,
    )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    bar.done()
    report.update(name=name, step=at_step, split=split)
    rec.run.write_eval(name, report)
    (rec.run.path / "eval" / f"{name}.jsonl").write_text(
        "".join(json.dumps(t.to_record(at_step)) + "\n" for t in trajs), encoding="utf-8"
    )
    rec.tracker.log_metrics({f"eval/{split}/accuracy": report["accuracy"]}, at_step)
    when = {"before": "before training", "warmup": "after the warm-up", "after": "after training"}
    rec.progress.note(  # before and warm-up are both step 0: each says which it is
        f"{split} accuracy {when.get(name, f'at step {at_step}')}: {report['accuracy']:.1%} "
        f"({report['n']} tasks)"
    )
    return report


# --------------------------------------------------------------------------- setup


@dataclass
class Session:
    """A run ready for its loop (what `prepare` built): the two sides of a step, where the
    results go, the step to continue after and the restored checkpoint's state."""

    ac: Acting
    tr: Learning
    rec: Record
    stop: Any
    summary: dict[str, Any]
    done: int
    state: dict[str, Any]


def prepare(cfg: RunConfig, run: RunDir, resume: bool = False) -> Session:
    """Everything before the first step, for every schedule: clients, resume, tracker,
    eval before, supervised warm-up."""
    torch.set_num_threads(cfg.trainer.threads or os.cpu_count() or 1)
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
    clients = place(cfg, model_path)
    stop = stopping.install(progress.note)  # again: ray.init replaced the SIGTERM handler
    from transformers import AutoTokenizer

    chat = ChatFormat(AutoTokenizer.from_pretrained(str(model_path)))
    budget = Budget(cfg.rollout.max_new_tokens, cfg.rollout.max_total_tokens)
    pool = ThreadPoolExecutor(cfg.rollout.env_workers, thread_name_prefix="skyrl-env")
    ac = Acting(cfg, train_tasks, make_env, chat, budget, pool)
    a = cfg.algorithm
    kl = (
        AdaptiveKLController(a.kl_coef, a.kl_target, a.kl_horizon)
        if a.kl_target
        else FixedKLController(a.kl_coef)
    )
    tr = Learning(cfg, clients, kl)

    # ---------------------------------------------------------- resume state
    done, tracker_run_id = 0, None
    # the newest checkpoint that is complete and loads strictly; broken newer ones are named
    load = partial(load_checkpoint, tr)
    ckpt, state = restore(run, load, progress.note) if resume else (None, {})
    if ckpt is not None:
        done, tracker_run_id = state["step"], state.get("tracker_run_id")
        progress.note(f"resumed from {ckpt.name} (step {done})")
    elif resume:
        tracker_run_id = run.read_status().get("tracker_run_id")
        progress.note("no checkpoint yet: starting from step 0")
    run.truncate_after(done)
    phase("opening the tracking store")
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
    rec = Record(run, tracker, progress, eval_tasks)
    summary: dict[str, Any] = {"run_dir": str(run.path)}
    if eval_tasks and cfg.eval.before:
        before = run.path / "eval" / "before.json"
        summary["eval_before"] = (
            json.loads(before.read_text())
            if before.exists()
            else run_eval(ac, tr, rec, "before", 0)
        )

    # -------------------------------------------------- supervised warm-up
    # Before step 1, when asked: a checkpoint "step-000000" follows it, so a resumed run
    # never repeats it. The RL optimizer starts fresh after it; with a KL term, the
    # reference becomes the warmed-up policy (saved for resume).
    reference_dir = str((run.path / "warmup" / "reference").resolve())
    if cfg.warmup.sft_steps and ckpt is None:
        warm_up(cfg, run, clients.policy, make_env, chat, train_tasks, progress, tracker)
        clients.policy.reset_optimizer().result()
        if clients.reference is not None:
            clients.policy.save_weights_for_sampler(reference_dir).result()
            clients.reference.load_path(reference_dir, 0).result()
        clients.policy.save_weights_and_get_sampling_client(tr.version)
        if eval_tasks:
            summary["eval_warmup"] = run_eval(ac, tr, rec, "warmup", 0)
        save_checkpoint(tr, run, 0, tracker.run_id)
    elif cfg.warmup.sft_steps:
        if clients.reference is not None:
            clients.reference.load_path(reference_dir, 0).result()
        saved = run.path / "eval" / "warmup.json"
        if saved.exists():
            summary["eval_warmup"] = json.loads(saved.read_text())

    return Session(ac, tr, rec, stop, summary, done, state)


def finish(ses: Session) -> dict[str, Any]:
    """After the last step: eval after, final status; returns the run's summary."""
    cfg, run, tracker, summary = ses.ac.cfg, ses.rec.run, ses.rec.tracker, ses.summary
    ac, tr, rec = ses.ac, ses.tr, ses.rec
    if rec.eval_tasks and cfg.eval.after:
        summary["eval_after"] = run_eval(ac, tr, rec, "after", cfg.trainer.max_steps)
    final = run.latest_checkpoint()
    if cfg.learner.lora.rank:  # checkpoints hold the adapter: the model, merged, as an HF folder
        tr.clients.policy.save_weights_for_sampler(run.path / "model").result()
        tracker.log_artifacts(run.path / "model", "model")
        summary["final_model"] = str(run.path / "model")
    elif final is not None:
        tracker.log_artifacts(final / "model", "model")
    run.set_status(state="finished", step=cfg.trainer.max_steps, finished=utc_now())
    tracker.close("FINISHED")
    ac.pool.shutdown()
    summary["final_checkpoint"] = str(final) if final else None
    return summary


# --------------------------------------------------------------------------- main


def main(cfg: RunConfig, run: RunDir, resume: bool = False) -> dict[str, Any]:
    """Train; returns a summary (final step, eval before/after). Raises on fatal errors."""
    ses = prepare(cfg, run, resume)
    ac, tr, rec, stop, done = ses.ac, ses.tr, ses.rec, ses.stop, ses.done
    run, progress, tracker, clients = rec.run, rec.progress, rec.tracker, tr.clients
    eval_tasks = rec.eval_tasks

    # ------------------------------------------------------------- the loop
    # Ctrl-C (SIGTERM, SIGHUP) finishes the current step and checkpoints it; a second one
    # stops at once. A flag, not an exception: the main thread may be waiting on a backend.
    stop.graceful = True
    progress.start(done)
    step_times: list[float] = []
    zero_variance: list[float] = []  # groups/zero_variance of each step this process ran
    warned_no_signal = False
    sampler = clients.policy.sampling_client()
    for step in range(done + 1, cfg.trainer.max_steps + 1):
        t_step = time.perf_counter()
        # 1. rollouts: G episodes for each of P tasks (DAPO: more rounds until enough groups vary)
        trajs, kept = collect(ac, sampler, step)
        t_gen = time.perf_counter() - t_step
        try:  # every episode failed: not a training step, stop with the first error
            if warning := check_failures(trajs, step, cfg.trainer.max_failed_fraction):
                progress.note(warning)
        except EpisodesFailed:
            run.write_rollouts(step, [t.to_record(step) for t in trajs])  # for skyrl watch
            raise

        # 2. data, the step's fixed scores, advantages (client side), optimizer steps
        t0 = time.perf_counter()
        learn = train_step(tr, kept)
        t_train = time.perf_counter() - t0

        # 3. push the new weights to the sampler
        t0 = time.perf_counter()
        tr.version += 1
        sampler = clients.policy.save_weights_and_get_sampling_client(tr.version)
        t_sync = time.perf_counter() - t0

        # 4. record
        metrics = step_metrics(trajs, cfg.rollout.group_size, learn)
        t_all = time.perf_counter() - t_step
        step_times.append(t_all)
        metrics |= {
            "groups/kept": float(len(kept)),
            "time/generate": t_gen,
            "time/train": t_train,
            "time/sync": t_sync,
            "time/step": t_all,
            "perf/episodes_per_s": len(trajs) / t_all,
            "perf/tokens_per_s": sum(t.response_len for t in trajs) / max(t_gen, 1e-9),
            "policy_version": tr.version,
        }
        if (
            eval_tasks
            and cfg.eval.every
            and step % cfg.eval.every == 0
            and step < cfg.trainer.max_steps
        ):
            report = run_eval(ac, tr, rec, f"step-{step:06d}", step)
            metrics["eval/accuracy"] = report["accuracy"]
            metrics["eval/mean_reward"] = report["mean_reward"]
        run.write_rollouts(step, [t.to_record(step) for t in trajs])
        run.append_metrics({"step": step, "time": time.time(), **metrics})
        tracker.log_metrics(metrics, step)
        run.set_status(step=step, last_reward=metrics["reward/mean"])
        zero_variance.append(metrics["groups/zero_variance"])
        if not warned_no_signal and (warning := no_signal_warning(zero_variance, step)):
            progress.note(warning)  # once a run: the advice does not change from step to step
            warned_no_signal = True
        eta = (cfg.trainer.max_steps - step) * sum(step_times[-5:]) / len(step_times[-5:])
        progress.step(step, metrics, eta)

        # 5. checkpoint
        if (
            step % cfg.trainer.checkpoint_every == 0
            or step == cfg.trainer.max_steps
            or stop.is_set()
        ):
            save_checkpoint(tr, run, step, tracker.run_id)
        if stop.is_set():
            progress.close()
            tracker.close("KILLED")
            raise KeyboardInterrupt
    stop.graceful = False  # from here (the final eval) a signal stops at once
    progress.close()
    return finish(ses)
