"""The learner's shared-prompt forward is the plain forward, done cheaper (tiny model)."""

import pytest
import torch

from agents.models import resolve_model
from trainers.config import build_config
from trainers.learner import Sample, TorchLearner


@pytest.fixture(scope="module")
def tiny():
    return resolve_model("tiny", quiet=True)


def _group(prompt_len=12, lens=(5, 9, 3)):
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 300, (prompt_len,), generator=g).tolist()
    out = []
    for i, n in enumerate(lens):
        resp = torch.randint(3, 300, (n,), generator=g).tolist()
        env = [7, 8] if i == 1 else []  # an environment turn inside the response (mask 0)
        mask = [0] * prompt_len + [1] * n + [0] * len(env) + ([1, 1] if env else [])
        ids = prompt + resp + env + ([11, 12] if env else [])
        out.append(Sample(ids, mask, advantage=float(i) - 1.0, prompt_len=prompt_len))
    return out


def _grads(learner, batch, shared):
    learner.model.zero_grad()
    fn = learner._shared_prefix_hidden if shared else learner._hidden
    h, pred, tgt = fn(learner.model, batch)
    logits = learner.model.get_output_embeddings()(h[pred])
    logp = torch.log_softmax(logits, -1).gather(-1, tgt[pred][:, None])[:, 0]
    logp.sum().backward()
    return logp.detach(), {
        n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None
    }


def test_shared_prefix_matches_plain_forward_and_gradients(tiny):
    learner = TorchLearner(tiny, build_config([{"model": {"name": "tiny"}}], env_name="math"))
    batch = _group()
    lp_plain, g_plain = _grads(learner, batch, shared=False)
    lp_shared, g_shared = _grads(learner, batch, shared=True)
    assert lp_plain.shape == lp_shared.shape == (5 + 9 + 2 + 3,)
    assert torch.allclose(lp_plain, lp_shared, atol=1e-5)
    assert g_plain.keys() == g_shared.keys()
    for name in g_plain:
        assert torch.allclose(g_plain[name], g_shared[name], atol=1e-5), name


def test_micro_batches_follow_groups(tiny):
    cfg = build_config(
        [{"model": {"name": "tiny"}, "algorithm": {"micro_batch_size": 2}}], env_name="math"
    )
    learner = TorchLearner(tiny, cfg)
    a, b = _group(prompt_len=12), _group(prompt_len=10)
    sizes = [len(mb) for mb in learner._micro_batches(a + b)]
    assert sizes == [2, 1, 2, 1]


def test_train_step_moves_weights_toward_positive_advantage(tiny):
    cfg = build_config([{"model": {"name": "tiny"}, "optim": {"lr": 1e-2}}], env_name="math")
    learner = TorchLearner(tiny, cfg)
    batch = _group()
    before = learner.forward_logprobs(batch)
    metrics = learner.train_step(batch)
    after = learner.forward_logprobs(batch)
    assert metrics["grad_norm"] > 0 and metrics["trained_tokens"] == 19
    # advantage -1, 0, +1: the +1 sample's tokens become likelier, the -1 sample's less likely
    assert sum(after[2]) > sum(before[2]) and sum(after[0]) < sum(before[0])
