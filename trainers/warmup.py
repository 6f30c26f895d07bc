"""The supervised warm-up ("cold start") before RL: cross-entropy on the environment's
reference answers, through the same training client as RL."""

from __future__ import annotations

import json
import time
from typing import Any

from agents.agent_loop import demonstration, episode_seed
from agents.chat import ChatFormat
from tasks.task import Task
from trainers.client import AdamParams, Datum, TrainingClient
from trainers.config import RunConfig
from trainers.progress import StepProgress
from trainers.rundir import RunDir
from trainers.steps import batch_tasks
from trainers.tracking import Tracker


def warm_up(
    cfg: RunConfig,
    run: RunDir,
    policy: TrainingClient,
    make_env: Any,
    chat: ChatFormat,
    tasks: list[Task],
    progress: StepProgress,
    tracker: Tracker,
) -> None:
    """`warmup.sft_steps` supervised steps on the environment's reference answers for the
    train tasks, laid out exactly as an episode's first turn. Losses go to
    warmup/metrics.jsonl and to the tracker as `warmup/loss`."""
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
            data = [
                Datum.from_sequence(ids, mask, p)
                for ids, mask, p in batch_tasks(examples, seed + 104729, k, w.batch_size)
            ]
            fb = policy.forward_backward(data, "cross_entropy", {"loss_agg": "token-mean"})
            o = cfg.optim
            adam = AdamParams(
                w.lr, *o.betas, weight_decay=o.weight_decay, grad_clip_norm=o.grad_clip
            )
            step = policy.optim_step(adam).result()
            res = fb.result().metrics
            m = {
                "sft_loss": res["loss:sum"],
                "grad_norm": step["grad_norm"],
                "tokens": res["tokens"],
            }
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
