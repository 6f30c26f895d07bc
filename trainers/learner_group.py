"""A learner group on Ray: `learner.num_workers` actors behind one training-client handle.

The driver sends every call to every worker (each runs its share: trainers/learner_dist.py)
and merges the answers: outputs by datum, metric sums added; the weights for the engine
come from rank 0 alone and travel worker -> engine as a Ray reference. Rendezvous goes
through Ray: rank 0 opens a TCP store on a port the OS picks and the others join it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainers.client import ForwardBackwardOutput
from trainers.config import RunConfig


class _Member:
    """A Ray actor holding one `DistLearner`."""

    def __init__(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.store: Any = None

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def open_store(self, world: int) -> tuple[str, int]:
        import ray

        from trainers.learner_dist import open_store

        host = ray.util.get_node_ip_address()
        self.store, port = open_store(host, world)
        return host, port

    def setup(self, model_path: str, cfg: RunConfig, host: str, port: int, rank: int) -> bool:
        from trainers.learner_dist import DistLearner, join_group

        join_group(host, port, rank, cfg.learner.num_workers)
        self.backend = DistLearner(model_path, cfg, rank, cfg.learner.num_workers)
        return True

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.backend, method)(*args, **kwargs)


class _GroupFuture:
    def __init__(self, refs: list[Any], method: str, loss_fn: str | None) -> None:
        self.refs, self.method, self.loss_fn = refs, method, loss_fn

    def result(self) -> Any:
        import ray

        outs = ray.get(self.refs)
        if self.method not in ("forward_backward", "forward"):
            return outs[0]
        merged: list[Any] = [None] * len(outs[0].loss_fn_outputs)
        metrics: dict[str, float] = {}
        for out in outs:
            for i, o in enumerate(out.loss_fn_outputs):
                if o is not None:
                    merged[i] = o
            for k, v in out.metrics.items():
                metrics[k] = metrics.get(k, 0.0) + v
        return ForwardBackwardOutput(merged, metrics)


class GroupHandle:
    """What `TrainingClient` calls: every call goes to every worker."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from trainers.placement import _RayFuture

        refs = [a.call.remote(method, *args, **kwargs) for a in self.actors]
        if method == "state_dict":  # rank 0's one gathered copy; the others return None
            return _RayFuture(refs[0])
        loss_fn = args[1] if method == "forward_backward" and len(args) > 1 else None
        return _GroupFuture(refs, method, loss_fn)

    def nodes(self) -> list[str]:
        """The Ray node id of each worker, by rank."""
        import ray

        return ray.get([a.node.remote() for a in self.actors])


def extension_dir() -> str:
    """Where DeepSpeed caches the op it compiles on first use (~60 s once, then seconds)."""
    return os.environ.get("TORCH_EXTENSIONS_DIR") or str(Path.home() / ".cache/torch_extensions")


def learner_group(
    cfg: RunConfig, model_path: str, threads: int, options: dict[str, Any] | None = None
) -> GroupHandle:
    """Start `learner.num_workers` actors, join them into one group, build the learners.
    `options`: Ray actor options (a placement group, resources) for every worker."""
    import ray

    env = {"TORCH_EXTENSIONS_DIR": extension_dir(), "DS_ACCELERATOR": _accelerator()}
    member = ray.remote(_Member).options(
        num_cpus=0, runtime_env={"env_vars": env}, **(options or {})
    )
    n = cfg.learner.num_workers
    actors: list[Any] = [member.remote(max(1, threads // n)) for _ in range(n)]
    host, port = ray.get(actors[0].open_store.remote(n))
    ray.get([a.setup.remote(model_path, cfg, host, port, r) for r, a in enumerate(actors)])
    return GroupHandle(actors)


def _accelerator() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
