"""Grouped-query attention read in place (agents/attention.py): the same numbers as
transformers' repeated heads, without the repeat where no gradient is taken. The tiny model
shares each key/value head between 2 query heads, as SmolLM2 shares them between 3."""

from __future__ import annotations

import pytest
import torch
import transformers.integrations.sdpa_attention as sdpa

from agents.attention import use_shared_heads
from agents.engine import GenRequest
from agents.engine_hf import HFEngine
from agents.models import resolve_model
from agents.weights import from_pretrained

# prompts of different lengths, so the batch is left-padded and attention gets a mask
REQUESTS = [GenRequest(list(range(10, 10 + n)), 12, seed=s) for s, n in enumerate((5, 11, 11, 17))]


@pytest.fixture
def repeats(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times transformers repeated key/value heads (`repeat_kv`)."""
    calls: list[int] = []
    real = sdpa.repeat_kv

    def spy(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
        calls.append(n_rep)
        return real(hidden_states, n_rep)

    monkeypatch.setattr(sdpa, "repeat_kv", spy)
    return calls


def _tiny(shared: bool):
    """The tiny model in eval mode, on the shared-heads attention or on transformers' own."""
    model = from_pretrained(resolve_model("tiny", quiet=True), torch.float32).eval()
    if shared:
        use_shared_heads(model)
    return model


def test_the_tiny_model_shares_its_key_value_heads():
    config = from_pretrained(resolve_model("tiny", quiet=True), torch.float32).config
    assert config.num_key_value_heads < config.num_attention_heads


def test_the_engine_decodes_a_padded_batch_without_repeating_heads(repeats: list[int]):
    engine = HFEngine(resolve_model("tiny", quiet=True))
    out = engine.generate(REQUESTS, temperature=1.0)
    assert [len(r.token_ids) for r in out] and repeats == []


def test_shared_heads_sample_the_same_tokens_and_log_probs_bit_for_bit(repeats: list[int]):
    shared = HFEngine(resolve_model("tiny", quiet=True))
    repeated = HFEngine(resolve_model("tiny", quiet=True))
    repeated.model.set_attn_implementation("sdpa")  # transformers' own path
    for temperature in (1.0, 0.0):
        a = shared.generate(REQUESTS, temperature=temperature)
        n = len(repeats)
        b = repeated.generate(REQUESTS, temperature=temperature)
        assert len(repeats) > n  # the other engine did repeat them
        assert [r.token_ids for r in a] == [r.token_ids for r in b]
        assert [r.logprobs for r in a] == [r.logprobs for r in b]


def test_a_gradient_goes_through_the_repeat_and_does_not_move(repeats: list[int]):
    """enable_gqa's gradient sums the shared heads in another order: training keeps the
    repeat, so its gradients are transformers' own to the last bit."""
    ids = torch.tensor([[0, 0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]])
    mask = (ids != 0).long()
    grads = []
    for shared in (True, False):
        model = _tiny(shared)
        logits = model(input_ids=ids, attention_mask=mask).logits
        (logits.log_softmax(-1)[..., 3].sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert repeats, "the gradient pass repeated the heads"
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_no_grad_forward_of_the_learner_kind_gives_the_same_logits(repeats: list[int]):
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = (ids != 0).long()
    out = []
    for shared in (True, False):
        model = _tiny(shared)
        with torch.no_grad():
            out.append(model(input_ids=ids, attention_mask=mask).logits)
        if shared:
            assert repeats == []
    assert torch.equal(out[0], out[1])
