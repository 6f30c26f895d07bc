"""The GPU benchmark: vLLM rollouts against the HBM roofline, one training step, weight sync.

    .venv/bin/python benchmarks/gpu.py                 # one H200: ~0.5B and ~1.5B, < 8 min
    .venv-vllm/bin/python benchmarks/gpu.py --smoke    # the same code on the CPU, tiny model

For each size, a randomly initialised Qwen2-architecture model is built from its config
(no hub; bf16, tiny's tokenizer: the ids are random anyway) and served by the `vllm` engine
(agents/engine_vllm.py) beside the torch learner on the same GPU:

- rollout: B prompts of L random tokens, N new tokens each (EOS ignored, so every request
  decodes N steps). tokens/s = B*N / time; decode steps/s ~ N / time. The roofline: a
  decode step reads every weight once, so steps/s <= HBM bandwidth / weight bytes, and
  `roofline` is the share of that bound the engine reaches (the KV cache reads are extra
  work it does, so 100% is out of reach at large B);
- train: one `forward_backward` (ppo loss) over the B sequences + one `optim_step`;
- sync: `update_weights` of the learner's state dict into the engine, in place.

No figures from this script are in docs/benchmarks.md yet: no GPU was lent when it was
written. Run it once where one is and paste its table there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = {  # Qwen2.5-0.5B and -1.5B shapes (vocab cut to 32k: the embedding is not the point)
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, intermediate_size=8960),
}  # fmt: skip
HBM_BYTES_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}


def build(out: Path, size: dict, dtype: str) -> int:
    """A random model folder; returns its parameter count."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from agents.models import resolve_model

    config = Qwen2Config(
        vocab_size=32768, max_position_embeddings=4096, tie_word_embeddings=True, **size
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(resolve_model("tiny", quiet=True)).save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def bench(name: str, path: Path, n_params: int, a: argparse.Namespace) -> dict:
    import torch

    from agents.engine import GenRequest
    from agents.engine_vllm import VLLMEngine
    from trainers.client import AdamParams, Datum
    from trainers.config import build_config
    from trainers.learner import TorchLearner

    engine = VLLMEngine(path, dtype=a.dtype)
    engine.ignore_eos = True
    gen = torch.Generator().manual_seed(0)
    vocab = 300  # ids every tokenizer here has
    prompts = [
        torch.randint(3, vocab, (a.prompt_len,), generator=gen).tolist() for _ in range(a.batch)
    ]
    reqs = [GenRequest(p, a.new_tokens, seed=i) for i, p in enumerate(prompts)]
    engine.generate(reqs[:2], temperature=1.0)  # warm-up
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        results = engine.generate(reqs, temperature=1.0)
        times.append(time.perf_counter() - t0)
    gen_s = statistics.median(times)
    tokens = sum(len(r.token_ids) for r in results)
    steps_s = a.new_tokens / gen_s
    weight_bytes = n_params * (2 if a.dtype != "float32" else 4)
    bound = a.hbm / weight_bytes

    cfg = build_config(
        [{"model": {"name": str(path), "dtype": a.dtype}, "rollout": {"temperature": 1.0}}],
        env_name="math",
    )
    learner = TorchLearner(path, cfg)
    data = [
        Datum.from_sequence(
            q.prompt_ids + r.token_ids,
            [0] * len(q.prompt_ids) + [1] * len(r.token_ids),
            len(q.prompt_ids),
            advantages=[1.0 if i % 2 else -1.0] * (len(q.prompt_ids) + len(r.token_ids)),
        )
        for i, (q, r) in enumerate(zip(reqs, results, strict=True))
    ]
    t0 = time.perf_counter()
    learner.forward_backward(data, "ppo", {"loss_agg": "token-mean"})
    learner.optim_step(AdamParams(1e-6))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    syncs = []
    for v in range(a.repeats):
        t0 = time.perf_counter()
        engine.update_weights(learner.state_dict(), v + 1)
        syncs.append(time.perf_counter() - t0)
    engine.close()
    del engine, learner
    return {
        "model": name,
        "params": f"{n_params / 1e9:.2f}B",
        "tokens/s": f"{tokens / gen_s:,.0f}",
        "decode steps/s": f"{steps_s:.1f}",
        "roofline steps/s": f"{bound:.0f}",
        "roofline": f"{steps_s / bound:.0%}",
        "train step s": f"{train_s:.2f}",
        "sync s": f"{statistics.median(syncs):.3f}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--batch", type=int, default=64, help="B: requests per rollout")
    ap.add_argument("--prompt-len", type=int, default=256, help="L: prompt tokens")
    ap.add_argument("--new-tokens", type=int, default=512, help="N: tokens per request")
    ap.add_argument("--repeats", type=int, default=3, help="timed rollouts and syncs (median)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--gpu", default="H200", choices=list(HBM_BYTES_S), help="for the roofline")
    ap.add_argument("--smoke", action="store_true", help="CPU check of the script: tiny sizes")
    a = ap.parse_args()
    a.hbm = HBM_BYTES_S[a.gpu]
    import torch

    if a.smoke:
        SIZES["smoke"] = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=256)  # fmt: skip
        a.sizes, a.batch, a.prompt_len, a.new_tokens, a.repeats = ["smoke"], 4, 32, 16, 1
        a.dtype = "float32"
    elif not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py needs a CUDA GPU (or --smoke for a CPU check of the script)")
    print(f"command: python {' '.join(sys.argv)}")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"env: torch {torch.__version__}, {device}, roofline at {a.hbm / 1e12:.2f} TB/s")
    rows = []
    for name in a.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            n = build(Path(tmp), SIZES[name], a.dtype)
            rows.append(bench(name, Path(tmp), n, a))
            print(rows[-1], flush=True)
    cols = list(rows[0])
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(r[c] for c in cols) + " |")


if __name__ == "__main__":
    main()
