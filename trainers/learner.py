"""The `torch` learner: a model and its optimizer behind the training client (CPU or one GPU).

It implements `trainers.client.Learner`: `forward_backward` runs the loss named by the
client (trainers/losses.py) over one optimizer step's data, in micro-batches whose
gradients accumulate until `optim_step`. The algorithm (advantages, KL in the reward, the
update schedule) is the client's business. With `value_head=True` it is PPO's critic: the
same transformer with a zero-initialised scalar head, trained with the `value` loss.
Log-probs come from the model's own forward (as the engine's do), kept only at positions
that predict a trained token (`logits_to_keep`): the vocabulary projection is a large share
of a small model's compute, and prompt and environment positions never need it. Values
are the critic's head on its body's hidden state at the same positions.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from agents.attention import use_shared_heads
from agents.memory import keep_freed_memory
from agents.weights import WeightsError, from_pretrained, load_weights
from trainers.algorithms import entropy_from_logp, value_loss
from trainers.checkpoint import CheckpointError
from trainers.client import AdamParams, Datum, ForwardBackwardOutput, LearnerSpec, micro_batches
from trainers.estimators import rows
from trainers.losses import policy_loss, sequence_weights

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Sample:
    """One sequence as the model code sees it: whole tokens, 0/1 loss mask, prompt length."""

    token_ids: list[int]
    loss_mask: list[int]
    prompt_len: int = 0
    """Leading tokens that are the prompt; samples of a group share them and the learner
    runs that prefix once per group instead of once per sample."""

    @staticmethod
    def of(d: Datum) -> Sample:
        mask = [0, *(1 if w else 0 for w in d.loss_fn_inputs["weights"])]
        return Sample(d.tokens, mask, d.model_input.prompt_len)

    @property
    def n_loss(self) -> int:
        """Loss-carrying tokens (the first token is never predicted)."""
        return sum(self.loss_mask[1:])


def _outputs(model: Any, logits: bool, keep_K: torch.Tensor, **inputs: Any) -> torch.Tensor:
    """The model's logits through its own forward (logits_to_keep = the positions keep_K),
    or its body's last hidden state there: out_B_K_F."""
    if logits:
        return model(**inputs, logits_to_keep=keep_K).logits
    body = getattr(model, model.base_model_prefix)
    return body(**inputs).last_hidden_state[:, keep_K]


class TorchLearner:
    """Single-process learner (CPU or one GPU)."""

    def __init__(self, model_path: str | Path, spec: LearnerSpec, value_head: bool = False) -> None:
        if spec.threads:
            torch.set_num_threads(spec.threads)
        keep_freed_memory()  # every step's tensors reuse the last step's pages
        torch.manual_seed(spec.seed)
        self.spec = spec
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        # One of `world` learner workers (trainers/learner_dist.py): this one runs every
        # world-th forward pass from `rank` and scales its loss so the group's summed
        # gradients are the whole batch's; `backward` is the strategy's (DeepSpeed's engine).
        self.rank, self.world = 0, 1
        self.backward: Any = lambda loss: loss.backward()
        self.passes: list[list[int]] = []
        """The micro-batches (data indices) the last call ran here, in order."""
        self.short = 0
        """Passes fewer than the busiest worker's in the last call (collectives must pair)."""
        self.share_prompts = True
        """A micro-batch sharing its prompt runs it once (`_shared_prefix`); off under a
        wrapper that gathers sharded weights per forward (FSDP2, DeepSpeed), whose backward
        would find the prompt pass's gathered weights freed."""
        # Trained weights stay float32 (the master copy) and the forward runs under autocast
        # in model.dtype: an AdamW step of ~lr = 1e-5 is below bf16's resolution for most
        # weights, so bf16 weights stepped in place would mostly not move.
        self.compute_dtype = _DTYPES[spec.dtype]
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        model: Any = from_pretrained(model_path, torch.float32)
        use_shared_heads(model)  # no-grad passes read shared key/value heads in place
        # eval mode throughout, the update included (as veRL and OpenRLHF): with dropout on,
        # the frozen pass and the update would score the same weights differently and the
        # step-0 ratio would not be 1
        self.model = model.to(self.device).eval()
        self.head: torch.nn.Linear | None = None
        self.params = list(self.model.parameters())
        if value_head:
            # zero-initialised: the first values are 0, the first advantages are the returns;
            # V_t is read where token t is predicted, the state in which it is sampled
            self.head = torch.nn.Linear(model.config.hidden_size, 1, dtype=torch.float32)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)
            self.head.to(self.device)
            body = getattr(model, model.base_model_prefix)
            self.params = [*body.parameters(), *self.head.parameters()]
        self.lora = bool(spec.lora_rank) and not value_head
        """The policy trains LoRA adapters (peft) on frozen base weights."""
        if self.lora:
            self._add_lora()
        self.reset_optimizer()

    def _add_lora(self) -> None:
        """Wrap the model with peft adapters on the spec's layers (those it has); only they
        train. An adapter on `lm_head` unties tied embeddings first, so the unembedding
        trains on its own and the merged weights keep its update."""
        from peft import LoraConfig, get_peft_model

        s, model = self.spec, self.model
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        targets = [t for t in s.lora_targets if t in present]
        if not targets:
            raise ValueError(
                f"the model has none of the LoRA target layers ({', '.join(s.lora_targets)})"
            )
        head = model.get_output_embeddings()
        if "lm_head" in targets and head is not None and model.config.tie_word_embeddings:
            head.weight = torch.nn.Parameter(head.weight.detach().clone())
            model.config.tie_word_embeddings = False
        torch.manual_seed(s.seed)  # the adapters' initial values, whatever loading drew
        config = LoraConfig(
            r=s.lora_rank,
            lora_alpha=s.lora_alpha,
            target_modules=targets,
            lora_dropout=0.0,
            modules_to_save=list(s.lora_modules_to_save) or None,
        )
        self.model = get_peft_model(model, config).eval()
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def reset_optimizer(self) -> None:
        """A fresh AdamW (its hyper-parameters come with every `optim_step`)."""
        s = self.spec
        # fused: one kernel per parameter instead of seven (sqrt, div, lerp, ...), each of
        # which reads and writes the whole tensor; on a CPU the optimizer step is memory-bound
        # (0.38 s -> 0.17 s for SmolLM2, docs/benchmarks.md). Same update rule.
        self.opt = torch.optim.AdamW(
            self.params,
            lr=s.lr,
            betas=s.betas,
            weight_decay=s.weight_decay,
            fused=self.device.type in ("cpu", "cuda"),
        )

    # -- log-probs -----------------------------------------------------------------

    def _token_logprobs(
        self,
        model: Any,
        batch: list[Sample],
        with_entropy: bool = False,
        temperature: float | None = None,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob of each trained token: returns (logp_N, entropy_N, seq_index_N).

        N = loss-carrying tokens of the micro-batch, flattened sequence by sequence. The
        temperature defaults to the sampler's (RL ratios must use the distribution the
        engine sampled from); supervised steps pass 1. The entropy carries gradients only
        with `entropy_grad` (an entropy bonus); as a metric it is computed outside autograd.
        """
        t = self.spec.temperature if temperature is None else temperature
        logits_N_V, targets_N, seq_N = self._loss_outputs(model, batch, logits=True)
        logits_N_V = logits_N_V.float() / t
        logp_N_V = torch.log_softmax(logits_N_V, dim=-1)
        logp_N = logp_N_V.gather(-1, targets_N[:, None])[:, 0]
        if not with_entropy:
            entropy_N = torch.zeros_like(logp_N)
        elif entropy_grad:
            entropy_N = entropy_from_logp(logp_N_V)
        else:
            with torch.no_grad():
                entropy_N = entropy_from_logp(logp_N_V)
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
        shared = (  # a group runs one model call per pass in every worker: plain passes only
            self.world == 1
            and self.share_prompts
            and len(batch) > 1
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
        The prompt pass runs the body only, over all but the prompt's last token: that token
        starts every sample's suffix pass, so the one pass that projects to the vocabulary
        (through the model's own forward) covers every prediction. A vocabulary projection
        of its own for that one position would cost a whole embedding-sized weight gradient.
        """
        from transformers import DynamicCache

        P, B = batch[0].prompt_len, len(batch)
        cache = DynamicCache()
        if P > 1:
            body = getattr(model, model.base_model_prefix)
            prompt_1_Q = torch.tensor([batch[0].token_ids[: P - 1]], device=self.device)
            body(input_ids=prompt_1_Q, past_key_values=cache, use_cache=True)
            cache.batch_repeat_interleave(B)
        # Each row: the prompt's last token, then the sample's suffix; column c predicts
        # suffix token c (the row's last token predicts nothing and is dropped).
        ids_B_R, attn_B_R, loss_B_R = self._pad(
            [s.token_ids[P - 1 :] for s in batch], [s.loss_mask[P - 1 :] for s in batch]
        )
        S = ids_B_R.shape[1] - 1
        attn = torch.cat(
            [torch.ones((B, P - 1), dtype=attn_B_R.dtype, device=self.device), attn_B_R[:, :S]],
            dim=1,
        )
        pred_B_S = loss_B_R[:, 1:]
        keep_K = pred_B_S.any(0).nonzero()[:, 0]
        out_B_K_F = _outputs(
            model,
            logits,
            keep_K,
            input_ids=ids_B_R[:, :S],
            attention_mask=attn,
            position_ids=(P - 1 + torch.arange(S, device=self.device)).expand(B, S),
            past_key_values=cache,
            use_cache=True,
        )
        return out_B_K_F, pred_B_S[:, keep_K], ids_B_R[:, 1:][:, keep_K]

    # -- the client's calls ---------------------------------------------------------

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: dict[str, Any] | None = None
    ) -> ForwardBackwardOutput:
        """Loss over `data` (one optimizer step's worth: aggregation spans it) and its
        gradients, accumulated micro-batch by micro-batch."""
        c = loss_fn_config or {}
        batch = [Sample.of(d) for d in data]
        if loss_fn == "cross_entropy":
            return self._cross_entropy(batch, c)
        if loss_fn == "value":
            return self._value(data, batch, c)
        lengths = [s.n_loss for s in batch]
        w_B = sequence_weights(lengths, c)
        sums: dict[str, float] = defaultdict(float)
        outputs: list[dict[str, list[float]]] = []
        for mb in self._micro(batch):
            samples = [batch[i] for i in mb]
            logp_N, ent_N, _ = self._token_logprobs(
                self.model, samples, with_entropy=True, entropy_grad=bool(c.get("entropy_coef"))
            )
            logp_B_T, mask_B_T = rows(list(logp_N.split([lengths[i] for i in mb])))
            ent_B_T, _ = rows(list(ent_N.split([lengths[i] for i in mb])))
            inputs = self._inputs(data, mb)
            old_B_T = inputs.get("logprobs", logp_B_T.detach())
            part, part_sums = policy_loss(
                loss_fn,
                c,
                logp_B_T,
                ent_B_T,
                mask_B_T,
                inputs["advantages"],
                old_B_T,
                torch.tensor([w_B[i] for i in mb], device=self.device),
                inputs.get("sampler_logprobs"),
                inputs.get("ref_logprobs"),
            )
            self.backward(part)
            sums["loss:sum"] += part.item()
            for k, v in part_sums.items():
                sums[k] += v
            outputs += [{"logprobs": x.tolist()} for x in _split(logp_B_T, mask_B_T)]
        return ForwardBackwardOutput(outputs, dict(sums))

    @torch.no_grad()
    def forward(self, data: list[Datum], loss_fn: str = "cross_entropy") -> ForwardBackwardOutput:
        """Log-probs (or, for `value`, values) at each datum's loss positions; no gradient."""
        batch = [Sample.of(d) for d in data]
        out: list[dict[str, list[float]]] = []
        for mb in self._micro(batch):
            samples = [batch[i] for i in mb]
            counts = [s.n_loss for s in samples]
            if loss_fn == "value":
                key, x_N = "values", self._values(samples)
            else:
                key, x_N = "logprobs", self._token_logprobs(self.model, samples)[0]
            out += [{key: x.tolist()} for x in x_N.split(counts)]
        return ForwardBackwardOutput(out, {})

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        """Clip the accumulated gradients, step (skipped when their norm is not finite), zero."""
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, adam.grad_clip_norm))
        for group in self.opt.param_groups:
            group.update(
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        if math.isfinite(grad_norm):
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return {"grad_norm": grad_norm}

    # -- losses beyond the policy's -------------------------------------------------

    def _cross_entropy(self, batch: list[Sample], c: dict[str, Any]) -> ForwardBackwardOutput:
        """Negative log-likelihood of the loss tokens: summed (Tinker's), or with
        `loss_agg=token-mean` divided by the call's loss tokens. Supervised examples rarely
        share a prompt, so micro-batches are plain runs of `micro_batch_size`."""
        tokens = max(1, sum(s.n_loss for s in batch))
        norm = tokens if c.get("loss_agg") == "token-mean" else 1
        size = self.spec.micro_batch_size
        total = 0.0
        outputs: list[dict[str, list[float]]] = []
        plan = [list(range(i, min(i + size, len(batch)))) for i in range(0, len(batch), size)]
        for mb in self._mine(plan):
            samples = [batch[i] for i in mb]
            # supervised learning is at temperature 1, whatever the sampler's temperature
            logp_N, _, _ = self._token_logprobs(self.model, samples, temperature=1.0)
            loss = -logp_N.sum() / norm
            self.backward(loss)
            total += loss.item()
            counts = [s.n_loss for s in samples]
            outputs += [{"logprobs": x.tolist()} for x in logp_N.detach().split(counts)]
        return ForwardBackwardOutput(outputs, {"loss:sum": total, "tokens": float(tokens)})

    def _value(
        self, data: list[Datum], batch: list[Sample], c: dict[str, Any]
    ) -> ForwardBackwardOutput:
        """PPO's clipped value loss (`value_clip`), a token mean over the call's loss tokens;
        needs `returns` and the rollout-time `values`."""
        call_tokens = max(1, sum(s.n_loss for s in batch))
        sums: dict[str, float] = defaultdict(float)
        outputs: list[dict[str, list[float]]] = []
        for mb in self._micro(batch):
            samples = [batch[i] for i in mb]
            values_N = self._values(samples)
            values_B_T, mask_B_T = rows(list(values_N.split([s.n_loss for s in samples])))
            inputs = self._inputs(data, mb)
            loss, clip_frac = value_loss(
                values_B_T, inputs["values"], inputs["returns"], mask_B_T, c["value_clip"]
            )
            n = float(mask_B_T.sum())
            self.backward(loss * (n / call_tokens))
            sums["value_loss:sum"] += float(loss.detach()) * n
            sums["value_clip_frac:sum"] += float(clip_frac) * n
            outputs += [{"values": x.tolist()} for x in _split(values_B_T.detach(), mask_B_T)]
        return ForwardBackwardOutput(outputs, dict(sums))

    def _values(self, samples: list[Sample]) -> torch.Tensor:
        """V at each loss position: value_N."""
        if self.head is None:
            raise ValueError("the value loss needs a learner built with value_head=True")
        hidden_N_H = self._loss_outputs(self.model, samples, logits=False)[0]
        return self.head(hidden_N_H.to(self.head.weight.dtype)).float()[:, 0]

    def _micro(self, batch: list[Sample]) -> list[list[int]]:
        a = self.spec
        keys = [(s.prompt_len, tuple(s.token_ids[: s.prompt_len])) for s in batch]
        size = min(a.micro_batch_size, a.mini_batch_size or a.micro_batch_size)
        return self._mine(micro_batches(keys, size))

    def _mine(self, plan: list[list[int]]) -> list[list[int]]:
        """The passes this worker runs: all of them alone, every world-th in a group."""
        self.passes = plan[self.rank :: self.world]
        self.short = -(-len(plan) // self.world) - len(self.passes)
        return self.passes

    def _inputs(self, data: list[Datum], mb: list[int]) -> dict[str, torch.Tensor]:
        """The micro-batch's per-token inputs at the loss positions, as rows: key -> x_B_T."""
        keys = [k for k in data[mb[0]].loss_fn_inputs if k not in ("target_tokens", "weights")]
        return {
            k: rows([torch.tensor(data[i].at_loss(k), device=self.device) for i in mb])[0]
            for k in keys
        }

    # -- weights and checkpoints ---------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current weights for the engines: CPU tensors in the compute dtype (with LoRA,
        merged: W + B A * scale, one tensor at a time, under the base model's names)."""

        def out(v: torch.Tensor) -> torch.Tensor:
            return v.detach().to("cpu", self.compute_dtype if v.is_floating_point() else v.dtype)

        if not self.lora:
            return {k: out(v) for k, v in self.model.state_dict().items()}
        return {k: out(v) for k, v in self._merged().items()}

    @torch.no_grad()
    def _merged(self) -> dict[str, torch.Tensor]:
        """The base model's state dict with each adapter's delta added to its weight; tensors
        without an adapter are the model's own (no copy)."""
        base = self.model.get_base_model()
        adapted = {
            f"{name}.base_layer.weight": module
            for name, module in base.named_modules()
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {})
        }
        merged: dict[str, torch.Tensor] = {}
        for name, value in base.state_dict().items():
            if "lora_" in name or ".original_module." in name:  # modules_to_save: the copy
                continue
            name = name.replace(".modules_to_save.default.", ".")
            if name in adapted:
                value = value + adapted[name].get_delta_weight("default").to(value.dtype)
            merged[name.replace(".base_layer.", ".")] = value
        return merged

    def save_weights(self, directory: str | Path) -> None:
        """The weights as an HF model folder (what an engine loads); with LoRA, merged."""
        with _no_deepspeed_probe():
            if self.lora:
                self.model.get_base_model().save_pretrained(
                    Path(directory), state_dict=self._merged(), safe_serialization=True
                )
            else:
                self.model.save_pretrained(Path(directory), safe_serialization=True)
        self.tokenizer.save_pretrained(Path(directory))

    def save_state(self, directory: str | Path) -> None:
        """Weights and optimizer into `directory`: the policy as `model/` + `optimizer.pt`,
        a critic as `critic.pt`, so both share one checkpoint folder."""
        d = Path(directory)
        if self.head is not None:
            state = {"model": self.model.state_dict(), "head": self.head.state_dict()}
            torch.save({**state, "optimizer": self.opt.state_dict()}, d / "critic.pt")
            return
        if self.lora:  # the adapter and the base model's path (peft's folder), not the model
            with _no_deepspeed_probe():
                self.model.save_pretrained(d / "model", safe_serialization=True)
        else:
            self.save_weights(d / "model")
        torch.save({"optimizer": self.opt.state_dict()}, d / "optimizer.pt")

    def _load_adapter(self, folder: Path) -> None:
        """The adapter peft saved in `folder`; CheckpointError, nothing changed, when it is
        not this model's (missing, unknown or differently shaped tensors)."""
        from peft import get_peft_model_state_dict, set_peft_model_state_dict
        from safetensors.torch import load_file

        try:
            saved = load_file(str(folder / "adapter_model.safetensors"))
        except (OSError, ValueError) as e:
            raise CheckpointError(f"the LoRA adapter in {folder} is unreadable ({e})") from None
        own = get_peft_model_state_dict(self.model)
        if set(saved) != set(own) or any(saved[k].shape != own[k].shape for k in own):
            raise CheckpointError(
                f"the LoRA adapter in {folder} does not fit learner.lora (rank, target_modules)"
            )
        set_peft_model_state_dict(self.model, saved)

    def load_state(self, directory: str | Path, optimizer: bool = True) -> None:
        """Restore what `save_state` wrote (`optimizer=False`: the weights only, and a fresh
        optimizer); CheckpointError, with nothing changed, when a weight is missing (tied
        ones aside) or the optimizer is unreadable."""
        d = Path(directory)
        if self.head is not None:
            state = torch.load(d / "critic.pt", map_location=self.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.head.load_state_dict(state["head"])
            self.opt.load_state_dict(state["optimizer"])
            return
        if (d / "model" / "adapter_config.json").is_file() != self.lora:
            raise CheckpointError(
                "the checkpoint holds a LoRA adapter and learner.lora.rank is 0"
                if not self.lora
                else "the checkpoint holds a full model and learner.lora.rank is not 0"
            )
        if self.lora:
            self._load_adapter(d / "model")
            if not optimizer:
                self.reset_optimizer()
                return
            extra = torch.load(d / "optimizer.pt", map_location=self.device, weights_only=True)
            self.opt.load_state_dict(extra["optimizer"])
            return
        try:  # read through transformers (saved names may differ from in-memory ones)
            saved = from_pretrained(d / "model", torch.float32).state_dict()
            if optimizer:
                extra = torch.load(d / "optimizer.pt", map_location=self.device, weights_only=True)
            load_weights(self.model, saved)
        except WeightsError as e:
            raise CheckpointError(str(e)) from None
        if not optimizer:
            self.reset_optimizer()
            return
        if "full_optimizer" in extra:  # a learner group's (trainers/learner_dist.py): by name
            names = [n for n, _ in self.model.named_parameters()]
            full = extra["full_optimizer"]
            state = {
                i: {**full[n], "step": torch.tensor(full[n]["step"])}
                for i, n in enumerate(names)
                if n in full
            }
            extra["optimizer"] = {
                "state": state,
                "param_groups": self.opt.state_dict()["param_groups"],
            }
        self.opt.load_state_dict(extra["optimizer"])


@contextlib.contextmanager
def _no_deepspeed_probe() -> Iterator[None]:
    """`save_pretrained` unwraps the model through accelerate, which imports deepspeed
    wherever it is installed (2+ s and a "Setting accelerator to CPU" line in every process
    that saves) only to ask whether the model is a DeepSpeedEngine. A process that never
    imported deepspeed holds none, so the answer is no without the import."""
    try:
        from accelerate.utils import other
    except ImportError:
        other = None
    if other is None or "deepspeed" in sys.modules or not hasattr(other, "is_deepspeed_available"):
        yield
        return
    probe = other.is_deepspeed_available
    other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        other.is_deepspeed_available = probe


def _split(x_B_T: torch.Tensor, mask_B_T: torch.Tensor) -> list[torch.Tensor]:
    """Rows back to ragged 1-D tensors."""
    return [x_B_T[b, : int(mask_B_T[b].sum())].detach() for b in range(len(x_B_T))]
