"""Ray placement: start or join a cluster, and put the learner and the engine on it.

The loop only sees two handles with the Learner and Engine methods; that these are Ray
actors (and, later, DeepSpeed groups or vLLM servers on GPUs) is this module's business.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from trainers.config import RunConfig

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
        "runtime_env": {"env_vars": QUIET_ENV},
    }
    if address:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        return {"address": address, **quiet}
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_urlsafe(32))
    return {
        "include_dashboard": False,
        "num_cpus": os.cpu_count() or 1,
        "_node_ip_address": "127.0.0.1",
        **quiet,
    }


def _threads(cfg: RunConfig) -> int:
    return cfg.trainer.threads or os.cpu_count() or 1


class _EngineWorker:
    """Ray actor around an engine (the import happens in the worker, not the driver)."""

    def __init__(self, model_path: str, dtype: str, threads: int) -> None:
        from agents.engine_hf import HFEngine

        self.engine = HFEngine(model_path, dtype=dtype, threads=threads)

    def generate(self, requests: list[Any], temperature: float, top_p: float) -> list[Any]:
        return self.engine.generate(requests, temperature=temperature, top_p=top_p)

    def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        self.engine.update_weights(named_tensors, version)

    def load(self, model_path: str, version: int) -> None:
        self.engine.load(model_path, version)


class _LearnerWorker:
    def __init__(self, model_path: str, cfg: RunConfig, threads: int) -> None:
        import torch

        from trainers.learner import TorchLearner

        torch.set_num_threads(threads)
        self.learner = TorchLearner(model_path, cfg)

    def train_step(self, batch: list[Any]) -> dict[str, float]:
        return self.learner.train_step(batch)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def sft_step(self, batch: list[Any], lr: float) -> dict[str, float]:
        return self.learner.sft_step(batch, lr)

    def end_warmup(self, reference_dir: str) -> None:
        self.learner.end_warmup(reference_dir)

    def load_reference(self, reference_dir: str) -> None:
        self.learner.load_reference(reference_dir)

    def save(self, directory: str) -> None:
        self.learner.save(directory)

    def load(self, directory: str) -> None:
        self.learner.load(directory)


def place(cfg: RunConfig, model_path: Path) -> tuple[Any, Any]:
    """Create (learner, engine) actors. num_cpus=0: on a laptop both share every core,
    taking turns (the sync schedule never runs them at once)."""
    import ray

    if cfg.rollout.engine != "hf":
        raise ValueError(
            f"rollout.engine={cfg.rollout.engine!r} needs a GPU build that is not installed; use hf"
        )
    threads = _threads(cfg)
    learner = ray.remote(num_cpus=0)(_LearnerWorker).remote(str(model_path), cfg, threads)
    engine = ray.remote(num_cpus=0)(_EngineWorker).remote(str(model_path), cfg.model.dtype, threads)
    return learner, engine
