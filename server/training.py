"""The models Tinker clients train: a `TrainingClient` over the torch learner, LoRA or full.

LoRA goes through `peft` on the learner's model (attention, MLP and, when the embeddings are
not tied, the unembedding), with only the adapter in the optimizer. Each model has its own
learner (its own copy of the base weights) and its own one-thread executor, so two clients
train at once without touching each other's weights, and one model's calls run in the order
they arrived. Samplers get merged weights (base + B A * scale) as an HF folder.
"""

from __future__ import annotations

import json
import math
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.sampling import Local
from trainers.client import AdamParams, Datum, ForwardBackwardOutput, TrainingClient

LORA_ALPHA = 32
"""LoRA scale numerator: the update is B A * LORA_ALPHA / rank."""
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]


@dataclass
class ModelSpec:
    """What a Tinker client created (a row of the `models` table)."""

    model_id: str
    base_model: str
    lora_rank: int
    """0 = full fine-tuning."""
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True
    seed: int = 0


class TrainModel:
    """One trained model: the training client and the thread its calls run on."""

    def __init__(self, spec: ModelSpec, base_path: Path, threads: int) -> None:
        from trainers.config import RunConfig
        from trainers.learner import TorchLearner

        self.spec = spec
        self.base_path = base_path
        cfg = RunConfig.model_validate(
            {"rollout": {"temperature": 1.0}, "trainer": {"threads": threads, "seed": spec.seed}}
        )
        learner = TorchLearner(base_path, cfg)
        if spec.lora_rank:
            self._add_lora(learner)
        self.learner = learner
        self.client = TrainingClient(Local(learner))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"train-{spec.model_id}")

    def _add_lora(self, learner: Any) -> None:
        import torch
        from peft import LoraConfig, get_peft_model

        s = self.spec
        targets = (ATTN if s.train_attn else []) + (MLP if s.train_mlp else [])
        model = learner.model
        if s.train_unembed and model.get_output_embeddings() is not None:
            if model.config.tie_word_embeddings:  # untie, so the unembedding trains on its own
                head = model.get_output_embeddings()
                head.weight = torch.nn.Parameter(head.weight.detach().clone())
                model.config.tie_word_embeddings = False
            targets.append("lm_head")
        present = {name.rsplit(".", 1)[-1] for name, _ in learner.model.named_modules()}
        targets = [t for t in targets if t in present]
        if not targets:
            raise ValueError("this model has none of the layers LoRA was asked to train")
        torch.manual_seed(s.seed)
        config = LoraConfig(r=s.lora_rank, lora_alpha=LORA_ALPHA, target_modules=targets, lora_dropout=0.0)  # fmt: skip
        learner.model = get_peft_model(learner.model, config).eval()
        learner.params = [p for p in learner.model.parameters() if p.requires_grad]
        learner.reset_optimizer()

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        """Run `fn(*args)` on this model's thread, after the calls queued before it."""
        return self._thread.submit(fn, *args)

    # -- the calls (run on the model's thread) ----------------------------------------

    def forward_backward(
        self, data: list[Datum], loss_fn: str, config: dict[str, Any], forward_only: bool
    ) -> ForwardBackwardOutput:
        if forward_only:  # log-probs at every position, as Tinker's forward returns them
            full = [Datum(d.model_input, {**d.loss_fn_inputs, "weights": [1.0] * len(d.model_input.tokens)}) for d in data]  # fmt: skip
            return self.client.forward(full, "cross_entropy").result()
        return self.client.forward_backward(data, loss_fn, config).result()

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        return self.client.optim_step(adam).result()

    def save_state(self, directory: Path, with_optimizer: bool = True) -> None:
        import torch

        directory.mkdir(parents=True, exist_ok=True)
        if not self.spec.lora_rank:
            self.client.save_state(directory).result()
        else:
            from peft import get_peft_model_state_dict
            from safetensors.torch import save_file

            adapter = get_peft_model_state_dict(self.learner.model)
            save_file({k: v.detach().contiguous().cpu() for k, v in adapter.items()}, directory / "adapter.safetensors")  # fmt: skip
            torch.save({"optimizer": self.learner.opt.state_dict()}, directory / "optimizer.pt")
        (directory / "spec.json").write_text(json.dumps(self.spec.__dict__))

    def load_state(self, directory: Path, with_optimizer: bool) -> None:
        import torch

        if not self.spec.lora_rank:
            if with_optimizer:
                self.client.load_state(directory).result()
            else:
                from agents.weights import load_folder

                load_folder(self.learner.model, directory / "model")
                self.learner.reset_optimizer()
            return
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        adapter = load_file(str(directory / "adapter.safetensors"))
        result = set_peft_model_state_dict(self.learner.model, adapter)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"checkpoint {directory.name} holds tensors this model lacks")
        if with_optimizer:
            state = torch.load(directory / "optimizer.pt", map_location=self.learner.device, weights_only=True)  # fmt: skip
            self.learner.opt.load_state_dict(state["optimizer"])
        else:
            self.learner.reset_optimizer()

    def merged_state_dict(self) -> dict[str, Any]:
        """Full weights for a sampler: the base's names, each LoRA delta added in."""
        if not self.spec.lora_rank:
            return self.learner.state_dict()
        base = self.learner.model.get_base_model()
        out: dict[str, Any] = {}
        for name, value in base.state_dict().items():
            if "lora_" in name:
                continue
            out[name.replace(".base_layer.", ".")] = value.detach().float().clone()
        for name, module in base.named_modules():
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {}):
                out[f"{name}.weight"] += module.get_delta_weight("default").detach().float()
        return out

    def save_for_sampler(self, directory: Path) -> None:
        """An HF model folder of the merged weights (the base folder's config and tokenizer)."""
        from safetensors.torch import save_file

        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in self.base_path.iterdir():
            if f.is_file() and not f.name.endswith((".safetensors", ".bin")) and f.name != "model.safetensors.index.json":  # fmt: skip
                shutil.copy(f, tmp / f.name)
        config = json.loads((tmp / "config.json").read_text())
        tied = bool(self.learner.model.config.tie_word_embeddings)
        if config.get("tie_word_embeddings", False) != tied:  # LoRA untied the unembedding
            config["tie_word_embeddings"] = tied
            (tmp / "config.json").write_text(json.dumps(config, indent=2))
        state = self.merged_state_dict()
        seen: set[int] = set()
        tensors = {}
        for k, v in state.items():  # tied weights are written once (as save_pretrained does)
            if v.data_ptr() in seen:
                continue
            seen.add(v.data_ptr())
            tensors[k] = v.detach().contiguous().cpu()  # safetensors writes host memory
        if self.learner.model.config.tie_word_embeddings:  # the loader ties it back
            tensors.pop("lm_head.weight", None)
        save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt"})
        shutil.rmtree(directory, ignore_errors=True)
        tmp.rename(directory)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


def adam_params(raw: dict[str, Any]) -> AdamParams:
    """Tinker's AdamParams (grad_clip_norm 0 = no clipping) as the learner's."""
    clip = float(raw.get("grad_clip_norm", 0.0) or 0.0)
    return AdamParams(
        learning_rate=float(raw.get("learning_rate", 1e-4)),
        beta1=float(raw.get("beta1", 0.9)),
        beta2=float(raw.get("beta2", 0.95)),
        eps=float(raw.get("eps", 1e-12)),
        weight_decay=float(raw.get("weight_decay", 0.0)),
        grad_clip_norm=clip if clip > 0 else math.inf,
    )
