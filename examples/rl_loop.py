"""A GRPO loop written against the two clients only, the way a Tinker user writes one
(tinker-cookbook's recipes/rl_loop.py): sample a group per question, score it, centre the
rewards within the group, train on Tinker datums, push the weights, repeat.

    python examples/rl_loop.py          # 3 steps on the random `tiny` model, seconds on a CPU

The reward is a toy the random model can earn (the share of digits in its answer), so the
groups differ and every step really updates the policy. `skyrl train` runs the same calls,
plus environments, multi-turn episodes, checkpoints and the other algorithms.
"""

from __future__ import annotations

from transformers import AutoTokenizer

from agents.chat import ChatFormat
from agents.models import resolve_model
from agents.sampling import SamplingParams
from trainers.client import AdamParams, Datum
from trainers.config import build_config
from trainers.placement import place

STEPS, GROUP_SIZE, LEARNING_RATE = 3, 4, 1e-3
QUESTIONS = ["What is 2 + 3?", "What is 10 - 7?", "What is 6 * 7?", "What is 81 / 9?"]


def get_reward(text: str) -> float:
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


def main(steps: int = STEPS) -> list[dict[str, float]]:
    model = resolve_model("tiny", quiet=True)
    cfg = build_config([{"model": {"name": "tiny"}}], env_name="math")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    chat = ChatFormat(tokenizer)
    training_client = place(cfg, model, local=True).policy  # in this process; Ray in `skyrl train`
    sampling_client = training_client.save_weights_and_get_sampling_client(version=0)
    adam_params = AdamParams(learning_rate=LEARNING_RATE)
    history = []
    for step in range(steps):
        # 1. sample a group per question (all requests first, then wait: futures)
        prompts = [chat.prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS]
        futures = [
            sampling_client.sample(
                prompt_tokens=prompt,
                num_samples=GROUP_SIZE,
                sampling_params=SamplingParams(max_tokens=16, seed=1000 * step + 10 * p),
            )
            for p, prompt in enumerate(prompts)
        ]
        # 2. score, centre within the group, and build Tinker datums
        datums: list[Datum] = []
        batch_rewards: list[float] = []
        for prompt, future in zip(prompts, futures, strict=True):
            sequences = future.result().sequences
            rewards_G = [get_reward(str(tokenizer.decode(s.tokens))) for s in sequences]
            mean = sum(rewards_G) / len(rewards_G)
            batch_rewards += rewards_G
            if all(r == mean for r in rewards_G):
                continue  # every advantage would be zero: nothing to learn from this group
            for seq, reward in zip(sequences, rewards_G, strict=True):
                n = len(seq.tokens)  # the prompt's tokens carry no loss
                datums.append(
                    Datum.from_sequence(
                        prompt + seq.tokens,
                        loss_mask=[0] * len(prompt) + [1] * n,
                        prompt_len=len(prompt),
                        advantages=[0.0] * len(prompt) + [reward - mean] * n,
                        logprobs=[0.0] * len(prompt) + seq.logprobs,
                    )
                )
        if not datums:
            continue
        # 3. one optimizer step on the PPO loss (ratio against the sampler's log-probs)
        fwd_bwd_future = training_client.forward_backward(
            datums, loss_fn="ppo", loss_fn_config={"clip_low": 0.2, "clip_high": 0.2}
        )
        optim_step_future = training_client.optim_step(adam_params)
        fwd_bwd = fwd_bwd_future.result()
        grad_norm = optim_step_future.result()["grad_norm"]
        # 4. the sampler gets the new weights
        sampling_client = training_client.save_weights_and_get_sampling_client(version=step + 1)
        tokens = max(1.0, fwd_bwd.metrics["tokens"])
        history.append(
            {
                "step": step + 1,
                "reward/mean": sum(batch_rewards) / len(batch_rewards),
                "datums": len(datums),
                "pg_loss": fwd_bwd.metrics["pg_loss:sum"] / tokens,
                "grad_norm": grad_norm,
            }
        )
        print(history[-1])
    return history


if __name__ == "__main__":
    main()
