"""The hf engine's sampling: seeded per request, with generators where the logits are."""

from __future__ import annotations

import pytest
import torch

from agents.engine import GenRequest
from agents.engine_hf import HFEngine
from agents.models import resolve_model

REQUESTS = [GenRequest(list(range(10, 20)), 8, seed=s) for s in range(3)]


@pytest.fixture(scope="module")
def engine():
    return HFEngine(resolve_model("tiny", quiet=True))


def test_sampling_generators_are_made_on_the_logits_device(engine, monkeypatch):
    """torch.multinomial needs its generator on the probabilities' device (a CPU generator
    fails on CUDA). Here on a CPU: every generator is asked for on the logits' device."""
    made, real = [], torch.Generator

    def spy(device=None):
        made.append(None if device is None else torch.device(device))
        return real(device=device if device is not None else "cpu")

    monkeypatch.setattr(torch, "Generator", spy)
    engine.generate(REQUESTS, temperature=1.0)
    assert made == [engine.device] * len(REQUESTS)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sampling_on_cuda_is_seeded():
    engine = HFEngine(resolve_model("tiny", quiet=True))
    assert engine.device.type == "cuda"
    first, again = (engine.generate(REQUESTS, temperature=1.0) for _ in range(2))
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert all(len(r.token_ids) > 0 and all(lp < 0 for lp in r.logprobs) for r in first)
    # different seeds draw different continuations
    assert len({tuple(r.token_ids) for r in first}) > 1
