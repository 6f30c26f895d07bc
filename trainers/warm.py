"""Warm workers: on a cluster a run joins, its worker processes can outlive it, idle and
holding no model, for the next run to take instead of starting its own
(`SKYRL_REUSE_WORKERS=1`, docs/scaling.md).

A worker's start-up is mostly imports (torch and transformers: about 5 s of CPU,
docs/benchmarks.md), paid again by every run; on a long-lived cluster that runs many short
runs (a sweep, a test suite) a warm worker pays them once. What a run leaves behind is a
process that has imported the code, nothing of the run: its backends are dropped and
collected before it is given back, and every run builds its own from its own config and
seed. A worker is taken only by a run with the same key: the same environment for the
worker, the same actor options and the same code (the size and modification time of every
module of the project's packages, and of the interpreter's site-packages folder), so an
edit or an upgrade between runs starts fresh workers.

The pool is one detached actor per cluster (`skyrl-warm-workers` in namespace `skyrl`),
holding handles to detached worker actors. A worker is killed, not kept, when its run
failed or was stopped, when it has been idle `IDLE_S` seconds, or when the run that held it
died without giving it back (kill -9: its Ray job is dead).

This module imports nothing heavy: the pool's own worker process loads it alone.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ENV = "SKYRL_REUSE_WORKERS"
NAMESPACE = "skyrl"
POOL = "skyrl-warm-workers"
IDLE_S = float(os.environ.get("SKYRL_REUSE_IDLE_S", "600"))
"""How long a warm worker waits for a run before it is ended (`SKYRL_REUSE_IDLE_S`)."""
PACKAGES = ("agents", "trainers", "environments", "tasks")
"""The project's packages a worker can import: their modules are part of the key."""


def wanted() -> bool:
    """Whether this process's environment asks for warm workers."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def pool_name() -> str:
    """The cluster's pool, `skyrl-warm-workers`; any value of `SKYRL_REUSE_WORKERS` other
    than 1/true/yes/on names a pool of its own (`skyrl-warm-workers-<value>`), shared only
    by runs that name it."""
    value = os.environ.get(ENV, "").strip()
    return POOL if value.lower() in ("1", "true", "yes", "on") else f"{POOL}-{value}"


@functools.cache  # once per process: a run's code does not change under it
def code_stamp() -> str:
    """The size and modification time of every module a worker may run, and of the
    interpreter's site-packages folder (a `pip install` changes it): what makes a warm
    worker's imports stale."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(sys.executable.encode())
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            st = path.stat()
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    for folder in sorted({p for p in sys.path if p.endswith("site-packages")}):
        try:
            h.update(f"{folder}:{os.stat(folder).st_mtime_ns}\n".encode())
        except OSError:
            continue
    return h.hexdigest()[:16]


def key(env: dict[str, str], options: dict[str, Any]) -> str:
    """What a warm worker must match to be taken: its environment, its actor options and the
    code it imported."""
    text = repr((sorted(env.items()), sorted(options.items()), code_stamp()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class WarmPool:
    """The cluster's warm workers (a detached Ray actor): which exist, for which key, which
    are free and since when, and which run holds the others."""

    SWEEP_S = 5.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[str, dict[str, Any]] = {}
        """worker name -> {"actor", "key", "job" (the holder, None when free), "since", "idle_s"}"""
        threading.Thread(target=self._sweep_forever, daemon=True).start()

    def take(self, key: str, job: str) -> tuple[str, Any] | None:
        """A free worker with `key`, now held by `job`; None when there is none."""
        with self.lock:
            self._sweep()
            for name, e in self.entries.items():
                if e["job"] is None and e["key"] == key:
                    e["job"], e["since"] = job, time.monotonic()
                    return name, e["actor"]
        return None

    def add(self, name: str, actor: Any, key: str, job: str) -> None:
        """A worker a run started itself (none was free), held by it."""
        with self.lock:
            self.entries[name] = {"actor": actor, "key": key, "job": job, "since": time.monotonic()}

    def give(self, names: list[str], idle_s: float) -> None:
        """Workers back from a run that ended cleanly, their backends dropped."""
        with self.lock:
            for name in names:
                if name in self.entries:
                    e = self.entries[name]
                    e["job"], e["since"], e["idle_s"] = None, time.monotonic(), idle_s

    def drop(self, names: list[str]) -> None:
        """Workers a run killed (it failed or was stopped): forget them."""
        with self.lock:
            for name in names:
                self.entries.pop(name, None)

    def counts(self) -> dict[str, int]:
        """How many workers are free and how many are held (`skyrl`'s tests, docs)."""
        with self.lock:
            free = sum(e["job"] is None for e in self.entries.values())
            return {"free": free, "held": len(self.entries) - free}

    def _sweep_forever(self) -> None:
        while True:
            time.sleep(self.SWEEP_S)
            try:
                with self.lock:
                    self._sweep()
            except Exception:  # noqa: BLE001, S110 - the next sweep tries again
                pass

    def _sweep(self) -> None:
        """End the workers idle too long and those whose holder died (called with the lock)."""
        import ray

        now = time.monotonic()
        held = {e["job"] for e in self.entries.values() if e["job"] is not None}
        dead = _dead_jobs(held) if held else set()
        for name, e in list(self.entries.items()):
            idle = e["job"] is None and now - e["since"] > e.get("idle_s", IDLE_S)
            if idle or e["job"] in dead:
                del self.entries[name]
                with contextlib.suppress(Exception):  # gone already
                    ray.kill(e["actor"])


def _dead_jobs(jobs: set[str]) -> set[str]:
    """Which of these Ray jobs (drivers) have ended. Ray's job table is its only record of a
    driver that died without a word (kill -9); read through its internal state module, as
    `ray list jobs` needs the dashboard this cluster may not run."""
    from ray._private import state

    table = {j["JobID"]: j["IsDead"] for j in state.jobs()}
    return {j for j in jobs if table.get(j, True)}
