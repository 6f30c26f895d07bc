"""The learner as one of N workers in a torch.distributed group (`learner.num_workers`).

Strategies (`learner.strategy`): `torch` (each worker holds the whole model; gradients are
all-reduced), `fsdp` (FSDP2, `fully_shard` per decoder layer and the root) and `deepspeed`
(ZeRO stage 2 or 3). Each worker wraps a `TorchLearner` (trainers/learner.py) and shards its
model. Every worker receives the whole call and runs every N-th forward pass; the losses
are sums whose weights are computed over the whole call (trainers/losses.py), so the
group's summed gradients are the one-process gradients of the whole batch. FSDP2 and
DeepSpeed average over workers: each worker's loss is scaled by N to undo that. A worker
with fewer passes than the busiest one runs empty ones (zero loss): weights are gathered
in every forward, and collectives must pair.

Checkpoints hold full tensors keyed by parameter name, written by rank 0 (`model/` is a
normal HF folder of the fp32 master weights; `optimizer.pt` holds Adam's moments and step
count per name): N workers save what M workers, or another strategy in a group, load.
Weights for the engines are gathered one tensor at a time into rank 0, once per version.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from agents.weights import WeightsError, from_pretrained
from trainers.checkpoint import CheckpointError
from trainers.client import AdamParams, Datum, ForwardBackwardOutput, LearnerSpec
from trainers.learner import TorchLearner

FULL_OPTIMIZER = "full_optimizer"
"""`optimizer.pt`'s key for name -> {"step", "exp_avg", "exp_avg_sq"} (full tensors)."""


def join_group(host: str, port: int, rank: int, world: int) -> None:
    """Join the group whose store rank 0 opened (`open_store`); gloo on CPU, NCCL on GPU."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0")
    os.environ.update(MASTER_ADDR=host, MASTER_PORT=str(port))
    store = dist.TCPStore(host, port, world, is_master=False)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)


def open_store(host: str, world: int) -> tuple[dist.TCPStore, int]:
    """Rank 0's rendezvous store on a port the OS picks (no fixed port to collide on)."""
    store = dist.TCPStore(host, 0, world, is_master=True, wait_for_workers=False)
    return store, store.port


class DistLearner:
    """One worker of a learner group; the driver calls every worker with the same call."""

    def __init__(self, model_path: str | Path, spec: LearnerSpec, rank: int, world: int) -> None:
        self.core = TorchLearner(model_path, spec)
        self.core.rank, self.core.world = rank, world
        self.rank, self.world, self.spec = rank, world, spec
        self.strategy = spec.strategy
        self.core.share_prompts = self.strategy == "torch"
        self.param_names = [n for n, _ in self.core.model.named_parameters()]
        self.engine: Any = None
        {"torch": self._setup_torch, "fsdp": self._setup_fsdp, "deepspeed": self._setup_ds}[
            self.strategy
        ]()

    # -- set-up, one per strategy ----------------------------------------------------

    def _setup_torch(self) -> None:
        for p in self.core.params:  # every worker starts from rank 0's weights
            dist.broadcast(p.data, 0)

    def _setup_fsdp(self) -> None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        core, model = self.core, self.core.model
        # bf16: the forward and backward run in bf16, the sharded fp32 weights are the
        # master copy the optimizer steps, and gradients are reduced in fp32
        low = core.compute_dtype != torch.float32
        mp = MixedPrecisionPolicy(
            param_dtype=core.compute_dtype if low else None,
            reduce_dtype=torch.float32 if low else None,
        )
        blocks = set(getattr(model, "_no_split_modules", None) or [])
        for module in model.modules():
            if type(module).__name__ in blocks:
                fully_shard(module, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        core.params = list(model.parameters())
        core.backward = lambda loss: (loss * self.world).backward()
        core.reset_optimizer()

    def _setup_ds(self) -> None:
        import deepspeed

        from trainers.op_build import guard_op_builds

        guard_op_builds()  # a build killed in an earlier run must not wedge this one
        # On CPU, DeepSpeed's communication backend compiles its shared-memory all-reduce op
        # (~60 s on 2 cores, once per machine) for inference tensor parallelism alone; ZeRO
        # training never calls it, so it is not built
        # (the module: the name `torch` in deepspeed.comm is torch itself)
        ds_comm: Any = importlib.import_module("deepspeed.comm.torch")
        ds_comm.build_shm_op = lambda: None
        core, o = self.core, self.spec
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            # backward() accumulates, step() is the boundary: any number of passes a step
            "managed_gradient_accumulation": False,
            "zero_optimization": {"stage": o.zero_stage},
            "gradient_clipping": o.grad_clip,
            # bf16 weights for the passes, fp32 master weights and moments in the optimizer
            "bf16": {"enabled": core.compute_dtype == torch.bfloat16},
            "steps_per_print": 2**31,
            "wall_clock_breakdown": False,
        }
        opt = torch.optim.AdamW(core.params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
        self.engine, core.opt, _, _ = deepspeed.initialize(
            model=core.model, optimizer=opt, config=config, dist_init_required=False
        )
        core.model = self.engine  # ZeRO-3 needs its forwards to go through the engine
        core.backward = lambda loss: self.engine.backward(loss * self.world)

    def _zero_state(self) -> dict[Any, Any]:
        """ZeRO's optimizer state: one entry per flat fp32 partition."""
        opt: Any = self.core.opt
        return opt.optimizer.state

    # -- the client's calls -------------------------------------------------------------

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: dict[str, Any] | None = None
    ) -> ForwardBackwardOutput:
        out = self.core.forward_backward(data, loss_fn, loss_fn_config)
        self._even_out(grad=True)
        if loss_fn == "cross_entropy" and self.rank:
            out.metrics["tokens"] = 0.0  # the whole call's count, reported by rank 0 only
        return self._placed(out, len(data))

    def forward(self, data: list[Datum], loss_fn: str = "cross_entropy") -> ForwardBackwardOutput:
        out = self.core.forward(data, loss_fn)
        with torch.no_grad():
            self._even_out(grad=False)
        return self._placed(out, len(data))

    def _placed(self, out: ForwardBackwardOutput, n: int) -> ForwardBackwardOutput:
        """Outputs at their data's places (None where another worker ran the datum)."""
        full: list[Any] = [None] * n
        order = [i for mb in self.core.passes for i in mb]
        for i, o in zip(order, out.loss_fn_outputs, strict=True):
            full[i] = o
        return ForwardBackwardOutput(full, out.metrics)

    def _even_out(self, grad: bool) -> None:
        """Empty passes (zero loss, zero gradients) up to the busiest worker's count."""
        ids = torch.zeros((1, 1), dtype=torch.long, device=self.core.device)
        for _ in range(self.core.short):
            logits = self.core.model(input_ids=ids, use_cache=False).logits
            if grad:
                self.core.backward(logits.float().sum() * 0.0)

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        core = self.core
        if self.engine is not None:
            for group in core.opt.param_groups:
                group.update(
                    lr=adam.learning_rate,
                    betas=(adam.beta1, adam.beta2),
                    eps=adam.eps,
                    weight_decay=adam.weight_decay,
                )
            self.engine.step()  # clips to optim.grad_clip, steps, zeroes the gradients
            return {"grad_norm": float(self.engine.get_global_grad_norm() or 0.0)}
        if self.strategy == "torch":
            for p in core.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)  # sum: each worker's share of the whole loss
        return core.optim_step(adam)

    def reset_optimizer(self) -> None:
        if self.engine is None:
            self.core.reset_optimizer()
            return
        for state in self._zero_state().values():  # ZeRO's flat fp32 partitions
            for key in ("exp_avg", "exp_avg_sq"):
                state[key].zero_()
            state["step"] = torch.zeros_like(state["step"]) if torch.is_tensor(state["step"]) else 0

    # -- full tensors: weights for the engine, checkpoints -------------------------------

    def _weights(self) -> Iterator[tuple[str, Any, torch.Tensor | None]]:
        """(HF name, the parameter or buffer as placed, its full fp32 tensor on rank 0 or
        None elsewhere), one tensor at a time; tied weights once. Every rank must iterate."""
        from torch.distributed.tensor import DTensor

        module = self.engine.module if self.engine is not None else self.core.model
        params = dict(module.named_parameters())  # tied weights once
        every = dict(module.named_parameters(remove_duplicate=False))
        for name, value in module.state_dict().items():
            if name in every and name not in params:
                continue
            p = params.get(name, value)
            if self.engine is not None and name in params:
                from deepspeed.utils import safe_get_full_fp32_param

                full = safe_get_full_fp32_param(p)
            elif isinstance(value, DTensor):
                full = value.full_tensor()
            else:
                full = value
            yield name, p, (full.detach().float().cpu() if self.rank == 0 else None)

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        """Full weights in the compute dtype on rank 0 (the one copy the engines receive)."""
        dtype = self.core.compute_dtype
        out = {
            k: v.to(dtype if v.is_floating_point() else v.dtype)
            for k, _, v in self._weights()
            if v is not None
        }
        return out if self.rank == 0 else None

    def save_weights(self, directory: str | Path) -> None:
        """The fp32 master weights as an HF model folder, written by rank 0."""
        weights = {k: v.contiguous() for k, _, v in self._weights() if v is not None}
        if self.rank == 0:
            self._write_hf(Path(directory), weights)
        dist.barrier()

    def _write_hf(self, d: Path, weights: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        module = self.engine.module if self.engine is not None else self.core.model
        d.mkdir(parents=True, exist_ok=True)
        save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
        module.config.save_pretrained(d)
        if getattr(module, "generation_config", None) is not None:
            module.generation_config.save_pretrained(d)
        self.core.tokenizer.save_pretrained(d)

    def save_state(self, directory: str | Path) -> None:
        """`model/` (HF folder, fp32 master weights) and `optimizer.pt` (full moments by name)."""
        d = Path(directory)
        weights, moments = {}, {}
        for name, p, full in self._weights():
            if full is not None:
                weights[name] = full.contiguous()
            if isinstance(p, torch.nn.Parameter):
                m = self._moments(p)
                if m is not None:
                    moments[name] = m
        if self.rank == 0:
            self._write_hf(d / "model", weights)
            torch.save({FULL_OPTIMIZER: moments}, d / "optimizer.pt")
        dist.barrier()

    def _moments(self, p: Any) -> dict[str, Any] | None:
        """Adam's step count and full moments of one parameter (every rank calls it)."""
        from torch.distributed.tensor import DTensor

        if self.engine is not None:
            from deepspeed.utils import safe_get_full_optimizer_state

            state: dict[str, Any] = next(iter(self._zero_state().values()), {})
            if not state:
                return None
            out = {k: safe_get_full_optimizer_state(p, k) for k in ("exp_avg", "exp_avg_sq")}
            step = state["step"]
        else:
            state = self.core.opt.state.get(p) or {}
            if not state:
                return None
            out = {
                k: state[k].full_tensor() if isinstance(state[k], DTensor) else state[k]
                for k in ("exp_avg", "exp_avg_sq")
            }
            step = state["step"]
        out = {k: v.detach().float().cpu() for k, v in out.items()}
        return {"step": float(step), **out} if self.rank == 0 else None

    def load_state(self, directory: str | Path, optimizer: bool = True) -> None:
        """What any group (or worker count) saved; CheckpointError when it does not fit.
        `optimizer=False`: the weights only, and a fresh optimizer."""
        d = Path(directory)
        try:
            saved = from_pretrained(d / "model", torch.float32).state_dict()
            extra = (
                torch.load(d / "optimizer.pt", map_location="cpu", weights_only=False)
                if optimizer
                else {FULL_OPTIMIZER: {}}
            )
        except WeightsError as e:
            raise CheckpointError(str(e)) from None
        if FULL_OPTIMIZER in extra:
            moments = extra[FULL_OPTIMIZER]
        else:  # the one-process learner's optimizer.state_dict(): parameters by position
            state = extra["optimizer"]["state"]
            moments = {
                n: {**state[i], "step": float(state[i]["step"])}
                for i, n in enumerate(self.param_names)
                if i in state
            }
        for name, p, _ in self._weights():
            if name in saved:
                self._set(p, saved[name], moments.get(name))
        if not optimizer:
            self.reset_optimizer()

    def _set(self, p: Any, value: torch.Tensor, moments: dict[str, Any] | None) -> None:
        """One parameter's weight (master and working copy) and its Adam state."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        if self.engine is not None:
            import deepspeed
            from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

            with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                if self.rank == 0 or self.spec.zero_stage < 3:
                    p.data.copy_(value.to(p.dtype))
            if p.requires_grad:
                safe_set_full_fp32_param(p, value)
                if moments:
                    for k in ("exp_avg", "exp_avg_sq"):
                        safe_set_full_optimizer_state(p, moments[k], k)
                    for state in self._zero_state().values():
                        s = state["step"]
                        state["step"] = (
                            torch.full_like(s, moments["step"])
                            if torch.is_tensor(s)
                            else int(moments["step"])
                        )
            return
        if not isinstance(p, torch.nn.Parameter):  # a buffer
            p.copy_(value)
            return
        place = (
            (
                lambda t: distribute_tensor(
                    t.to(p.device), p.device_mesh, p.placements, src_data_rank=None
                )
            )
            if isinstance(p, DTensor)
            else (lambda t: t.to(p.device))
        )
        with torch.no_grad():
            p.copy_(place(value))
        if moments:
            self.core.opt.state[p] = {
                "step": torch.tensor(moments["step"]),
                "exp_avg": place(moments["exp_avg"]),
                "exp_avg_sq": place(moments["exp_avg_sq"]),
            }
