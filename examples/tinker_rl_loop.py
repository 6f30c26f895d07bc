"""GRPO on a toy task through Tinker's own client, against `skyrl serve` (tinker-cookbook style).

    skyrl serve --model tiny --port 8000 &
    python examples/tinker_rl_loop.py --base-url http://127.0.0.1:8000 --steps 16

The task: reward = the fraction of digits in the reply. The random `tiny` model rarely
writes digits, so the mean reward starts near 0.03 and rises only if the whole loop works
(sampling, advantages, the importance-sampling loss, LoRA updates, weight sync). Nothing
here imports skyrl: only `tinker` (and the tokenizer it hands back).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import tinker
from tinker import types


@dataclass
class Config:
    base_url: str = "http://127.0.0.1:8000"
    api_key: str = "tml-local"  # Tinker's client wants a key; a loopback server takes any
    model: str = "tiny"
    lora_rank: int = 16
    steps: int = 16
    prompts_per_step: int = 4  # P
    group_size: int = 8  # G
    max_tokens: int = 12
    learning_rate: float = 1e-2
    seed: int = 0


def reward(text: str) -> float:
    text = text.strip()
    return sum(c.isdigit() for c in text) / max(1, len(text))


def tensor(values: list, dtype: type = np.float32) -> types.TensorData:
    return types.TensorData.from_numpy(np.asarray(values, dtype))


def main(cfg: Config) -> list[dict[str, float]]:
    service = tinker.ServiceClient(base_url=cfg.base_url, api_key=cfg.api_key)
    training = service.create_lora_training_client(
        base_model=cfg.model, rank=cfg.lora_rank, seed=cfg.seed
    ).result()
    tokenizer = training.get_tokenizer()
    params = types.SamplingParams(max_tokens=cfg.max_tokens, temperature=1.0)
    history: list[dict[str, float]] = []

    for step in range(cfg.steps):
        t0 = time.time()
        # -- sample: the current weights, P prompts x G samples (futures, all in flight) --
        sampler = training.save_weights_and_get_sampling_client().result()
        prompts_P = []
        for p in range(cfg.prompts_per_step):
            messages = [{"role": "user", "content": f"Write some digits, please ({step}-{p})."}]
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            prompts_P.append(tokenizer.encode(text, add_special_tokens=False))
        futures_P = [
            sampler.sample(
                types.ModelInput.from_ints(tokens),
                cfg.group_size,
                types.SamplingParams(**{**params.model_dump(), "seed": cfg.seed + 1000 * step + p}),
            )
            for p, tokens in enumerate(prompts_P)
        ]

        # -- score and build data: group-relative advantages (GRPO), one datum per sample --
        data: list[types.Datum] = []
        rewards_P_G = []
        for prompt, future in zip(prompts_P, futures_P, strict=True):
            seqs_G = future.result().sequences
            rewards_G = np.array(
                [reward(str(tokenizer.decode(s.tokens, skip_special_tokens=True))) for s in seqs_G]
            )
            rewards_P_G.append(rewards_G)
            advantages_G = rewards_G - rewards_G.mean()
            if not advantages_G.any():  # a group that all scored alike teaches nothing
                continue
            for seq, adv in zip(seqs_G, advantages_G, strict=True):
                tokens = prompt + list(seq.tokens)
                n_prompt, n_out = len(prompt) - 1, len(seq.tokens)
                data.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={
                            "target_tokens": tensor(tokens[1:], np.int64),
                            "weights": tensor([0.0] * n_prompt + [1.0] * n_out),
                            "logprobs": tensor([0.0] * n_prompt + list(seq.logprobs or [])),
                            "advantages": tensor([0.0] * n_prompt + [float(adv)] * n_out),
                        },
                    )
                )

        # -- train: one importance-sampling step on everything sampled --
        if data:
            fwd_bwd = training.forward_backward(data, "importance_sampling")
            optim = training.optim_step(types.AdamParams(learning_rate=cfg.learning_rate))
            fwd_bwd.result(), optim.result()
        mean_reward = float(np.mean(rewards_P_G))
        history.append(
            {"step": step, "reward": mean_reward, "datums": len(data), "seconds": time.time() - t0}
        )
        print(
            f"step {step:3d}  reward {mean_reward:.3f}  datums {len(data):3d}  {time.time() - t0:.1f}s",
            flush=True,
        )
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default=Config.base_url)
    ap.add_argument("--model", default=Config.model)
    ap.add_argument("--steps", type=int, default=Config.steps)
    ap.add_argument("--learning-rate", type=float, default=Config.learning_rate)
    args = ap.parse_args()
    main(
        Config(
            base_url=args.base_url,
            model=args.model,
            steps=args.steps,
            learning_rate=args.learning_rate,
        )
    )
