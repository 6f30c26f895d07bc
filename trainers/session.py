"""A training run around its loop, for both schedules (trainers/sync.py, trainers/async_loop.py).

    ses = prepare(cfg, run, resume)      # clients, resume, tracker, eval before, warm-up
    ses.start()
    for step in range(ses.done + 1, cfg.trainer.max_steps + 1):
        ...                              # the schedule's own: sample, train, push weights
        ses.check_episodes(step, trajs)  # every episode failed: stop with the first error
        ses.record(step, metrics, records, t_step)  # eval, rollouts, metrics, status, console
        ses.checkpoint_or_stop(step)
    return ses.finish()                  # eval after, the final model, status

Each schedule keeps only its scheduling (what a step waits for, when weights move, what it
times); everything before the first step, after the last one and at the end of each one is
here, once. The step's pieces (`collect`, `train_step`, checkpoints) are trainers/steps.py's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from agents import engines
from agents.agent_loop import Budget
from agents.chat import ChatFormat
from agents.evaluate import evaluate
from agents.models import resolve_model
from agents.tokenizer import load_tokenizer
from agents.trajectory import Trajectory
from environments import registry
from tasks.task import Task
from trainers import pass_rate, placement, stopping
from trainers.algorithms import AdaptiveKLController, FixedKLController
from trainers.checkpoint import refuse_when_none_counts, restore
from trainers.config import RunConfig
from trainers.placement import place
from trainers.progress import StepProgress, phase
from trainers.rundir import RunDir, utc_now
from trainers.steps import (
    Acting,
    EpisodesFailed,
    Learning,
    check_failures,
    load_checkpoint,
    load_split,
    make_tracker,
    no_signal_warning,
    save_checkpoint,
)
from trainers.tracking import Tracker, flatten
from trainers.warmup import warm_up


@dataclass
class Session:
    """A run ready for its loop: the two sides of a step, where the results go (run
    directory, tracker, terminal), the step to continue after and the restored checkpoint's
    state; and what the per-step tail remembers from step to step."""

    ac: Acting
    tr: Learning
    run: RunDir
    tracker: Tracker
    progress: StepProgress
    eval_tasks: list[Task]
    stop: stopping.Stop
    summary: dict[str, Any]
    """What `finish` returns: the run directory, the evaluations, the final checkpoint."""
    done: int
    """The last step already trained (0 on a fresh run)."""
    state: dict[str, Any]
    """The restored checkpoint's trainer state ({} without one)."""
    step_times: list[float] = field(default_factory=list)
    """Seconds of each step this process ran (the ETA's last five)."""
    zero_variance: list[float] = field(default_factory=list)
    """`groups/zero_variance` of each step this process ran."""
    warned_no_signal: bool = False

    def evaluate(self, name: str, at_step: int) -> dict[str, Any]:
        """Greedy episodes on the eval split; the report goes to eval/NAME.json(l)."""
        ac, split = self.ac, self.ac.cfg.eval.split
        sampler = self.tr.clients.policy.sampling_client()
        greedy = lambda reqs: sampler.generate(reqs, 0.0, 1.0).result()  # noqa: E731
        self.progress.note(f"evaluating on {len(self.eval_tasks)} {split} tasks (greedy)...")
        bar = self.progress.eval_bar(len(self.eval_tasks), split)
        tasks, seed = self.eval_tasks, ac.cfg.trainer.seed
        report, trajs = evaluate(
            greedy, ac.make_env, ac.chat, tasks, ac.budget, ac.pool, seed, on_done=bar
        )
        bar.done()
        report.update(name=name, step=at_step, split=split)
        self.run.write_eval(name, report)
        (self.run.path / "eval" / f"{name}.jsonl").write_text(
            "".join(json.dumps(t.to_record(at_step)) + "\n" for t in trajs), encoding="utf-8"
        )
        self.tracker.log_metrics({f"eval/{split}/accuracy": report["accuracy"]}, at_step)
        when = {
            "before": "before training",
            "warmup": "after the warm-up",
            "after": "after training",
        }
        self.progress.note(  # before and warm-up are both step 0: each says which it is
            f"{split} accuracy {when.get(name, f'at step {at_step}')}: {report['accuracy']:.1%} "
            f"({report['n']} tasks)"
        )
        return report

    # ----------------------------------------------------------- around each step

    def start(self) -> None:
        """Into the loop. Ctrl-C (SIGTERM, SIGHUP) now finishes the current step and
        checkpoints it; a second one stops at once. A flag, not an exception: the main
        thread may be waiting on a backend."""
        self.stop.graceful = True
        self.progress.start(self.done)

    def check_episodes(self, step: int, trajs: list[Trajectory]) -> None:
        """A warning when too many of the step's episodes failed; when every one did, not a
        training step: its rollouts are written (for skyrl watch) and EpisodesFailed raised."""
        try:
            if warning := check_failures(trajs, step, self.ac.cfg.trainer.max_failed_fraction):
                self.progress.note(warning)
        except EpisodesFailed:
            self.run.write_rollouts(step, [t.to_record(step) for t in trajs])
            raise

    def record(
        self, step: int, metrics: dict[str, float], records: list[dict[str, Any]], t_step: float
    ) -> None:
        """The step's results out: an evaluation every `eval.every` steps (its numbers join
        `metrics`), the rollouts, metrics.jsonl, the tracker, status.json, the console line."""
        cfg, run = self.ac.cfg, self.run
        self.step_times.append(t_step)
        every = cfg.eval.every
        if self.eval_tasks and every and step % every == 0 and step < cfg.trainer.max_steps:
            report = self.evaluate(f"step-{step:06d}", step)
            metrics["eval/accuracy"] = report["accuracy"]
            metrics["eval/mean_reward"] = report["mean_reward"]
        run.write_rollouts(step, records)
        run.append_metrics({"step": step, "time": time.time(), **metrics})
        self.tracker.log_metrics(metrics, step)
        run.set_status(step=step, last_reward=metrics["reward/mean"])
        self.zero_variance.append(metrics["groups/zero_variance"])
        if not self.warned_no_signal and (warning := no_signal_warning(self.zero_variance, step)):
            self.progress.note(warning)  # once a run: the advice does not change from step to step
            self.warned_no_signal = True
        recent = self.step_times[-5:]
        self.progress.step(
            step, metrics, (cfg.trainer.max_steps - step) * sum(recent) / len(recent)
        )

    def checkpoint_or_stop(
        self, step: int, extra: Callable[[bool], dict[str, Any]] | None = None
    ) -> None:
        """A checkpoint every `checkpoint_every` steps, after the last one and when a signal
        asked to stop (with the schedule's `extra(last)` state); then stop, if asked."""
        cfg = self.ac.cfg
        last = step == cfg.trainer.max_steps
        if step % cfg.trainer.checkpoint_every == 0 or last or self.stop.is_set():
            state = extra(last) if extra else None
            save_checkpoint(self.tr, self.run, step, self.tracker.run_id, state)
        if self.stop.is_set():
            self.progress.close()
            self.tracker.close("KILLED")
            raise KeyboardInterrupt

    def finish(self) -> dict[str, Any]:
        """After the last step: eval after, the final model, final status; returns the
        run's summary."""
        cfg, run, tracker, summary = self.ac.cfg, self.run, self.tracker, self.summary
        self.stop.graceful = False  # from here (the final eval) a signal stops at once
        self.progress.close()
        if self.eval_tasks and cfg.eval.after:
            summary["eval_after"] = self.evaluate("after", cfg.trainer.max_steps)
        final = run.latest_checkpoint()
        if (
            cfg.learner.lora.rank
        ):  # checkpoints hold the adapter: the model, merged, as an HF folder
            self.tr.clients.policy.save_weights_for_sampler(run.path / "model").result()
            tracker.log_artifacts(run.path / "model", "model")
            summary["final_model"] = str(run.path / "model")
        elif final is not None:
            tracker.log_artifacts(final / "model", "model")
        run.set_status(state="finished", step=cfg.trainer.max_steps, finished=utc_now())
        tracker.close("FINISHED")
        self.ac.pool.shutdown()
        placement.give_back()  # warm workers (trainers/warm.py) go back for the next run
        summary["final_checkpoint"] = str(final) if final else None
        return summary


# --------------------------------------------------------------------------- setup


def prepare(cfg: RunConfig, run: RunDir, resume: bool = False) -> Session:
    """Everything before the first step, for every schedule: clients, resume, tracker,
    eval before, supervised warm-up."""
    torch.set_num_threads(engines.torch_threads(cfg.trainer.threads))
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
    if resume:
        refuse_when_none_counts(run, progress.note)  # in seconds, before the workers start
    clients = place(cfg, model_path)
    stop = stopping.install(progress.note)  # again: ray.init replaced the SIGTERM handler
    chat = ChatFormat(load_tokenizer(model_path))
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
    summary: dict[str, Any] = {"run_dir": str(run.path)}
    ses = Session(ac, tr, run, tracker, progress, eval_tasks, stop, summary, done, state)
    if eval_tasks and cfg.eval.before:
        before = run.path / "eval" / "before.json"
        summary["eval_before"] = (
            json.loads(before.read_text()) if before.exists() else ses.evaluate("before", 0)
        )
    _warm_up(ses, ckpt)
    return ses


def _warm_up(ses: Session, ckpt: Path | None) -> None:
    """The supervised warm-up before step 1, when asked. A checkpoint "step-000000" follows
    it, so a resumed run (`ckpt`, the checkpoint it resumed from) never repeats it. The RL
    optimizer starts fresh after it; with a KL term, the reference becomes the warmed-up
    policy (saved for resume). Then the pass-rate filter, when asked."""
    cfg, run, tr, clients = ses.ac.cfg, ses.run, ses.tr, ses.tr.clients
    reference_dir = str((run.path / "warmup" / "reference").resolve())
    resumed = ckpt is not None
    if cfg.warmup.sft_steps and not resumed:
        ac = ses.ac
        warm_up(
            cfg,
            run,
            clients.policy,
            ac.make_env,
            ac.chat,
            ac.train_tasks,
            ses.progress,
            ses.tracker,
        )
        clients.policy.reset_optimizer().result()
        if clients.reference is not None:
            clients.policy.save_weights_for_sampler(reference_dir).result()
            clients.reference.load_path(reference_dir, 0).result()
        clients.policy.save_weights_and_get_sampling_client(tr.version)
        if ses.eval_tasks:
            ses.summary["eval_warmup"] = ses.evaluate("warmup", 0)
        ckpt = save_checkpoint(tr, run, 0, ses.tracker.run_id)
    elif cfg.warmup.sft_steps:
        if clients.reference is not None:
            clients.reference.load_path(reference_dir, 0).result()
        saved = run.path / "eval" / "warmup.json"
        if saved.exists():
            ses.summary["eval_warmup"] = json.loads(saved.read_text())
    if cfg.warmup.pass_rate_samples:
        sampler = clients.policy.sampling_client()
        pass_rate.filter_train_set(ses.ac, sampler, run.path / "warmup", ckpt, ses.progress)
