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

from trainers.client import ForwardBackwardOutput, LearnerSpec


class _Member:
    """A Ray actor holding one `DistLearner`."""

    def __init__(self, threads: int, env: dict[str, str]) -> None:
        os.environ.update(env)  # first: DeepSpeed reads DS_ACCELERATOR when imported
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

    def setup(self, model_path: str, spec: LearnerSpec, host: str, port: int, rank: int) -> bool:
        from trainers.learner_dist import DistLearner, join_group

        join_group(host, port, rank, spec.num_workers)
        self.backend = DistLearner(model_path, spec, rank, spec.num_workers)
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

    def __init__(self, actors: list[Any], setup: list[Any]) -> None:
        self.actors = actors
        self.setup = setup
        """The workers' set-up calls: waited for by the first call, which raises their error."""

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        from trainers.placement import _RayFuture

        if self.setup:
            ray.get(self.setup)
            self.setup = []
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
    spec: LearnerSpec, model_path: str, threads: int, placement: str = "colocated"
) -> GroupHandle:
    """Start `spec.num_workers` actors and join them into one group; each builds its
    learner from the spec while the caller goes on (its calls queue behind that).
    `placement="split"` (`ray.placement`) first reserves one device per worker on one node
    (a placement group)."""
    import importlib.util

    import ray

    if spec.strategy == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise ValueError(
            "learner.strategy=deepspeed needs the deepspeed package: pip install 'skyrl[deepspeed]'"
        )
    from trainers.placement import worker_env

    # an argument, not a Ray runtime_env (placement.worker_env says why)
    env = {**worker_env(), "TORCH_EXTENSIONS_DIR": extension_dir()}
    env["DS_ACCELERATOR"] = _accelerator()
    n = spec.num_workers
    member = ray.remote(_Member)
    # colocated: workers share the CPUs with the engines; on GPUs each holds one (NCCL
    # cannot put two ranks on one device)
    gpus = 1 if ray.cluster_resources().get("GPU") else 0
    options: list[dict[str, Any]] = [{"num_cpus": 0, "num_gpus": gpus}] * n
    if placement == "split":
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        device = _device()
        pg = placement_group([device] * n, strategy="STRICT_PACK")
        if not pg.wait(timeout_seconds=120):
            raise RuntimeError(
                f"no Ray node has {n} free {next(iter(device))} for the learner workers "
                "(ray.placement=split); add resources or use ray.placement=colocated"
            )
        options = [
            {
                "num_cpus": device.get("CPU", 0),
                "num_gpus": device.get("GPU", 0),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, r),
            }
            for r in range(n)
        ]
    actors: list[Any] = [
        member.options(**options[r]).remote(max(1, threads // n), env) for r in range(n)
    ]
    host, port = ray.get(actors[0].open_store.remote(n))
    setup = [a.setup.remote(model_path, spec, host, port, r) for r, a in enumerate(actors)]
    return GroupHandle(actors, setup)


def engine_options() -> dict[str, Any]:
    """An engine's Ray options under ray.placement=split: a device of its own."""
    device = _device()
    return {"num_cpus": device.get("CPU", 0), "num_gpus": device.get("GPU", 0)}


def _device() -> dict[str, float]:
    """One learner worker's or engine's share under split: a GPU where the cluster has one."""
    import ray

    return {"GPU": 1} if ray.cluster_resources().get("GPU") else {"CPU": 1}


def _accelerator() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
