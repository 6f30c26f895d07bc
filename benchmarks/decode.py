"""The hf engine's decode of a left-padded batch, with shared key/value heads read in place
(`agents/attention.py`, what skyrl runs) against transformers' `sdpa`, which repeats them.

    python benchmarks/decode.py                      # smollm2-135m, 4 tasks x 4 samples
    python benchmarks/decode.py --model tiny --repeats 1

Every request is a prompt of random tokens, its length drawn around `--prompt-tokens` (an
SQL task's prompt with its schema is about 420), `--group` samples of each, at temperature
0.8; end-of-sequence is ignored, so every row decodes all `--new-tokens` (some rows of every
other task stop 7 tokens apart, so rows leave the batch as they do in a run). The two sides
alternate, `--repeats` times each, in one process on one model; the table gives each side's
median and the ratio, and says whether both sampled the same tokens with the same log-probs
(they must: the change is exact).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from agents.attention import NAME


def requests(tasks: int, group: int, prompt_tokens: int, new_tokens: int, vocab: int) -> list:
    """`tasks` x `group` requests of a seeded random prompt each (one per task)."""
    from agents.engine import GenRequest

    rng = random.Random(0)
    out = []
    for t in range(tasks):
        n = max(1, prompt_tokens + rng.randrange(-60, 60))
        prompt = [rng.randrange(100, vocab) for _ in range(n)]
        for g in range(group):
            budget = new_tokens - (g * 7 if t % 2 else 0)
            out.append(GenRequest(prompt, max(1, budget), seed=1000 * t + g))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="tiny, smollm2-135m or a folder")
    ap.add_argument("--tasks", type=int, default=4, help="distinct prompts")
    ap.add_argument("--group", type=int, default=4, help="samples of each prompt")
    ap.add_argument("--prompt-tokens", type=int, default=420, help="mean prompt length")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens decoded per row")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each side")
    args = ap.parse_args()

    from agents.engine_hf import HFEngine
    from agents.models import resolve_model

    engine = HFEngine(resolve_model(args.model, quiet=True))
    engine.eos_ids = []  # every row decodes its whole budget
    vocab = min(40000, engine.model.config.vocab_size)
    reqs = requests(args.tasks, args.group, args.prompt_tokens, args.new_tokens, vocab)
    engine.generate(reqs[:2], temperature=0.8)  # warm-up
    sides = {"transformers sdpa (repeats heads)": "sdpa", "skyrl (heads in place)": NAME}
    seconds: dict[str, list[float]] = {s: [] for s in sides}
    outputs: dict[str, list] = {}
    for _ in range(args.repeats):
        for side, impl in sides.items():
            engine.model.set_attn_implementation(impl)
            t0 = time.perf_counter()
            got = engine.generate(reqs, temperature=0.8)
            seconds[side].append(time.perf_counter() - t0)
            outputs[side] = [(r.token_ids, r.logprobs) for r in got]
    rows = len(reqs)
    print(
        f"model {args.model}: {args.tasks} prompts of ~{args.prompt_tokens} tokens x "
        f"{args.group} samples = {rows} rows, {args.new_tokens} new tokens, median of "
        f"{args.repeats}"
    )
    print(f"{'side':36s} {'median s':>9s}  runs")
    for side, ts in seconds.items():
        print(f"{side:36s} {statistics.median(ts):9.2f}  {' '.join(f'{t:.2f}' for t in ts)}")
    base, ours = (statistics.median(ts) for ts in seconds.values())
    print(f"ratio sdpa/skyrl: {base / ours:.2f}x")
    same = len({repr(o) for o in outputs.values()}) == 1
    print(f"same tokens and log-probs: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
