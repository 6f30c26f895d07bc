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
    # the logits' device: `cuda:0` where the engine's is `cuda`
    assert [d.type if d is not None else None for d in made] == [engine.device.type] * len(REQUESTS)


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


# -- strict weight loading ------------------------------------------------------------------


def _mixtral(folder, seed):
    """A seeded random two-expert Mixtral with tiny's tokenizer; saved with per-expert names
    (transformers fuses the experts in memory, so saved and in-memory names differ)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, MixtralConfig

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny", quiet=True))
    config = MixtralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=2,
        num_experts_per_tok=1,
    )
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _without(folder, dest, *names):
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, dest)
    tensors = load_file(str(dest / "model.safetensors"))
    for name in names:
        del tensors[name]
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _state(engine):
    return {k: v.clone() for k, v in engine.model.state_dict().items()}


def test_a_mixtral_checkpoint_loads_whole_or_not_at_all(tmp_path):
    from agents.weights import WeightsError

    engine = HFEngine(_mixtral(tmp_path / "base", seed=0))
    newer = _mixtral(tmp_path / "newer", seed=1)
    # a complete checkpoint replaces every tensor, the router and the experts included
    engine.load(newer, version=3)
    want = HFEngine(newer).model.state_dict()
    got = engine.model.state_dict()
    assert engine.version == 3 and all(torch.equal(got[k], want[k]) for k in want)
    # a checkpoint without the router, or without one expert, is refused and changes nothing
    gate = "model.layers.0.block_sparse_moe.gate.weight"
    expert = "model.layers.0.block_sparse_moe.experts.1.w2.weight"
    for name in (gate, expert):
        broken = _without(newer, tmp_path / f"broken-{name}", name)
        before = _state(engine)
        with pytest.raises(WeightsError, match="lack|shape"):
            engine.load(broken, version=4)
        assert engine.version == 3
        assert all(torch.equal(before[k], v) for k, v in engine.model.state_dict().items())
        with pytest.raises(WeightsError):  # nor does a fresh engine start from it
            HFEngine(broken)


def test_weight_updates_are_strict_but_for_tied_weights(engine):
    from agents.weights import WeightsError

    state = _state(engine)
    assert state["lm_head.weight"].data_ptr() != state["model.embed_tokens.weight"].data_ptr()
    # tiny ties lm_head to the embeddings: an update may leave the head out
    engine.update_weights({k: v for k, v in state.items() if k != "lm_head.weight"}, 1)
    victim = "model.layers.0.mlp.up_proj.weight"
    with pytest.raises(WeightsError, match=f"lack 1 of the model's tensors \\({victim}"):
        engine.update_weights({k: v for k, v in state.items() if k != victim}, 2)
    with pytest.raises(WeightsError, match="has shape"):
        engine.update_weights({**state, victim: torch.zeros(3)}, 2)
    assert engine.version == 1
