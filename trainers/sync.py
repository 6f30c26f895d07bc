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
weights to the sampler. The step's pieces are trainers/steps.py's; what comes before the
first step (clients, resume, eval before, warm-up), the end of every step (its metrics and
rollouts written; a complete checkpoint every `checkpoint_every` steps) and what comes
after the last one are trainers/session.py's, shared with the async schedule
(trainers/async_loop.py).

Everything random is a pure function of (seed, step, task, sample, turn), so a resumed
run repeats exactly the steps an uninterrupted one would have taken.
"""

from __future__ import annotations

import time
from typing import Any

from trainers.config import RunConfig
from trainers.rundir import RunDir
from trainers.session import prepare
from trainers.steps import collect, step_metrics, train_step


def main(cfg: RunConfig, run: RunDir, resume: bool = False) -> dict[str, Any]:
    """Train; returns a summary (final step, eval before/after). Raises on fatal errors."""
    ses = prepare(cfg, run, resume)
    ac, tr, clients = ses.ac, ses.tr, ses.tr.clients
    ses.start()  # from here a first Ctrl-C finishes the step and checkpoints it
    sampler = clients.policy.sampling_client()
    for step in range(ses.done + 1, cfg.trainer.max_steps + 1):
        t_step = time.perf_counter()
        # 1. rollouts: G episodes for each of P tasks (DAPO: more rounds until enough groups vary)
        trajs, kept, rewards_K_G = collect(ac, sampler, step)
        t_gen = time.perf_counter() - t_step
        ses.check_episodes(step, trajs)  # every episode failed: stop with the first error

        # 2. data, the step's fixed scores, advantages (client side), optimizer steps
        t0 = time.perf_counter()
        learn = train_step(tr, kept, rewards_K_G=rewards_K_G)
        t_train = time.perf_counter() - t0

        # 3. push the new weights to the sampler
        t0 = time.perf_counter()
        tr.version += 1
        sampler = clients.policy.save_weights_and_get_sampling_client(tr.version)
        t_sync = time.perf_counter() - t0

        # 4. record
        metrics = step_metrics(trajs, cfg.rollout.group_size, learn)
        t_all = time.perf_counter() - t_step
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
        ses.record(step, metrics, [t.to_record(step) for t in trajs], t_all)

        # 5. checkpoint (every checkpoint_every steps, the last, on Ctrl-C), or stop
        ses.checkpoint_or_stop(step)
    return ses.finish()
