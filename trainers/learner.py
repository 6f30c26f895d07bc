"""The `torch` learner: the trainable policy, its optimizer, and one update per step.

The loop hands it finished trajectories (token ids, loss mask, the episode's reward and, for
the group estimators, one advantage per sequence) and gets metrics back; ppo and
reinforce_pp build token-level advantages here, where the critic and the reference live.
Log-probs come from the model's own forward (as the engine's do), kept only at positions that
predict a trained token (`logits_to_keep`): the vocabulary projection is a large share of a
small model's compute, and prompt and environment positions never need it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from agents.weights import WeightsError, from_pretrained, load_folder, load_weights
from trainers.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    aggregation_weights,
    entropy_from_logits,
    explained_variance,
    gae_advantages,
    gspo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    masked_whiten,
    ppo_clip_loss,
    reinforce_pp_advantages,
    scheduled_lr,
    tis_weights,
    value_loss,
)
from trainers.checkpoint import CheckpointError
from trainers.config import RunConfig
from trainers.critic import Critic

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Sample:
    """One trajectory as the learner sees it."""

    token_ids: list[int]
    loss_mask: list[int]
    advantage: float = 0.0
    """Sequence advantage (GRPO family); the token-level estimators (ppo, reinforce_pp) build
    their own from `reward`."""
    prompt_len: int = 0
    """Leading tokens that are the prompt; samples of a group share them and the learner
    runs that prefix once per group instead of once per sample."""
    reward: float = 0.0
    """The episode's (shaped) reward."""
    logprobs: list[float] | None = None
    """The sampler's log-prob of each token (truncated importance sampling); None = unused."""

    @property
    def n_loss(self) -> int:
        """Loss-carrying tokens (the first token is never predicted)."""
        return sum(self.loss_mask[1:])


_KL = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def _rows(xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-aligned rows of 1-D tensors: (x_B_T, mask_B_T); keeps gradients."""
    width = max([len(x) for x in xs] + [1])
    x_B_T = torch.stack([torch.nn.functional.pad(x, (0, width - len(x))) for x in xs])
    mask_B_T = torch.zeros_like(x_B_T, dtype=torch.bool)
    for b, x in enumerate(xs):
        mask_B_T[b, : len(x)] = True
    return x_B_T, mask_B_T


def _behaviour_logprobs(s: Sample) -> torch.Tensor:
    """The sampler's log-probs at the loss positions (0 where the engine gave none)."""
    lps = s.logprobs or [0.0] * len(s.token_ids)
    return torch.tensor([lp for lp, m in zip(lps[1:], s.loss_mask[1:], strict=True) if m])


def _outputs(model: Any, logits: bool, keep_K: torch.Tensor, **inputs: Any) -> torch.Tensor:
    """The model's logits through its own forward (logits_to_keep = the positions keep_K),
    or its body's last hidden state there: out_B_K_F."""
    if logits:
        return model(**inputs, logits_to_keep=keep_K).logits
    body = getattr(model, model.base_model_prefix)
    return body(**inputs).last_hidden_state[:, keep_K]


def _unrows(x_B_T: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    return [x_B_T[b, :n] for b, n in enumerate(lengths)]


class TorchLearner:
    """Single-process learner (CPU or one GPU)."""

    def __init__(self, model_path: str | Path, cfg: RunConfig) -> None:
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        torch.manual_seed(cfg.trainer.seed)
        self.cfg = cfg
        a = cfg.algorithm
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        # Trained weights stay float32 (the master copy) and the forward runs under autocast
        # in model.dtype: an AdamW step of ~lr = 1e-5 is below bf16's resolution for most
        # weights, so bf16 weights stepped in place would mostly not move.
        dtype = _DTYPES[cfg.model.dtype]
        self.compute_dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        model: Any = from_pretrained(model_path, torch.float32)
        # eval mode throughout, the update included (as veRL and OpenRLHF): with dropout on,
        # the frozen pass and the update would score the same weights differently and the
        # step-0 ratio would not be 1
        self.model = model.to(self.device).eval()
        self.ref: Any = None
        if a.kl_coef > 0:  # the reference costs a model's memory: load only when used
            ref: Any = from_pretrained(model_path, dtype)
            self.ref = ref.to(self.device).eval().requires_grad_(False)
        self.critic = (
            Critic(model_path, cfg, torch.float32).to(self.device) if a.name == "ppo" else None
        )
        o = cfg.optim
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=o.betas, weight_decay=o.weight_decay
        )
        self.opt_steps = 0
        self._sft_opt: torch.optim.Optimizer | None = None
        self.kl_ctl: FixedKLController | AdaptiveKLController = (
            AdaptiveKLController(a.kl_coef, a.kl_target, a.kl_horizon)
            if a.kl_target
            else FixedKLController(a.kl_coef)
        )

    # -- log-probs -----------------------------------------------------------------

    def _token_logprobs(
        self,
        model: Any,
        batch: list[Sample],
        with_entropy: bool = False,
        temperature: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob of each trained token: returns (logp_N, entropy_N, seq_index_N).

        N = loss-carrying tokens of the micro-batch, flattened sequence by sequence. The
        temperature defaults to the sampler's (RL ratios must use the distribution the
        engine sampled from); supervised steps pass 1.
        """
        t = self.cfg.rollout.temperature if temperature is None else temperature
        logits_N_V, targets_N, seq_N = self._loss_outputs(model, batch, logits=True)
        logits_N_V = logits_N_V.float() / t
        logp_N_V = torch.log_softmax(logits_N_V, dim=-1)
        logp_N = logp_N_V.gather(-1, targets_N[:, None])[:, 0]
        entropy_N = entropy_from_logits(logits_N_V) if with_entropy else torch.zeros_like(logp_N)
        return logp_N, entropy_N, seq_N

    def _loss_outputs(
        self, model: Any, batch: list[Sample], logits: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What predicts each trained token: (out_N_F, targets_N, seq_N).

        out is the model's logits (logits=True) or its body's last hidden state (the critic).
        Logits come from the model's own forward, so what an architecture does after lm_head
        (Gemma2's final softcap, Granite's logits_scaling) is done here as in the engine.
        """
        P = batch[0].prompt_len
        shared = (
            len(batch) > 1
            and P > 0
            and all(s.token_ids[:P] == batch[0].token_ids[:P] for s in batch)
        )
        with torch.autocast(
            self.device.type, self.compute_dtype, enabled=self.compute_dtype != torch.float32
        ):
            out_B_C_F, pred_B_C, targets_B_C = (self._shared_prefix if shared else self._plain)(
                model, batch, logits
            )
        seq_N = torch.arange(len(batch), device=self.device)[:, None].expand_as(pred_B_C)[pred_B_C]
        return out_B_C_F[pred_B_C], targets_B_C[pred_B_C], seq_N

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

    def _plain(
        self, model: Any, batch: list[Sample], logits: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every sequence in full: (outputs at the kept positions, loss mask, targets there)."""
        ids_B_T, attn_B_T, loss_B_T = self._pad(
            [s.token_ids for s in batch], [s.loss_mask for s in batch]
        )
        # Position t predicts token t+1; only positions that predict a trained token are kept.
        pred_B_T = loss_B_T[:, 1:]
        keep_K = pred_B_T.any(0).nonzero()[:, 0]
        out_B_K_F = _outputs(
            model, logits, keep_K, input_ids=ids_B_T, attention_mask=attn_B_T, use_cache=False
        )
        return out_B_K_F, pred_B_T[:, keep_K], ids_B_T[:, 1:][:, keep_K]

    def _shared_prefix(
        self, model: Any, batch: list[Sample], logits: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The shared prompt once, its KV cache copied to every sample, then the suffixes.

        Gradients flow through the copied cache back into the one prompt pass, so this is
        the same computation as `_plain`, with the prompt done once instead of G times.
        """
        from transformers import DynamicCache

        P, B = batch[0].prompt_len, len(batch)
        cache = DynamicCache()
        prompt_1_P = torch.tensor([batch[0].token_ids[:P]], device=self.device)
        # the prompt's last position predicts every sample's first suffix token
        last = torch.tensor([P - 1], device=self.device)
        first_1_1_F = _outputs(
            model, logits, last, input_ids=prompt_1_P, past_key_values=cache, use_cache=True
        )
        cache.batch_repeat_interleave(B)
        ids_B_S, attn_B_S, loss_B_S = self._pad(
            [s.token_ids[P:] for s in batch], [s.loss_mask[P:] for s in batch]
        )
        S = ids_B_S.shape[1]
        attn = torch.cat(
            [torch.ones((B, P), dtype=attn_B_S.dtype, device=self.device), attn_B_S], dim=1
        )
        pos_B_S = (P + torch.arange(S, device=self.device)).expand(B, S)
        # Suffix token j >= 1 is predicted by suffix position j - 1: keep those that are trained.
        keep_K = loss_B_S[:, 1:].any(0).nonzero()[:, 0]
        suffix_B_K_F = _outputs(
            model,
            logits,
            keep_K,
            input_ids=ids_B_S,
            attention_mask=attn,
            position_ids=pos_B_S,
            past_key_values=cache,
            use_cache=True,
        )
        # column 0 predicts suffix token 0, column 1 + k suffix token keep_K[k] + 1
        out_B_C_F = torch.cat([first_1_1_F.expand(B, 1, -1), suffix_B_K_F], dim=1)
        pred_B_C = torch.cat([loss_B_S[:, :1], loss_B_S[:, 1:][:, keep_K]], dim=1)
        targets_B_C = torch.cat([ids_B_S[:, :1], ids_B_S[:, 1:][:, keep_K]], dim=1)
        return out_B_C_F, pred_B_C, targets_B_C

    @torch.no_grad()
    def forward_logprobs(self, batch: list[Sample]) -> list[list[float]]:
        """Per-sequence log-probs of the loss-carrying tokens, in order."""
        out: list[list[float]] = []
        for mb in self._micro_batches(batch):
            logp_N, _, seq_N = self._token_logprobs(self.model, [batch[i] for i in mb])
            for b in range(len(mb)):
                out.append(logp_N[seq_N == b].tolist())
        return out

    def _micro_batches(self, batch: list[Sample]) -> list[list[int]]:
        """Indices of runs of samples that share a prompt (a group), cut to the micro-batch
        size (and never larger than a mini-batch)."""
        a = self.cfg.algorithm
        m = min(a.micro_batch_size, a.mini_batch_size or a.micro_batch_size)
        out: list[list[int]] = []
        for i, s in enumerate(batch):
            first = batch[out[-1][0]] if out else None
            same = (
                first is not None
                and s.prompt_len == first.prompt_len
                and s.token_ids[: s.prompt_len] == first.token_ids[: s.prompt_len]
            )
            if same and len(out[-1]) < m:
                out[-1].append(i)
            else:
                out.append([i])
        return out

    def _mini_batches(self, micro: list[list[int]]) -> list[list[list[int]]]:
        """Consecutive micro-batches grouped into optimizer steps of <= mini_batch_size
        sequences (0 = one optimizer step for the whole batch)."""
        size = self.cfg.algorithm.mini_batch_size
        out: list[list[list[int]]] = []
        for mb in micro:
            if out and (not size or sum(map(len, out[-1])) + len(mb) <= size):
                out[-1].append(mb)
            else:
                out.append([mb])
        return out

    # -- update --------------------------------------------------------------------

    @torch.no_grad()
    def _frozen(
        self, batch: list[Sample], micro: list[list[int]], need_old: bool
    ) -> dict[str, list[torch.Tensor | None]]:
        """Per-sample numbers fixed for the whole step, at the loss positions: the policy's
        log-probs before the update (`old`), the reference's (`ref`), the critic's values."""
        out: dict[str, list[torch.Tensor | None]] = {
            k: [None] * len(batch) for k in ("old", "ref", "values")
        }
        for mb in micro:
            samples = [batch[i] for i in mb]
            counts = [s.n_loss for s in samples]
            parts: dict[str, tuple[torch.Tensor, ...]] = {}
            if need_old:
                parts["old"] = self._token_logprobs(self.model, samples)[0].split(counts)
            if self.ref is not None:
                parts["ref"] = self._token_logprobs(self.ref, samples)[0].split(counts)
            if self.critic is not None:
                hidden_N_H = self._loss_outputs(self.critic.model, samples, logits=False)[0]
                parts["values"] = self.critic.values(hidden_N_H).split(counts)
            for key, per_sample in parts.items():
                for i, x in zip(mb, per_sample, strict=True):
                    out[key][i] = x
        return out

    @torch.no_grad()
    def _advantages(
        self, batch: list[Sample], frozen: dict[str, list[Any]], beta: float
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Token advantages per sample (and PPO's returns). Sequence estimators were computed
        by the loop; REINFORCE++ and PPO need the step's KL and values, so they live here."""
        a = self.cfg.algorithm
        lengths = [s.n_loss for s in batch]
        dev = self.device
        if a.name not in ("reinforce_pp", "ppo"):
            return [
                torch.full((n,), s.advantage, device=dev)
                for s, n in zip(batch, lengths, strict=True)
            ], None
        rewards_B = torch.tensor([s.reward for s in batch], device=dev)
        zeros = [torch.zeros(n, device=dev) for n in lengths]
        kl_B_T, mask_B_T = _rows(
            [_KL[a.kl_estimator](o, r) for o, r in zip(frozen["old"], frozen["ref"], strict=True)]
            if a.kl_in_reward and self.ref is not None
            else zeros
        )
        beta_r = beta if a.kl_in_reward else 0.0
        if a.name == "reinforce_pp":
            adv_B_T = reinforce_pp_advantages(rewards_B, kl_B_T, mask_B_T, beta_r)
            return _unrows(adv_B_T, lengths), None
        # PPO: the episode reward on the last model token, the KL penalty on every token
        token_rewards_B_T = -beta_r * kl_B_T
        for b, n in enumerate(lengths):
            if n:
                token_rewards_B_T[b, n - 1] += rewards_B[b]
        values_B_T, _ = _rows([v for v in frozen["values"]])
        adv_B_T, returns_B_T = gae_advantages(
            token_rewards_B_T, values_B_T, mask_B_T, a.gamma, a.lam
        )
        adv_B_T = masked_whiten(adv_B_T, mask_B_T)
        return _unrows(adv_B_T, lengths), _unrows(returns_B_T, lengths)

    def train_step(self, batch: list[Sample]) -> dict[str, float]:
        """PPO-style update on one step's samples: `ppo_epochs` passes of mini-batches, each
        an optimizer step over accumulated micro-batches. Returns loss and health metrics."""
        a, o = self.cfg.algorithm, self.cfg.optim
        micro = self._micro_batches(batch)
        minis = self._mini_batches(micro)
        n_updates = a.ppo_epochs * len(minis)
        # with a single optimizer step the old policy *is* the current one: skip its forward
        need_old = n_updates > 1 or a.tis_cap is not None or (a.kl_in_reward and a.kl_coef > 0)
        frozen = self._frozen(batch, micro, need_old)
        beta = self.kl_ctl.value
        adv, returns = self._advantages(batch, frozen, beta)
        lengths = [s.n_loss for s in batch]
        constant = a.loss_agg_constant or self.cfg.rollout.max_new_tokens * self.cfg.env.max_turns
        total_updates = self.cfg.trainer.max_steps * n_updates
        sums: dict[str, float] = defaultdict(float)
        grad_norm = critic_norm = lr = 0.0
        for _ in range(a.ppo_epochs):
            for mini in minis:
                idx = [i for mb in mini for i in mb]
                w_B = aggregation_weights(
                    torch.tensor([lengths[i] for i in idx]), a.loss_agg, constant
                )
                weight = dict(zip(idx, w_B.tolist(), strict=True))
                mini_tokens = max(1, sum(lengths[i] for i in idx))
                self.opt.zero_grad(set_to_none=True)
                if self.critic is not None:
                    self.critic.opt.zero_grad(set_to_none=True)
                for mb in mini:
                    part = self._micro_loss(batch, mb, frozen, adv, weight, beta, sums)
                    part.backward()
                    sums["loss"] += part.item()
                    if self.critic is not None and returns is not None:
                        self._critic_loss(batch, mb, frozen, returns, mini_tokens, sums).backward()
                lr = scheduled_lr(
                    o.lr, self.opt_steps, o.warmup_steps, total_updates, o.schedule, o.min_lr_ratio
                )
                grad_norm = float(
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.grad_clip)
                )
                for group in self.opt.param_groups:
                    group["lr"] = lr
                if math.isfinite(grad_norm):
                    self.opt.step()
                if self.critic is not None:
                    critic_norm = self.critic.step(lr * a.critic_lr / o.lr)
                self.opt_steps += 1
        return self._step_metrics(batch, frozen, adv, returns, sums, n_updates, beta) | {
            "grad_norm": grad_norm,
            "lr": lr,
            **({"critic/grad_norm": critic_norm} if self.critic is not None else {}),
        }

    def _micro_loss(
        self,
        batch: list[Sample],
        mb: list[int],
        frozen: dict[str, list[Any]],
        adv: list[torch.Tensor],
        weight: dict[int, float],
        beta: float,
        sums: dict[str, float],
    ) -> torch.Tensor:
        """The weighted policy loss of one micro-batch (its share of the mini-batch aggregate)."""
        a = self.cfg.algorithm
        samples = [batch[i] for i in mb]
        counts = [s.n_loss for s in samples]
        logp_N, ent_N, _ = self._token_logprobs(self.model, samples, with_entropy=True)
        logp_B_T, mask_B_T = _rows(list(logp_N.split(counts)))
        ent_B_T, _ = _rows(list(ent_N.split(counts)))
        old = [frozen["old"][i] for i in mb]
        old_B_T = _rows(old)[0] if old[0] is not None else logp_B_T.detach()
        adv_B_T, _ = _rows([adv[i] for i in mb])
        if a.name == "gspo":
            pg_B_T, clipped_B_T = gspo_loss(
                logp_B_T, old_B_T, adv_B_T, mask_B_T, a.clip_low, a.clip_high
            )
        else:
            pg_B_T, clipped_B_T = ppo_clip_loss(
                logp_B_T, old_B_T, adv_B_T, a.clip_low, a.clip_high, a.dual_clip
            )
        loss_B_T = pg_B_T
        if a.tis_cap is not None:
            behaviour = [_behaviour_logprobs(s).to(self.device) for s in samples]
            behaviour_B_T, _ = _rows(behaviour)
            tis_B_T = tis_weights(old_B_T, behaviour_B_T, a.tis_cap)
            loss_B_T = loss_B_T * tis_B_T
            sums["tis_weight"] += float((tis_B_T * mask_B_T).sum())
        if self.ref is not None:
            ref_B_T, _ = _rows([frozen["ref"][i] for i in mb])
            kl_B_T = _KL[a.kl_estimator](logp_B_T, ref_B_T)
            if not a.kl_in_reward:
                loss_B_T = loss_B_T + beta * kl_B_T
            sums["kl"] += float((kl_B_T.detach() * mask_B_T).sum())
        if a.entropy_coef:
            loss_B_T = loss_B_T - a.entropy_coef * ent_B_T
        w_B = torch.tensor([weight[i] for i in mb], device=loss_B_T.device)
        m = mask_B_T.float()
        sums["tokens"] += float(m.sum())
        sums["pg_loss"] += float((pg_B_T.detach() * m).sum())
        sums["entropy"] += float((ent_B_T.detach() * m).sum())
        sums["clip_frac"] += float((clipped_B_T * m).sum())
        # the tokens were sampled from the old policy: mean(old - new) estimates KL(old || new)
        sums["approx_kl"] += float(((old_B_T - logp_B_T.detach()) * m).sum())
        return (loss_B_T * m * w_B[:, None]).sum()

    def _critic_loss(
        self,
        batch: list[Sample],
        mb: list[int],
        frozen: dict[str, list[Any]],
        returns: list[torch.Tensor],
        mini_tokens: int,
        sums: dict[str, float],
    ) -> torch.Tensor:
        """The clipped value loss of one micro-batch, weighted to a token mean over its mini-batch."""
        assert self.critic is not None
        samples = [batch[i] for i in mb]
        counts = [s.n_loss for s in samples]
        hidden_N_H = self._loss_outputs(self.critic.model, samples, logits=False)[0]
        values_N = self.critic.values(hidden_N_H)
        values_B_T, mask_B_T = _rows(list(values_N.split(counts)))
        old_B_T, _ = _rows([frozen["values"][i] for i in mb])
        returns_B_T, _ = _rows([returns[i] for i in mb])
        loss, clip_frac = value_loss(
            values_B_T, old_B_T, returns_B_T, mask_B_T, self.cfg.algorithm.value_clip
        )
        n = float(mask_B_T.sum())
        sums["value_loss"] += float(loss.detach()) * n
        sums["value_clip_frac"] += float(clip_frac) * n
        return loss * (n / mini_tokens)

    def _step_metrics(
        self,
        batch: list[Sample],
        frozen: dict[str, list[Any]],
        adv: list[torch.Tensor],
        returns: list[torch.Tensor] | None,
        sums: dict[str, float],
        n_updates: int,
        beta: float,
    ) -> dict[str, float]:
        a = self.cfg.algorithm
        seen = max(1.0, sums["tokens"])
        adv_all = torch.cat(adv) if adv else torch.zeros(0)
        out = {
            "loss": sums["loss"] / n_updates,
            "pg_loss": sums["pg_loss"] / seen,
            "kl": sums["kl"] / seen,
            "kl_coef": beta,
            "entropy": sums["entropy"] / seen,
            "clip_frac": sums["clip_frac"] / seen,
            "approx_kl": sums["approx_kl"] / seen,
            "adv/mean": float(adv_all.mean()) if adv_all.numel() else 0.0,
            "adv/std": float(adv_all.std()) if adv_all.numel() > 1 else 0.0,
            "updates": float(n_updates),
            "trained_tokens": float(sum(s.n_loss for s in batch)),
        }
        if a.tis_cap is not None:
            out["tis/mean_weight"] = sums["tis_weight"] / seen
        if self.critic is not None and returns is not None:
            values_B_T, mask_B_T = _rows([v for v in frozen["values"]])
            returns_B_T, _ = _rows(returns)
            out["value_loss"] = sums["value_loss"] / seen
            out["value_clip_frac"] = sums["value_clip_frac"] / seen
            out["explained_variance"] = float(explained_variance(values_B_T, returns_B_T, mask_B_T))
            out["returns/mean"] = float(masked_mean(returns_B_T, mask_B_T.float()))
        # the controller moves after the step, on the KL this step measured
        self.kl_ctl.update(out["kl"], len(batch))
        return out

    # -- supervised warm-up --------------------------------------------------------

    def sft_step(self, batch: list[Sample], lr: float) -> dict[str, float]:
        """One supervised step (warm-up before RL): mean negative log-likelihood of the
        loss-carrying tokens, with an AdamW of its own so the RL optimizer starts fresh."""
        if self._sft_opt is None:
            o = self.cfg.optim
            self._sft_opt = torch.optim.AdamW(
                self.model.parameters(), lr=lr, betas=o.betas, weight_decay=o.weight_decay
            )
        for group in self._sft_opt.param_groups:
            group["lr"] = lr
        tokens = max(1, sum(s.n_loss for s in batch))
        size = self.cfg.algorithm.micro_batch_size
        self._sft_opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(0, len(batch), size):
            # supervised learning is at temperature 1, whatever the sampler's temperature
            logp_N, _, _ = self._token_logprobs(self.model, batch[i : i + size], temperature=1.0)
            loss = -logp_N.sum() / tokens
            loss.backward()
            total += loss.item()
        grad_norm = float(
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
        )
        if math.isfinite(grad_norm):
            self._sft_opt.step()
        return {"sft_loss": total, "grad_norm": grad_norm, "tokens": float(tokens)}

    def end_warmup(self, reference_dir: str | Path) -> None:
        """Drop the warm-up optimizer. When KL is on, the reference becomes the warmed-up
        policy (RL's KL then keeps near what the warm-up taught, not the base model), saved
        to `reference_dir` for resume."""
        self._sft_opt = None
        if self.ref is not None:
            self.ref.load_state_dict(self.model.state_dict())
            self.ref.save_pretrained(Path(reference_dir), safe_serialization=True)

    def load_reference(self, reference_dir: str | Path) -> None:
        """On resume: the reference saved by `end_warmup` (no-op without KL)."""
        if self.ref is not None:
            try:
                load_folder(self.ref, reference_dir)
            except WeightsError as e:
                raise CheckpointError(str(e)) from None

    # -- weights and checkpoints ---------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current weights for the engines: CPU tensors in the compute dtype."""
        return {
            k: v.detach().to("cpu", self.compute_dtype if v.is_floating_point() else v.dtype)
            for k, v in self.model.state_dict().items()
        }

    def save(self, directory: str | Path) -> None:
        """Write an HF-format model folder plus the optimizer state into `directory`."""
        d = Path(directory)
        self.model.save_pretrained(d / "model", safe_serialization=True)
        self.tokenizer.save_pretrained(d / "model")
        torch.save(
            {
                "optimizer": self.opt.state_dict(),
                "opt_steps": self.opt_steps,
                "kl_coef": self.kl_ctl.value,
            },
            d / "optimizer.pt",
        )
        if self.critic is not None:
            self.critic.save(d)

    def load(self, directory: str | Path) -> None:
        """Restore weights and optimizer saved by `save`; CheckpointError, with nothing
        changed, when a weight is missing (tied ones aside) or the optimizer is unreadable."""
        d = Path(directory)
        try:  # read through transformers (saved names may differ from in-memory ones)
            saved = from_pretrained(d / "model", torch.float32).state_dict()
            extra = torch.load(d / "optimizer.pt", map_location=self.device, weights_only=False)
            load_weights(self.model, saved)
        except WeightsError as e:
            raise CheckpointError(str(e)) from None
        self.opt.load_state_dict(extra["optimizer"])
        self.opt_steps = extra["opt_steps"]
        self.kl_ctl.value = extra.get("kl_coef", self.kl_ctl.value)
        if self.critic is not None:
            self.critic.load(d, self.device)
