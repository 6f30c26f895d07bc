"""The `torch` learner: the trainable policy, its optimizer, and one update per step.

The loop hands it finished trajectories (token ids, loss mask, one advantage per sequence)
and gets metrics back. Log-probs are computed only at the positions that carry loss: the
vocabulary projection is a large share of a small model's compute, and prompt and
environment positions never need it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainers.algorithms import clipped_policy_loss, kl_k3, linear_warmup_lr
from trainers.config import RunConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Sample:
    """One trajectory as the learner sees it."""

    token_ids: list[int]
    loss_mask: list[int]
    advantage: float


class TorchLearner:
    """Single-process learner (CPU or one GPU)."""

    def __init__(self, model_path: str | Path, cfg: RunConfig) -> None:
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        torch.manual_seed(cfg.trainer.seed)
        self.cfg = cfg
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtype = _DTYPES[cfg.model.dtype]
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype).to(self.device)
        self.model.train()
        self.ref = None
        if cfg.algorithm.kl_coef > 0:  # the reference costs a model's memory: load only when used
            self.ref = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype).to(self.device)
            self.ref.eval().requires_grad_(False)
        o = cfg.optim
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=o.betas, weight_decay=o.weight_decay
        )
        self.opt_steps = 0

    # -- log-probs -----------------------------------------------------------------

    def _token_logprobs(
        self, model: Any, batch: list[Sample], with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob of each trained token: returns (logp_N, entropy_N, seq_index_N).

        N = loss-carrying tokens of the micro-batch, flattened in order.
        """
        width = max(len(s.token_ids) for s in batch)
        ids_B_T = torch.zeros((len(batch), width), dtype=torch.long)
        attn_B_T = torch.zeros((len(batch), width), dtype=torch.long)
        loss_B_T = torch.zeros((len(batch), width), dtype=torch.bool)
        for b, s in enumerate(batch):  # right padding: positions stay 0..len-1
            ids_B_T[b, : len(s.token_ids)] = torch.tensor(s.token_ids)
            attn_B_T[b, : len(s.token_ids)] = 1
            loss_B_T[b, : len(s.loss_mask)] = torch.tensor(s.loss_mask, dtype=torch.bool)
        ids_B_T, attn_B_T, loss_B_T = ids_B_T.to(self.device), attn_B_T.to(self.device), loss_B_T.to(self.device)
        body = getattr(model, model.base_model_prefix)
        hidden_B_T_H = body(input_ids=ids_B_T, attention_mask=attn_B_T).last_hidden_state
        # Position t predicts token t+1: select positions whose *next* token carries loss.
        pred_B_T = loss_B_T[:, 1:]
        hidden_N_H = hidden_B_T_H[:, :-1][pred_B_T]
        targets_N = ids_B_T[:, 1:][pred_B_T]
        seq_N = torch.arange(len(batch), device=self.device)[:, None].expand_as(pred_B_T)[pred_B_T]
        logits_N_V = model.get_output_embeddings()(hidden_N_H).float() / self.cfg.rollout.temperature
        logp_N_V = torch.log_softmax(logits_N_V, dim=-1)
        logp_N = logp_N_V.gather(-1, targets_N[:, None])[:, 0]
        entropy_N = -(logp_N_V.exp() * logp_N_V).sum(-1) if with_entropy else torch.zeros_like(logp_N)
        return logp_N, entropy_N, seq_N

    @torch.no_grad()
    def forward_logprobs(self, batch: list[Sample]) -> list[list[float]]:
        """Per-sequence log-probs of the loss-carrying tokens, in order."""
        out: list[list[float]] = []
        for mb in self._micro_batches(batch):
            logp_N, _, seq_N = self._token_logprobs(self.model, mb)
            for b in range(len(mb)):
                out.append(logp_N[seq_N == b].tolist())
        return out

    def _micro_batches(self, batch: list[Sample]) -> list[list[Sample]]:
        m = self.cfg.algorithm.micro_batch_size
        return [batch[i : i + m] for i in range(0, len(batch), m)]

    # -- update --------------------------------------------------------------------

    def train_step(self, batch: list[Sample]) -> dict[str, float]:
        """One policy update on a step's samples; returns loss and health metrics."""
        a = self.cfg.algorithm
        micro = self._micro_batches(batch)
        n_tokens = max(1, sum(sum(s.loss_mask[1:]) for s in batch))  # token-mean over the step
        old: list[torch.Tensor | None] = [None] * len(micro)
        ref: list[torch.Tensor | None] = [None] * len(micro)
        with torch.no_grad():
            for i, mb in enumerate(micro):
                if a.epochs > 1:  # with one epoch the old policy *is* the current one
                    old[i] = self._token_logprobs(self.model, mb)[0]
                if self.ref is not None:
                    ref[i] = self._token_logprobs(self.ref, mb)[0]
        sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0}
        grad_norm = 0.0
        for _ in range(a.epochs):
            self.opt.zero_grad(set_to_none=True)
            for i, mb in enumerate(micro):
                logp_N, ent_N, seq_N = self._token_logprobs(self.model, mb, with_entropy=True)
                adv_N = torch.tensor([s.advantage for s in mb], device=self.device)[seq_N]
                old_N = old[i] if old[i] is not None else logp_N.detach()
                pg_N, clipped_N = clipped_policy_loss(logp_N, old_N, adv_N, a.clip_eps)
                loss_N = pg_N
                if ref[i] is not None:
                    kl_N = kl_k3(logp_N, ref[i])
                    loss_N = loss_N + a.kl_coef * kl_N
                    sums["kl"] += kl_N.detach().sum().item()
                loss = loss_N.sum() / n_tokens
                loss.backward()
                sums["loss"] += loss.item()
                sums["pg_loss"] += pg_N.detach().sum().item() / n_tokens
                sums["entropy"] += ent_N.detach().sum().item()
                sums["clip_frac"] += clipped_N.sum().item()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip))
            lr = linear_warmup_lr(self.cfg.optim.lr, self.opt_steps, self.cfg.optim.warmup_steps)
            for group in self.opt.param_groups:
                group["lr"] = lr
            if math.isfinite(grad_norm):
                self.opt.step()
            self.opt_steps += 1
        e = a.epochs
        return {
            "loss": sums["loss"] / e,
            "pg_loss": sums["pg_loss"] / e,
            "kl": sums["kl"] / (n_tokens * e),
            "entropy": sums["entropy"] / (n_tokens * e),
            "clip_frac": sums["clip_frac"] / (n_tokens * e),
            "grad_norm": grad_norm,
            "lr": lr,
            "trained_tokens": float(n_tokens),
        }

    # -- weights and checkpoints ---------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current weights (CPU tensors) for the engines."""
        return {k: v.detach().to("cpu") for k, v in self.model.state_dict().items()}

    def save(self, directory: str | Path) -> None:
        """Write an HF-format model folder plus the optimizer state into `directory`."""
        d = Path(directory)
        self.model.save_pretrained(d / "model", safe_serialization=True)
        self.tokenizer.save_pretrained(d / "model")
        torch.save({"optimizer": self.opt.state_dict(), "opt_steps": self.opt_steps}, d / "optimizer.pt")

    def load(self, directory: str | Path) -> None:
        """Restore weights and optimizer saved by `save`."""
        from safetensors.torch import load_file

        d = Path(directory)
        state: dict[str, torch.Tensor] = {}
        for f in sorted((d / "model").glob("*.safetensors")):
            state.update(load_file(str(f)))
        self.model.load_state_dict(state, strict=False)
        extra = torch.load(d / "optimizer.pt", map_location=self.device, weights_only=False)
        self.opt.load_state_dict(extra["optimizer"])
        self.opt_steps = extra["opt_steps"]
