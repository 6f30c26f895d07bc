"""The GPU benchmark: vLLM rollouts against the HBM roofline, one training step, weight sync;
and the learner strategies (one process, FSDP2, DeepSpeed ZeRO-2/3) on N GPUs.

    .venv-vllm/bin/python benchmarks/gpu.py            # every GPU: ~0.5B and ~1.5B, both sections
    .venv-vllm/bin/python benchmarks/gpu.py --smoke    # the same code on the CPU, tiny model
    .venv/bin/python benchmarks/gpu.py --sections learners --smoke   # learners only (no vLLM)

Section `engine`:

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

Section `learners` (trainers/learner_group.py on a private local Ray cluster, as `skyrl
train` starts it): for each strategy, `torch` (the one-process learner, one GPU) and
`fsdp`, `zero2`, `zero3` on `--learner-workers` workers (default: every visible GPU, one
each; NCCL), one update (forward_backward ppo + optim_step) over a fixed batch of B
sequences of L+N random tokens:

- update s: the median of `--repeats` updates after a warm-up one; tokens/s = B*(L+N) / that;
- peak GiB/worker: the largest torch.cuda.max_memory_allocated of the workers over the timed
  updates and gathers (weights, gradients, optimizer state and activations; none on CPU);
- gather s: the median time of `state_dict`, the sync's gather of full tensors into rank 0
  (ready in Ray's object store; the engine section's `sync s` is the load into the engine);
- max diff vs torch: after the warm-up update, the largest |difference| from the one-process
  learner's weights (as sent to the engine, in the model dtype). Adam's first step moves
  each weight by about lr, so a weight whose gradient sign differs is off by ~2*lr:
  in float32 it stays < 1e-5 at lr 1e-3 (the CPU tests' bar); in bfloat16 the workers'
  reductions round differently and up to 2*lr is expected. `>lr/2` is the share of
  weights that are off by more than half a step.

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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = {  # Qwen2.5-0.5B and -1.5B shapes (vocab cut to 32k: the embedding is not the point)
    "0.5b": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
    ),
    "1.5b": dict(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
    ),
}
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

    from agents import engines
    from agents.engine import GenRequest
    from trainers.client import AdamParams, Datum, learner_spec
    from trainers.config import build_config
    from trainers.learner import TorchLearner

    engine = engines.build("vllm", path, dtype=a.dtype)
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
    learner = TorchLearner(path, learner_spec(cfg))
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


STRATEGIES = {
    "torch": ("torch", 2),
    "fsdp": ("fsdp", 2),
    "zero2": ("deepspeed", 2),
    "zero3": ("deepspeed", 3),
}
"""name -> (learner.strategy, learner.zero_stage); `torch` is the one-process learner."""


def _reset_peak(_actor: object) -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak(_actor: object) -> int | None:
    import torch

    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None


def bench_learners(name: str, path: Path, a: argparse.Namespace) -> list[dict]:
    """One row per strategy: the real learner code (trainers/learner_group.py, or the
    one-process learner actor `skyrl train` starts) on the private Ray cluster."""
    import ray
    import torch

    from trainers.client import AdamParams, Datum, learner_spec
    from trainers.config import build_config
    from trainers.learner_group import learner_group
    from trainers.placement import _RayHandle, _Worker, start_ray, worker_env

    start_ray(None)  # loopback, no dashboard, token auth; ray.shutdown() in main stops it
    gpus = 1 if ray.cluster_resources().get("GPU") else 0
    gen = torch.Generator().manual_seed(1)
    seqs = [
        torch.randint(3, 300, (a.prompt_len + a.new_tokens,), generator=gen).tolist()
        for _ in range(a.batch)
    ]
    mask = [0] * a.prompt_len + [1] * a.new_tokens
    data = [
        Datum.from_sequence(ids, mask, a.prompt_len, advantages=[1.0 if i % 2 else -1.0] * len(ids))
        for i, ids in enumerate(seqs)
    ]
    tokens = sum(map(len, seqs))
    adam, clip = AdamParams(a.lr), {"clip_low": 0.2, "clip_high": 0.2}

    def update(handle: Any) -> float:
        t0 = time.perf_counter()
        handle.call("forward_backward", data, "ppo", clip).result()
        handle.call("optim_step", adam).result()
        return time.perf_counter() - t0

    def gather(handle: Any) -> tuple[Any, float]:
        t0 = time.perf_counter()
        ref = handle.call("state_dict").ref
        ray.wait([ref], fetch_local=False)
        return ref, time.perf_counter() - t0

    rows: list[dict] = []
    want: dict[str, Any] = {}
    for label in a.strategies:
        started = time.perf_counter()
        strategy, stage = STRATEGIES[label]
        workers = 1 if label == "torch" else a.learner_workers
        sections = {
            "model": {"name": str(path), "dtype": a.dtype},
            "algorithm": {"micro_batch_size": a.micro_batch},
            "optim": {"lr": a.lr},
            "learner": {"strategy": strategy, "num_workers": workers, "zero_stage": stage},
        }
        if a.threads:
            sections["trainer"] = {"threads": a.threads}
        cfg = build_config([sections], env_name="math")
        handle: Any
        if label == "torch":  # as trainers/placement.py starts the one-process learner
            actor = ray.remote(num_cpus=0)(_Worker).options(num_gpus=gpus)
            handle = _RayHandle(actor.remote("learner", str(path), learner_spec(cfg), worker_env()))
            actors = [handle.actor]
        else:
            handle = learner_group(learner_spec(cfg), str(path), a.threads or os.cpu_count() or 1)
            actors = handle.actors
        update(handle)  # warm-up (and the workers' set-up); the update that is compared
        ref, _ = gather(handle)
        got = {k: v.float() for k, v in ray.get(ref).items()}
        del ref
        ray.get([x.__ray_call__.remote(_reset_peak) for x in actors])
        times, gathers = [], []
        for _ in range(a.repeats):
            times.append(update(handle))
            ref, g = gather(handle)
            gathers.append(g)
            del ref
        peaks = [p for p in ray.get([x.__ray_call__.remote(_peak) for x in actors]) if p]
        for x in actors:
            ray.kill(x)
        if label == "torch":
            want = got
        if want:
            diffs = [(got[k] - want[k]).abs() for k in got]
            worst_f = max(d.max().item() for d in diffs)
            worst = f"{worst_f:.1e}"
            over = a.dtype == "float32" and worst_f > 1e-5
            off = sum(int((d > a.lr / 2).sum()) for d in diffs) / sum(d.numel() for d in diffs)
            share = f"{off:.2%}"
        else:
            worst, share, over = "no torch row", "-", False
        update_s = statistics.median(times)
        rows.append(
            {
                "model": name,
                "strategy": label,
                "workers": str(workers),
                "update s": f"{update_s:.3f}",
                "tokens/s": f"{tokens / update_s:,.0f}",
                "peak GiB/worker": f"{max(peaks) / 2**30:.2f}" if peaks else "n/a (CPU)",
                "gather s": f"{statistics.median(gathers):.3f}",
                "max diff vs torch": "reference" if label == "torch" else worst,
                ">lr/2": "-" if label == "torch" else share,
            }
        )
        if over:
            a.fp32_off.append(f"{name} {label}")
        print(rows[-1], f"({time.perf_counter() - started:.0f} s with set-up)", flush=True)
    return rows


def _table(rows: list[dict]) -> None:
    cols = list(rows[0])
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(r[c] for c in cols) + " |")


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
    ap.add_argument(
        "--sections",
        nargs="+",
        default=["engine", "learners"],
        choices=["engine", "learners"],
        help="engine: rollout/train/sync; learners: torch, FSDP2, DeepSpeed ZeRO-2/3 updates",
    )
    ap.add_argument(
        "--learner-workers",
        type=int,
        default=0,
        help="workers per fsdp/deepspeed group (default: every visible GPU; 2 with --smoke)",
    )
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    ap.add_argument("--micro-batch", type=int, default=8, help="learners: sequences per pass")
    ap.add_argument("--lr", type=float, default=1e-3, help="learners: Adam's learning rate")
    ap.add_argument("--threads", type=int, default=0, help="learners: torch threads (0: all)")
    a = ap.parse_args()
    a.hbm = HBM_BYTES_S[a.gpu]
    a.fp32_off = []  # learners whose float32 update is off the one-process one by > 1e-5
    import importlib.util

    import torch

    if a.smoke:
        SIZES["smoke"] = dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=256,
        )
        a.sizes, a.batch, a.prompt_len, a.new_tokens, a.repeats = ["smoke"], 4, 32, 16, 1
        a.dtype, a.micro_batch = "float32", 2
        a.threads = a.threads or 1  # one per process: 2 threads in a loaded CPU's actor crawl
        a.learner_workers = a.learner_workers or 2  # gloo on the CPU
    elif not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py needs a CUDA GPU (or --smoke for a CPU check of the script)")
    if "learners" in a.sections:
        a.learner_workers = a.learner_workers or torch.cuda.device_count()
        if torch.cuda.is_available() and a.learner_workers > torch.cuda.device_count():
            sys.exit(
                f"--learner-workers {a.learner_workers}: only "
                f"{torch.cuda.device_count()} GPUs (one worker per GPU)"
            )
        if importlib.util.find_spec("deepspeed") is None:
            print(
                "deepspeed is not installed: no zero2/zero3 rows (pip install 'skyrl[deepspeed]')"
            )
            a.strategies = [s for s in a.strategies if not s.startswith("zero")]
    print(f"command: python {' '.join(sys.argv)}")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(
        f"env: torch {torch.__version__}, {device} x{torch.cuda.device_count()}, "
        f"roofline at {a.hbm / 1e12:.2f} TB/s"
    )
    rows, learner_rows = [], []
    try:
        for name in a.sizes:
            with tempfile.TemporaryDirectory() as tmp:
                n = build(Path(tmp), SIZES[name], a.dtype)
                if "engine" in a.sections:
                    rows.append(bench(name, Path(tmp), n, a))
                    print(rows[-1], flush=True)
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
                if "learners" in a.sections:
                    learner_rows += bench_learners(name, Path(tmp), a)
    finally:
        if "learners" in a.sections:
            import ray

            ray.shutdown()  # stops the private cluster bench_learners started
    if rows:
        _table(rows)
    if learner_rows:
        B, T = a.batch, a.prompt_len + a.new_tokens
        print(
            f"\nlearners: {B} sequences x {T} tokens, micro-batch {a.micro_batch}, "
            f"{a.dtype}, lr {a.lr:g}; max diff tolerance: < 1e-5 in float32, "
            f"up to 2*lr = {2 * a.lr:g} in bfloat16"
        )
        _table(learner_rows)
        if a.fp32_off:
            sys.exit(f"over 1e-5 from the one-process learner in float32: {a.fp32_off}")


if __name__ == "__main__":
    main()
