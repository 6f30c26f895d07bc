"""`hf` engine: batched sampling with a KV cache on plain transformers, CPU or GPU.

A hand-written decode loop rather than `model.generate`, because the trainer needs three
things generate does not give together: a seed per request (results independent of how
requests are batched, which exact resume relies on), the log-prob of every sampled token,
and stop strings checked on the decoded continuation. Finished rows are dropped from the
batch and its cache, so one long answer does not make the others pay.

In-flight weight updates (the async schedule, whose engine actor runs calls on several
threads): every forward pass holds one lock, and weights pushed while requests decode wait
until the next decode step, where they are swapped in; the running requests continue on
them (their KV cache, computed by the old weights, stays) and each token records the
version that produced it. Nothing is drained or restarted.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, DynamicCache

from agents.attention import use_shared_heads
from agents.engine import GenRequest, GenResult
from agents.memory import keep_freed_memory
from agents.weights import check_weights, from_pretrained, load_folder, load_weights

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class HFEngine:
    """Holds one copy of the policy for sampling."""

    def __init__(self, model_path: str | Path, dtype: str = "float32", threads: int = 0) -> None:
        if threads:
            torch.set_num_threads(threads)
        keep_freed_memory()  # every decode step's tensors reuse the last step's pages
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        model: Any = from_pretrained(model_path, _DTYPES[dtype])
        self.model = model.to(self.device).eval()
        use_shared_heads(self.model)  # no copy of the key/value cache per step
        self.eos_ids = eos_ids(self.model.generation_config, self.tokenizer)
        """Token ids that end a continuation (`finish_reason` `eos`)."""
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        """Longest sequence (prompt and continuation) it serves."""
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.eos_ids[0]
        self.version = 0
        self._lock = threading.Lock()  # held by each forward pass and each weight swap
        self._decoding = 0  # generate calls running
        self._pending: list[tuple[dict[str, Any], int, threading.Event]] = []

    def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        """Load new policy weights: a full state dict (tied weights may be absent);
        WeightsError, with nothing changed, when a tensor is missing or misshapen. While
        requests decode (on other threads) the swap waits for their next decode step, and
        this returns once the new weights are live."""
        check_weights(self.model.state_dict(), named_tensors)
        with self._lock:
            if not self._decoding:
                load_weights(self.model, named_tensors)
                self.version = version
                return
            live = threading.Event()
            self._pending.append((named_tensors, version, live))
        live.wait()

    def _swap_pending(self) -> None:
        """Apply the newest staged weights (caller holds the lock): a step boundary."""
        if self._pending:
            weights, version, _ = self._pending[-1]
            load_weights(self.model, weights)
            self.version = version
            for *_, live in self._pending:
                live.set()
            self._pending = []

    def load(self, model_path: str | Path, version: int) -> None:
        """Load weights from an HF folder (a checkpoint), e.g. on resume."""
        with self._lock:
            load_folder(self.model, model_path)
            self.version = version

    @torch.inference_mode()
    def compute_logprobs(
        self, sequences: list[list[int]], temperature: float = 1.0, chunk: int = 8
    ) -> list[list[float]]:
        """Log-prob of every token given the ones before it (the first token gets 0.0), under
        softmax(logits / temperature): a reference model's scores, `chunk` sequences a pass."""
        out: list[list[float]] = []
        for i in range(0, len(sequences), chunk):
            seqs = sequences[i : i + chunk]
            width = max(map(len, seqs))
            ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for b, s in enumerate(seqs):
                ids[b, : len(s)] = torch.tensor(s)
                mask[b, : len(s)] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            with self._lock:
                logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            logp = torch.log_softmax(logits / temperature, -1).gather(-1, ids[:, 1:, None])[..., 0]
            out += [[0.0, *logp[b, : len(s) - 1].tolist()] for b, s in enumerate(seqs)]
        return out

    @torch.inference_mode()
    def generate(
        self, requests: list[GenRequest], *, temperature: float, top_p: float = 1.0
    ) -> list[GenResult]:
        """Continue every request; temperature 0 means greedy."""
        if not requests:
            return []
        with self._lock:
            self._decoding += 1
        try:
            return self._generate(requests, temperature, top_p)
        finally:
            with self._lock:
                self._decoding -= 1
                if not self._decoding:
                    self._swap_pending()

    def _generate(
        self, requests: list[GenRequest], temperature: float, top_p: float
    ) -> list[GenResult]:
        n = len(requests)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        out_ver: list[list[int]] = [[] for _ in range(n)]
        finish = ["length"] * n

        # Prefill each distinct prompt once (a GRPO group is G copies of one prompt), then
        # copy its cache rows. Left-pad so every row's next token sits in the last column.
        unique: dict[tuple[int, ...], int] = {}
        row_of = [unique.setdefault(tuple(r.prompt_ids), len(unique)) for r in requests]
        prompts = list(unique)
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for u, p in enumerate(prompts):
            ids[u, width - len(p) :] = torch.tensor(p)
            mask[u, width - len(p) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits, version = self._forward(ids, mask, pos, cache)  # [U, V]
        # torch.multinomial needs its generator on the probabilities' device (CPU or CUDA)
        gens = [torch.Generator(device=logits.device).manual_seed(r.seed) for r in requests]
        if len(prompts) < n:
            expand = torch.tensor(row_of, device=self.device)
            cache.batch_select_indices(expand)
            logits, mask, pos = logits[expand], mask[expand], pos[expand]

        rows = list(range(n))  # request index of each live batch row
        steps = max(r.max_new_tokens for r in requests)
        for t in range(steps):
            tokens, lps = self._sample(logits, temperature, top_p, [gens[i] for i in rows])
            # one device-to-host copy per step, not two per row (each one a GPU sync)
            tokens_B, lps_B = tokens.tolist(), lps.tolist()
            keep: list[int] = []
            for b, i in enumerate(rows):
                tok = tokens_B[b]
                out_ids[i].append(tok)
                out_lp[i].append(lps_B[b])
                out_ver[i].append(version)
                done = self._finished(i, requests[i], out_ids[i], tok, t, finish)
                if not done:
                    keep.append(b)
            if not keep:
                break
            if len(keep) < len(rows):
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                mask, pos, tokens = mask[idx], pos[idx], tokens[idx]
                rows = [rows[b] for b in keep]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits, version = self._forward(tokens.view(-1, 1), mask, pos, cache)
        return [
            GenResult(
                token_ids=out_ids[i],
                logprobs=out_lp[i],
                finish_reason=finish[i],
                version=out_ver[i][0],
                token_versions=out_ver[i],
            )
            for i in range(n)
        ]

    def _forward(self, ids, mask, pos, cache) -> tuple[torch.Tensor, int]:
        """Next-token logits, and the version of the weights that computed them (staged
        weights are swapped in first: this is the step boundary)."""
        with self._lock:
            self._swap_pending()
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=pos[:, -ids.shape[1] :],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            return out.logits[:, -1, :].float(), self.version

    @staticmethod
    def _sample(logits, temperature, top_p, gens) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample one token per row; return it and its log-prob under softmax(logits / T)."""
        if temperature <= 0:
            tokens = logits.argmax(-1)
            lps = torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
            return tokens, lps
        logp = torch.log_softmax(logits / temperature, -1)
        probs = logp.exp()
        if top_p < 1.0:
            sorted_p, order = probs.sort(-1, descending=True)
            cut = sorted_p.cumsum(-1) - sorted_p > top_p
            sorted_p = sorted_p.masked_fill(cut, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        tokens = torch.stack(
            [torch.multinomial(probs[b], 1, generator=g)[0] for b, g in enumerate(gens)]
        )
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]

    def _finished(
        self, i: int, req: GenRequest, ids: list[int], tok: int, t: int, finish: list[str]
    ) -> bool:
        if tok in self.eos_ids:
            finish[i] = "eos"
            return True
        if req.stop:
            # A stop string is a handful of tokens at most: decode only the tail.
            tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
            if any(s in tail for s in req.stop):
                finish[i] = "stop"
                return True
        if t + 1 >= req.max_new_tokens:
            finish[i] = "length"
            return True
        return False


def eos_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """The model's end-of-sequence ids: its generation config's, and the tokenizer's."""
    ids = generation_config.eos_token_id if generation_config else None
    if ids is None:
        ids = tokenizer.eos_token_id
    ids = ids if isinstance(ids, list) else [ids]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return [i for i in ids if i is not None]
