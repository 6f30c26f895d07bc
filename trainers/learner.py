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
    prompt_len: int = 0
    """Leading tokens that are the prompt; samples of a group share them and the learner
    runs that prefix once per group instead of once per sample."""


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
        model: Any = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype)
        self.model = model.to(self.device)
        self.model.train()
        self.ref: Any = None
        if cfg.algorithm.kl_coef > 0:  # the reference costs a model's memory: load only when used
            ref: Any = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype)
            self.ref = ref.to(self.device).eval().requires_grad_(False)
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

        N = loss-carrying tokens of the micro-batch, flattened sequence by sequence.
        """
        P = batch[0].prompt_len
        shared = (
            len(batch) > 1
            and P > 0
            and all(s.token_ids[:P] == batch[0].token_ids[:P] for s in batch)
        )
        hidden_B_T_H, pred_B_T, targets_B_T = (
            self._shared_prefix_hidden if shared else self._hidden
        )(model, batch)
        hidden_N_H = hidden_B_T_H[pred_B_T]
        targets_N = targets_B_T[pred_B_T]
        seq_N = torch.arange(len(batch), device=self.device)[:, None].expand_as(pred_B_T)[pred_B_T]
        logits_N_V = (
            model.get_output_embeddings()(hidden_N_H).float() / self.cfg.rollout.temperature
        )
        logp_N_V = torch.log_softmax(logits_N_V, dim=-1)
        logp_N = logp_N_V.gather(-1, targets_N[:, None])[:, 0]
        entropy_N = (
            -(logp_N_V.exp() * logp_N_V).sum(-1) if with_entropy else torch.zeros_like(logp_N)
        )
        return logp_N, entropy_N, seq_N

    def _pad(self, seqs: list[list[int]], masks: list[list[int]]) -> tuple[torch.Tensor, ...]:
        """Right-pad: (ids_B_T, attention_B_T, loss_B_T)."""
        width = max(map(len, seqs))
        ids_B_T = torch.zeros((len(seqs), width), dtype=torch.long)
        attn_B_T = torch.zeros((len(seqs), width), dtype=torch.long)
        loss_B_T = torch.zeros((len(seqs), width), dtype=torch.bool)
        for b, (ids, mask) in enumerate(zip(seqs, masks, strict=True)):
            ids_B_T[b, : len(ids)] = torch.tensor(ids)
            attn_B_T[b, : len(ids)] = 1
            loss_B_T[b, : len(mask)] = torch.tensor(mask, dtype=torch.bool)
        return ids_B_T.to(self.device), attn_B_T.to(self.device), loss_B_T.to(self.device)

    def _hidden(
        self, model: Any, batch: list[Sample]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every sequence in full: (hidden that predicts each next token, loss mask, targets)."""
        ids_B_T, attn_B_T, loss_B_T = self._pad(
            [s.token_ids for s in batch], [s.loss_mask for s in batch]
        )
        body = getattr(model, model.base_model_prefix)
        hidden_B_T_H = body(input_ids=ids_B_T, attention_mask=attn_B_T).last_hidden_state
        # Position t predicts token t+1.
        return hidden_B_T_H[:, :-1], loss_B_T[:, 1:], ids_B_T[:, 1:]

    def _shared_prefix_hidden(self, model: Any, batch: list[Sample]) -> tuple[torch.Tensor, ...]:
        """The shared prompt once, its KV cache copied to every sample, then the suffixes.

        Gradients flow through the copied cache back into the one prompt pass, so this is
        the same computation as `_hidden`, with the prompt done once instead of G times.
        """
        from transformers import DynamicCache

        P, B = batch[0].prompt_len, len(batch)
        body = getattr(model, model.base_model_prefix)
        cache = DynamicCache()
        prompt_1_P = torch.tensor([batch[0].token_ids[:P]], device=self.device)
        h_prompt_1_P_H = body(
            input_ids=prompt_1_P, past_key_values=cache, use_cache=True
        ).last_hidden_state
        cache.batch_repeat_interleave(B)
        ids_B_S, attn_B_S, loss_B_S = self._pad(
            [s.token_ids[P:] for s in batch], [s.loss_mask[P:] for s in batch]
        )
        S = ids_B_S.shape[1]
        attn = torch.cat(
            [torch.ones((B, P), dtype=attn_B_S.dtype, device=self.device), attn_B_S], dim=1
        )
        pos_B_S = (P + torch.arange(S, device=self.device)).expand(B, S)
        h_suffix_B_S_H = body(
            input_ids=ids_B_S,
            attention_mask=attn,
            position_ids=pos_B_S,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        # Suffix token j is predicted by the prompt's last position (j = 0) or suffix position j-1.
        last_B_1_H = h_prompt_1_P_H[:, -1:].expand(B, 1, -1)
        hidden_B_S_H = torch.cat([last_B_1_H, h_suffix_B_S_H[:, :-1]], dim=1)
        return hidden_B_S_H, loss_B_S, ids_B_S

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
        """Runs of samples that share a prompt (a group), cut to micro_batch_size."""
        m = self.cfg.algorithm.micro_batch_size
        out: list[list[Sample]] = []
        for s in batch:
            last = out[-1] if out else None
            same = (
                last is not None
                and s.prompt_len == last[0].prompt_len
                and s.token_ids[: s.prompt_len] == last[0].token_ids[: s.prompt_len]
            )
            if same and last is not None and len(last) < m:
                last.append(s)
            else:
                out.append([s])
        return out

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
                old_i, ref_i = old[i], ref[i]
                old_N = old_i if old_i is not None else logp_N.detach()
                pg_N, clipped_N = clipped_policy_loss(logp_N, old_N, adv_N, a.clip_eps)
                loss_N = pg_N
                if ref_i is not None:
                    kl_N = kl_k3(logp_N, ref_i)
                    loss_N = loss_N + a.kl_coef * kl_N
                    sums["kl"] += kl_N.detach().sum().item()
                loss = loss_N.sum() / n_tokens
                loss.backward()
                sums["loss"] += loss.item()
                sums["pg_loss"] += pg_N.detach().sum().item() / n_tokens
                sums["entropy"] += ent_N.detach().sum().item()
                sums["clip_frac"] += clipped_N.sum().item()
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
            )
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
        torch.save(
            {"optimizer": self.opt.state_dict(), "opt_steps": self.opt_steps}, d / "optimizer.pt"
        )

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
