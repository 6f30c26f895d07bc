"""Placement: where the backends behind the training and sampling clients run.

The loop only sees `TrainingClient` and `SamplingClient`; that their backends are Ray
actors here (and, later, FSDP/DeepSpeed groups or vLLM servers on GPUs) is this module's
business. The only module that imports ray, with trainers/learner_group.py (a learner that
is `learner.num_workers` actors in one torch.distributed group).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import engines as engine_table
from agents.replicas import Replicas
from agents.sampling import Local, SamplingClient
from trainers import warm
from trainers.algorithm_table import ALGORITHMS
from trainers.client import LearnerSpec, TrainingClient, learner_spec
from trainers.config import RunConfig
from trainers.progress import phase

# Workers inherit these (also on a cluster we join): no progress bars or banners in the log.
QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
}


def start_ray(address: str | None) -> None:
    """Join `address`, or start a private local cluster (see `ray_init_kwargs`)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("NO_COLOR") or not (sys.stdout.isatty() and sys.stderr.isatty()):
        # Ray colours the `(Worker pid=N)` prefix of worker output it relays; without a
        # terminal (a log file, CI) those would be raw escape codes.
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    import ray

    if not ray.is_initialized():
        kwargs = ray_init_kwargs(address)
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")  # Ray read RAY_AUTH_MODE when imported; as ray.init does, reread it
        ray.init(**kwargs)


def ray_init_kwargs(address: str | None) -> dict[str, Any]:
    """ray.init's arguments; sets the authentication environment Ray reads at init.

    The private cluster (no address) must take nothing from outside the machine. Ray 2.60's
    servers (gcs, raylet, workers, agents) listen on every interface whatever
    `_node_ip_address` says (measured), so it runs with Ray's token authentication: a
    fresh random token in this process's environment, which the Ray processes it starts
    inherit; nothing is written to disk. Joining a cluster with `--ray-address` is the
    user's choice, with their cluster's authentication (RAY_AUTH_MODE/RAY_AUTH_TOKEN);
    unset, it stays off there as before (docs/security.md).
    """
    quiet: dict[str, Any] = {
        "log_to_driver": True,
        "logging_level": "WARNING",
        "configure_logging": True,
    }
    if address:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        return {"address": address, **quiet}
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_urlsafe(32))
    # Ray starts workers at nice +15 (its worker_niceness), and the workers (learner,
    # engines) are all of a run's work: they would lose the CPU to any editor or test run.
    # Here they run at the priority `skyrl train` was started with; `nice -n 10 skyrl
    # train` lowers the whole run, RAY_worker_niceness=N only the workers.
    os.environ.setdefault("RAY_worker_niceness", "0")
    return {
        "include_dashboard": False,
        "num_cpus": os.cpu_count() or 1,
        # Ray rewrites 127.0.0.1 (and localhost) to the machine's interface address, and the
        # cluster's own traffic and its agents' listeners would then use that address;
        # 127.0.0.2 is loopback that Ray leaves alone, so the cluster talks over loopback.
        "_node_ip_address": "127.0.0.2" if sys.platform == "linux" else "127.0.0.1",
        **quiet,
    }


def worker_env() -> dict[str, str]:
    """What every worker sets in its environment first, on any cluster: QUIET_ENV, OpenMP's
    wait policy (`engines.sleeping_threads`: the worker imports torch only after this) and
    the threads setting (0 means the same there as here).

    A worker takes it as an argument, not as a Ray `runtime_env`: an actor with a runtime
    environment cannot use the worker processes Ray has already started for the job, and
    waits for a new one set up through Ray's runtime-env agent (about 2 s of CPU a worker,
    every run).
    """
    value = os.environ.get(engine_table.THREADS_ENV)
    threads = {engine_table.THREADS_ENV: value} if value is not None else {}
    return {**QUIET_ENV, **engine_table.sleeping_threads(), **threads}


def _threads(cfg: RunConfig) -> int:
    return engine_table.torch_threads(cfg.trainer.threads)


def _build(kind: str, model_path: str, cfg: RunConfig | LearnerSpec) -> Any:
    """A backend object (imports happen where it runs: in a Ray worker, not the driver): a
    learner or critic from its spec, an engine or the reference from the run config."""
    import torch

    if isinstance(cfg, LearnerSpec):
        from trainers.learner import TorchLearner

        torch.set_num_threads(engine_table.torch_threads(cfg.threads))
        return TorchLearner(model_path, cfg, value_head=kind == "critic")
    torch.set_num_threads(_threads(cfg))
    if kind in ("engine", "reference"):  # the reference only scores: hf at any temperature
        name = cfg.rollout.engine if kind == "engine" else "hf"
        return engine_table.build(
            name,
            model_path,
            dtype=cfg.model.dtype,
            threads=_threads(cfg),
            tensor_parallel_size=cfg.rollout.tensor_parallel_size,
        )
    raise ValueError(f"no backend of kind {kind!r}")


class _Worker:
    """A Ray actor holding one backend; `call` runs any of its methods. A warm worker
    (trainers/warm.py) starts with none (`kind` None): each run that takes it `build`s its
    own, and `release`s it at the end."""

    def __init__(
        self,
        kind: str | None,
        model_path: str,
        cfg: RunConfig | LearnerSpec | None,
        env: dict[str, str],
    ) -> None:
        os.environ.update(env)  # before anything reads it: nothing heavy is imported yet
        self.backend = _build(kind, model_path, cfg) if kind and cfg is not None else None
        self.others: dict[str, Any] = {}

    def build(self, kind: str, model_path: str, cfg: RunConfig | LearnerSpec) -> None:
        """This run's backend, in a warm worker the run took."""
        self.backend = _build(kind, model_path, cfg)

    def release(self) -> None:
        """Drop this run's backends and give their memory back: the worker goes back warm."""
        import gc

        self.backend, self.others = None, {}
        gc.collect()
        if sys.platform == "linux":  # glibc keeps freed model memory in its arenas otherwise
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.backend, method)(*args, **kwargs)

    def add(self, kind: str, model_path: str, cfg: RunConfig | LearnerSpec) -> None:
        """Build another backend in this process (`ray.share_process`), called as `kind`."""
        self.others[kind] = _build(kind, model_path, cfg)

    def call_other(self, kind: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.others[kind], method)(*args, **kwargs)

    def ready(self) -> bool:
        return True

    def node(self) -> str:
        """The Ray node this worker runs on (placement tests, docs/scaling.md)."""
        import ray

        return ray.get_runtime_context().get_node_id()


class _RayFuture:
    """A pending actor call; passed to another call it travels as a reference, so weights go
    learner -> engine without a stop in the driver."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> Any:
        import ray

        return ray.get(self.ref)


class _RayHandle:
    """A backend in a Ray actor: its own (`kind` None), or one `add`ed to another's."""

    def __init__(self, actor: Any, kind: str | None = None) -> None:
        self.actor = actor
        self.kind = kind

    def call(self, method: str, *args: Any, **kwargs: Any) -> _RayFuture:
        args = tuple(a.ref if isinstance(a, _RayFuture) else a for a in args)
        if self.kind is None:
            return _RayFuture(self.actor.call.remote(method, *args, **kwargs))
        return _RayFuture(self.actor.call_other.remote(self.kind, method, *args, **kwargs))


@dataclass
class Clients:
    """What a run trains and samples with."""

    policy: TrainingClient
    """The policy; `policy.sampling_client()` samples from it."""
    critic: TrainingClient | None
    """A value model (algorithms whose table entry has `critic`)."""
    reference: SamplingClient | None
    """The frozen reference model that the KL is measured against (`kl_coef` > 0)."""


def shares_a_process(cfg: RunConfig) -> bool:
    """Whether every backend of a run on Ray lives in the learner's worker process
    (`ray.share_process`, where nothing runs beside anything else)."""
    return (
        cfg.ray.share_process
        and cfg.trainer.schedule == "sync"
        and cfg.learner.strategy == "torch"
        and cfg.learner.num_workers == 1
        and cfg.ray.placement == "colocated"
        and cfg.rollout.engine == "hf"
        and cfg.rollout.num_engines == 1
    )


def reuses_workers(cfg: RunConfig) -> bool:
    """Whether this run takes warm workers from its cluster and gives them back
    (trainers/warm.py): asked for (`SKYRL_REUSE_WORKERS=1`), on a cluster it joins (a
    private one ends with the run), with its workers colocated (a `split` engine reserves
    its own device for the run)."""
    return warm.wanted() and bool(cfg.ray.address) and cfg.ray.placement == "colocated"


_TAKEN: list[tuple[str, Any]] = []
"""The warm workers this process's run holds (name, actor): given back at a clean end
(`give_back`), killed otherwise (`end_warm`)."""


def _pool() -> Any:
    import ray

    pool = ray.remote(num_cpus=0)(warm.WarmPool)
    return pool.options(
        name=warm.pool_name(), namespace=warm.NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote()


def _warm_worker(actor: Any, env: dict[str, str], opts: dict[str, Any]) -> Any:
    """A free warm worker of this run's key from the cluster's pool, or a new one that joins
    the pool (held by this run); either way empty, for the run to `build` in."""
    import ray

    pool, k = _pool(), warm.key(env, opts)
    job = ray.get_runtime_context().get_job_id()
    while (got := ray.get(pool.take.remote(k, job))) is not None:
        name, worker = got
        try:
            ray.get(worker.ready.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - it died while it waited: the next, or a new one
            ray.get(pool.drop.remote([name]))
            continue
        _TAKEN.append((name, worker))
        return worker
    name = f"skyrl-warm-{secrets.token_hex(6)}"
    worker = actor.options(name=name, namespace=warm.NAMESPACE, lifetime="detached", **opts).remote(
        None, "", None, env
    )
    ray.get(pool.add.remote(name, worker, k, job))
    _TAKEN.append((name, worker))
    return worker


def give_back() -> None:
    """The run ended cleanly: its warm workers drop its backends and go back to the pool."""
    if not _TAKEN:
        return
    import ray

    try:
        ray.get([w.release.remote() for _, w in _TAKEN], timeout=120)
        ray.get(_pool().give.remote([n for n, _ in _TAKEN], warm.IDLE_S), timeout=30)
    except Exception:  # noqa: BLE001 - the run is done either way: its workers end instead
        end_warm()
    _TAKEN.clear()


def end_warm() -> None:
    """The run failed or was stopped: its warm workers may be mid-call or hold a broken
    state, so they end (and leave the pool) rather than go back."""
    if not _TAKEN:
        return
    import ray

    for _, w in _TAKEN:
        with contextlib.suppress(Exception):
            ray.kill(w)
    with contextlib.suppress(Exception):
        ray.get(_pool().drop.remote([n for n, _ in _TAKEN]), timeout=10)
    _TAKEN.clear()


def place(cfg: RunConfig, model_path: Path, local: bool = False) -> Clients:
    """Build the clients' backends: in this process (`local`), or as Ray actors on the
    cluster at `ray.address` (a private local one by default). num_cpus=0: on a laptop
    every actor shares every core, taking turns (the sync schedule never runs them at once)."""
    engine_table.require(cfg.rollout.engine)  # before Ray starts: one sentence if it is missing
    group = cfg.learner.strategy != "torch" or cfg.learner.num_workers > 1
    spec = learner_spec(cfg)  # what the learner and critic read: all that crosses to them
    made_of = lambda kind: spec if kind in ("learner", "critic") else cfg  # noqa: E731
    if local and group:
        raise ValueError("learner.num_workers > 1 and fsdp/deepspeed run on Ray, not in-process")
    if local:
        make: Any = lambda kind: Local(_build(kind, str(model_path), made_of(kind)))  # noqa: E731
    else:
        import ray

        where = cfg.ray.address
        phase(
            f"joining the Ray cluster at {where}" if where else "starting Ray (a private cluster)"
        )
        start_ray(where)
        shared = shares_a_process(cfg)
        if shared:
            phase(f"starting one worker for the learner and engine, loading {cfg.model.name}")
        else:
            phase(f"starting the learner and engine workers, loading {cfg.model.name} into each")
        actor = ray.remote(num_cpus=0)(_Worker)
        env = worker_env()
        reuse = reuses_workers(cfg)
        handles: list[_RayHandle] = []
        added: list[Any] = []  # the `add` calls of a shared process: their errors surface

        def make(kind: str) -> Any:
            if shared and handles:  # the learner's process builds it too
                added.append(handles[0].actor.add.remote(kind, str(model_path), made_of(kind)))
                return _RayHandle(handles[0].actor, kind)
            if kind == "learner" and group:  # N actors in one torch.distributed group
                from trainers.learner_group import learner_group

                return learner_group(spec, str(model_path), _threads(cfg), cfg.ray.placement)
            # async: an engine takes new weights while it decodes (agents/engine_hf.py), and
            # several batches decode at once, so its calls run on threads
            threaded = kind == "engine" and cfg.trainer.schedule == "async"
            opts = {"max_concurrency": 16} if threaded else {}
            if kind == "engine" and cfg.ray.placement == "split":
                from trainers.learner_group import engine_options

                opts |= engine_options()
            if reuse and (kind != "engine" or cfg.rollout.engine == "hf"):
                # a warm worker (trainers/warm.py): taken from the pool or started to join it
                worker = _warm_worker(actor, env, opts)
                added.append(worker.build.remote(kind, str(model_path), made_of(kind)))
            else:
                worker = actor.options(**opts).remote(kind, str(model_path), made_of(kind), env)
            handles.append(_RayHandle(worker))
            return handles[-1]

    entry = ALGORITHMS[cfg.algorithm.name]
    learner = make("learner")  # first: ray.placement=split reserves its devices before engines
    replicas = [make("engine") for _ in range(cfg.rollout.num_engines)]
    engines = replicas[0] if len(replicas) == 1 else Replicas(replicas)
    clients = Clients(
        policy=TrainingClient(learner, SamplingClient(engines)),
        critic=TrainingClient(make("critic")) if entry.critic else None,
        reference=SamplingClient(make("reference")) if cfg.algorithm.kl_coef > 0 else None,
    )
    if not local:
        # While the workers start, the driver imports what it needs next (the tracker), then
        # waits for them: the time goes to the phase that takes it.
        if cfg.tracking.enabled:
            import mlflow  # noqa: F401

        ray.get([*added, *(h.actor.ready.remote() for h in handles)])
    return clients
