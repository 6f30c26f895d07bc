"""Asynchronous RL: rollouts never wait for the learner, new weights reach the engine mid-episode.

    skyrl train --env shell --set trainer.schedule=async                # max_staleness 2
    skyrl train --env math --set trainer.schedule=async --set async.stale=reweight \\
        --set algorithm.tis_cap=2                                       # keep stale samples

The sibling of the sync schedule (sync.py): the same step pieces (trainers/steps.py), the
same run around the loop (trainers/session.py: setup, resume, evaluation, each step's
record and checkpoint, the end) and the same two clients; what is its own here is the
scheduling. Batch b is what sync's step b samples: the same P tasks, the same seeds
(`collect`). Rollout threads sample batch after batch without waiting for the learner,
up to `async.rollout_batches` batches ahead of it (default max_staleness + 1); the learner
trains step t on batch t as soon as it is complete, then pushes the new weights to the
engine in flight: running requests switch to them between two decode steps (the `hf`
engine, agents/engine_hf.py) and every token records the version that produced it.

Staleness of a sample: the learner's version when it trains on it minus the version of its
oldest token. Within the bound, a token older weights sampled gets decoupled PPO's weight
min(p_learner / p_sampled, async.behaviour_cap) (trainers/steps.py, `behaviour_weights`).
Beyond `async.max_staleness` the sample is dropped (no loss; its reward still
counts in its group's baseline) or, with `async.stale=reweight`, kept with every token
weighted by min(p_learner / p_sampled, algorithm.tis_cap) against the log-probs the engine
actually sampled with (docs/algorithms.md, off-policy correction). With max_staleness 0
batch b starts only after update b - 1, which is the sync schedule, number for number.

Resume: a checkpoint holds the batches sampled but not yet trained (their trajectories);
batches that were mid-rollout are sampled again from their tasks and seeds with the
checkpoint's weights. Step t always trains batch t, so after kill -9 and `--resume` every
batch is trained once: none lost, none twice.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import asdict, replace
from typing import Any

import torch

from agents.engine import GenRequest, GenResult
from agents.sampling import Done, SamplingClient
from agents.trajectory import Trajectory, Turn
from trainers.config import RunConfig
from trainers.rundir import RunDir
from trainers.session import prepare
from trainers.steps import Acting, collect, shaped_rewards, step_metrics, train_step

# --------------------------------------------------------------------------- rollouts


class _Timed:
    """The sampler as `collect` calls it, timing when any request is on the engine."""

    def __init__(self, sampler: SamplingClient, clock: Rollouts) -> None:
        self.sampler, self.clock = sampler, clock

    def generate(
        self, requests: list[GenRequest], temperature: float, top_p: float = 1.0
    ) -> Done[list[GenResult]]:
        self.clock.engine_busy(+1)
        try:
            return Done(self.sampler.generate(requests, temperature, top_p).result())
        finally:
            self.clock.engine_busy(-1)


class Rollouts:
    """Rollout threads, one batch each at a time, and the buffer they fill for the learner."""

    def __init__(
        self,
        ac: Acting,
        sampler: SamplingClient,
        version: int,
        first: int,
        restored: dict[int, list[Trajectory]],
    ) -> None:
        cfg, G = ac.cfg, ac.cfg.rollout.group_size
        self.ac, self.sampler = ac, _Timed(sampler, self)
        self.ahead = cfg.async_.rollout_batches or cfg.async_.max_staleness + 1
        self.last = cfg.trainer.max_steps
        self.cond = threading.Condition()
        self.version = version  # the learner's, as live on the engine
        # batch -> its episodes, sampled and not yet trained, and their shaped rewards
        self.buffer = {
            b: (trajs, shaped_rewards(cfg, groups(trajs, G))) for b, trajs in restored.items()
        }
        self.running: set[int] = set()
        self.next = first
        self.error: BaseException | None = None
        self.closed = False
        self.episodes = 0  # finished since the last `counters` call
        self.busy, self.busy_since, self.busy_s = 0, 0.0, 0.0
        self.threads = [
            threading.Thread(target=self._work, name=f"skyrl-rollout-{i}", daemon=True)
            for i in range(self.ahead)
        ]
        for t in self.threads:
            t.start()

    def _claim(self) -> int | None:
        """The next batch to sample, once the learner is close enough (None: stop)."""
        with self.cond:
            while True:
                while self.next in self.buffer:  # restored from the checkpoint
                    self.next += 1
                if self.closed or self.next > self.last:
                    return None
                if self.next - self.version <= self.ahead:
                    self.running.add(self.next)
                    self.next += 1
                    return self.next - 1
                self.cond.wait()

    def _work(self) -> None:
        while (b := self._claim()) is not None:
            try:
                trajs, _, rewards_K_G = collect(self.ac, self.sampler, b)  # type: ignore[arg-type]
            except BaseException as e:  # noqa: BLE001 - handed to the learner's thread
                with self.cond:
                    self.error = self.error or e
                    self.cond.notify_all()
                return
            with self.cond:
                self.running.discard(b)
                self.buffer[b] = trajs, rewards_K_G
                self.episodes += len(trajs)
                self.cond.notify_all()

    def take(self, b: int) -> tuple[list[Trajectory], torch.Tensor]:
        """Batch b's episodes and their shaped rewards (`rewards_K_G`), waiting for them (a
        rollout thread's error is raised here)."""
        with self.cond:
            while b not in self.buffer and self.error is None:
                self.cond.wait()
            if b not in self.buffer:
                raise self.error  # type: ignore[misc]
            return self.buffer.pop(b)

    def advance(self, version: int) -> None:
        """New weights are live on the engine: batches further ahead may start."""
        with self.cond:
            self.version = version
            self.cond.notify_all()

    def engine_busy(self, delta: int) -> None:
        with self.cond:
            now = time.perf_counter()
            if self.busy and not self.busy + delta:
                self.busy_s += now - self.busy_since
            elif not self.busy and delta > 0:
                self.busy_since = now
            self.busy += delta

    def counters(self) -> tuple[int, float, int]:
        """(episodes finished, engine-busy seconds) since the last call, and buffered groups."""
        with self.cond:
            now = time.perf_counter()
            busy_s = self.busy_s + (now - self.busy_since if self.busy else 0.0)
            self.busy_s, self.busy_since = 0.0, now
            episodes, self.episodes = self.episodes, 0
            depth = sum(len(t) for t, _ in self.buffer.values()) // self.ac.cfg.rollout.group_size
            return episodes, busy_s, depth

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """The buffered batches as JSON (a checkpoint's `async_buffer`)."""
        with self.cond:
            return {str(b): [asdict(t) for t in trajs] for b, (trajs, _) in self.buffer.items()}

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def groups(trajs: list[Trajectory], group_size: int) -> list[list[Trajectory]]:
    """A batch's episodes as its groups, in task order."""
    return [trajs[i : i + group_size] for i in range(0, len(trajs), group_size)]


def restore_buffer(state: dict[str, Any]) -> dict[int, list[Trajectory]]:
    """A checkpoint's buffered batches back as trajectories."""
    return {
        int(b): [Trajectory(**{**d, "turns": [Turn(**x) for x in d["turns"]]}) for d in trajs]
        for b, trajs in state.get("async_buffer", {}).items()
    }


# --------------------------------------------------------------------------- staleness


def staleness(trajs: list[Trajectory], version: int) -> list[int]:
    """Versions between the learner's and each sample's oldest token (0 without tokens)."""
    return [version - min(t.token_versions, default=version) for t in trajs]


def bound(cfg: RunConfig, trajs: list[Trajectory], stale_N: list[int]) -> list[Trajectory]:
    """The episodes as the update sees them: under `drop`, a sample beyond max_staleness
    carries no loss (marked like a failed episode, reward kept for its group's baseline)."""
    k = cfg.async_.max_staleness
    if cfg.async_.stale == "reweight":
        return trajs
    return [
        replace(t, error=f"stale: {s} versions old (max {k})") if s > k and t.error is None else t
        for t, s in zip(trajs, stale_N, strict=True)
    ]


def async_metrics(stale_N: list[int], bounded: list[Trajectory], ahead: int) -> dict[str, float]:
    """The staleness histogram (`staleness/hist/S`: samples S versions old) and counts."""
    hist = Counter(stale_N)
    trained = sum(t.error is None and t.response_len > 0 for t in bounded)
    return {
        **{f"staleness/hist/{s}": float(hist[s]) for s in range(max(ahead, *hist) + 1)},
        "staleness/mean": sum(stale_N) / max(1, len(stale_N)),
        "staleness/max": float(max(stale_N, default=0)),
        "async/dropped": float(sum(str(t.error).startswith("stale:") for t in bounded)),
        "async/trained_samples": float(trained),
    }


# --------------------------------------------------------------------------- main


def main(cfg: RunConfig, run: RunDir, resume: bool = False) -> dict[str, Any]:
    """Train on the async schedule; returns a summary like `sync.main`."""
    ses = prepare(cfg, run, resume)
    tr, clients, G = ses.tr, ses.tr.clients, cfg.rollout.group_size
    sampler = clients.policy.sampling_client()
    rollouts = Rollouts(ses.ac, sampler, tr.version, ses.done + 1, restore_buffer(ses.state))
    if rollouts.buffer:
        ses.progress.note(f"restored {len(rollouts.buffer)} sampled batches from the checkpoint")
    ses.start()  # as in sync: a first Ctrl-C finishes the step and checkpoints it (buffer too)
    t_last = time.perf_counter()
    try:
        for step in range(ses.done + 1, cfg.trainer.max_steps + 1):
            # 1. batch `step`: sampled ahead by the rollout threads (wait when it is not done)
            t0 = time.perf_counter()
            trajs, rewards_K_G = rollouts.take(step)
            t_wait = time.perf_counter() - t0
            ses.check_episodes(step, trajs)  # every episode failed: stop with the first error

            # 2. the staleness bound, then the same update as sync's (groups in task order)
            stale_N = staleness(trajs, tr.version)
            bounded = bound(cfg, trajs, stale_N)
            kept = groups(bounded, G)
            t0 = time.perf_counter()
            learn = train_step(tr, kept, cfg.async_.behaviour_cap, rewards_K_G=rewards_K_G)
            t_train = time.perf_counter() - t0

            # 3. push the new weights: live on the engine between two of its decode steps
            t0 = time.perf_counter()
            tr.version += 1
            clients.policy.save_weights_and_get_sampling_client(tr.version)
            rollouts.advance(tr.version)
            t_sync = time.perf_counter() - t0

            # 4. record (rates over the time since the previous step ended)
            now = time.perf_counter()
            t_all, t_last = now - t_last, now
            episodes, busy_s, depth = rollouts.counters()
            metrics = step_metrics(trajs, G, learn) | async_metrics(
                stale_N, bounded, rollouts.ahead
            )
            metrics |= {
                "groups/kept": float(len(kept)),
                "time/wait": t_wait,
                "time/train": t_train,
                "time/sync": t_sync,
                "time/step": t_all,
                "async/buffer_depth": float(depth),
                "perf/engine_idle": max(0.0, 1.0 - busy_s / t_all),
                "perf/learner_idle": t_wait / t_all,
                "perf/episodes_per_s": episodes / t_all,
                "perf/tokens_per_s": sum(t.response_len for t in trajs) / t_all,
                "perf/trained_samples_per_s": metrics["async/trained_samples"] / t_all,
                "policy_version": tr.version,
            }
            records = [
                t.to_record(step) | {"staleness": s, "dropped": b.error != t.error}
                for t, b, s in zip(trajs, bounded, stale_N, strict=True)
            ]
            ses.record(step, metrics, records, t_all)

            # 5. checkpoint, with the batches sampled ahead and not yet trained; or stop
            ses.checkpoint_or_stop(
                step, lambda last: {"async_buffer": {} if last else rollouts.snapshot()}
            )
    finally:
        rollouts.close()
    return ses.finish()
