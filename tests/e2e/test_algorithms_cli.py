"""Every algorithm name through the real `skyrl train` command: 2 steps on math with `tiny`.

The random `tiny` model never writes a well-formed answer, so every episode would get the
same format penalty and every advantage would be 0. DAPO's soft overlong penalty
(`overlong_buffer=16` of a 32-token budget) makes rewards depend on response length, so
groups differ and each algorithm does a real update.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.conftest import NO_TRACKING, skyrl

ALGORITHMS = ["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo", "gspo"]
COMMON = ["loss", "pg_loss", "entropy", "clip_frac", "approx_kl", "kl", "kl_coef"]
COMMON += ["adv/mean", "adv/std", "grad_norm", "lr", "updates", "response_len/mean"]
COMMON += ["groups/zero_variance", "groups/kept"]


@pytest.mark.parametrize("name", ALGORITHMS)
def test_two_steps_of_each_algorithm(tmp_path, ray_address, name):
    skyrl(
        "train",
        *("--env", "math", "--model", "tiny", "--max-steps", "2", "--run-name", name),
        *("--set", f"algorithm.name={name}", "--set", "algorithm.overlong_buffer=16"),
        *("--set", "rollout.batch_size=2", "--set", "eval.limit=0"),
        *("--ray-address", ray_address, *NO_TRACKING),
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob(f"{name}-*")
    cfg = yaml.safe_load((run / "config.yaml").read_text())["algorithm"]
    assert cfg["name"] == name
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        for key in COMMON:
            assert key in m and math.isfinite(m[key]), (key, m)
    # every step updated the policy on non-zero advantages
    assert all(m["updates"] >= 1 and m["grad_norm"] > 0 for m in metrics), metrics
    assert max(m["adv/std"] for m in metrics) > 0

    if name == "ppo":
        assert all(m["value_loss"] > 0 and m["critic/grad_norm"] > 0 for m in metrics)
        assert all("explained_variance" in m for m in metrics)
        ckpt = run / "checkpoints" / "step-000002"
        assert (ckpt / "critic.pt").exists()  # resume restores the critic too
    if name == "reinforce_pp":
        # the reference model is loaded and, once the policy moved, the KL is measured
        assert cfg["kl_in_reward"] and metrics[0]["kl_coef"] == pytest.approx(0.01)
        assert metrics[1]["kl"] != 0  # k1 (the preset) can be negative
    if name == "dapo":
        assert cfg["dynamic_sampling"] and cfg["clip_high"] == pytest.approx(0.28)
        for m in metrics:  # rounds of 2 tasks x 4 samples until 2 groups with distinct rewards
            assert m["episodes"] in (8, 16, 24) and 1 <= m["groups/kept"] <= 2
            assert m["groups/kept"] == 2 or m["episodes"] == 24
    if name == "dr_grpo":
        assert cfg["loss_agg"] == "seq-mean-token-sum-norm" and not cfg["normalize_std"]
    if name == "gspo":
        assert cfg["clip_low"] == pytest.approx(3e-4) and cfg["loss_agg"] == "seq-mean-token-mean"


def test_list_recipes_and_train_from_one(tmp_path, ray_address):
    listing = skyrl("train", "--list-recipes", cwd=tmp_path).stdout
    for recipe in ("math_grpo", "math_ppo", "sql_grpo", "sql_dapo", "search_grpo"):
        assert recipe in listing
    skyrl(
        "train",
        *("--config", "math_ppo", "--model", "tiny", "--max-steps", "1"),
        *("--set", "eval.limit=0", "--set", "rollout.batch_size=2"),
        *("--ray-address", ray_address, *NO_TRACKING),
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob("math-*")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["algorithm"]["name"] == "ppo" and cfg["algorithm"]["ppo_epochs"] == 2
    assert cfg["rollout"]["batch_size"] == 2  # --set still wins over the recipe
    (m,) = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert m["updates"] == 2  # 2 epochs x one mini-batch of 4 sequences (<= 8)
