"""The torch learner behind the training client, and one step of the update the loop runs
through it (`trainers.steps.train_step`), on the tiny model in this process."""

import math
import subprocess
import sys

import pytest
import torch

from agents.models import resolve_model
from agents.trajectory import Trajectory
from trainers.algorithms import AdaptiveKLController, FixedKLController
from trainers.client import AdamParams, Datum, learner_spec
from trainers.config import build_config
from trainers.learner import Sample, TorchLearner
from trainers.placement import place
from trainers.steps import (
    Learning,
    attach,
    build_data,
    compute_advantages,
    freeze,
    loss_config,
    shaped_rewards,
    train_step,
)


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
        out.append(Sample(ids, mask, prompt_len=prompt_len))
    return out


def _grads(learner, batch, shared):
    learner.model.zero_grad()
    fn = learner._shared_prefix if shared else learner._plain
    logits, pred, tgt = fn(learner.model, batch, True)
    logp = torch.log_softmax(logits[pred], -1).gather(-1, tgt[pred][:, None])[:, 0]
    logp.sum().backward()
    return logp.detach(), {
        n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None
    }


def test_shared_prefix_matches_plain_forward_and_gradients(tiny):
    learner = TorchLearner(
        tiny, learner_spec(build_config([{"model": {"name": "tiny"}}], env_name="math"))
    )
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
    learner = TorchLearner(tiny, learner_spec(cfg))
    a, b = _group(prompt_len=12), _group(prompt_len=10)
    sizes = [len(mb) for mb in learner._micro(a + b)]
    assert sizes == [2, 1, 2, 1]


# -- one step of the update, through the clients -------------------------------------


def _learning(tiny, *layers):
    cfg = build_config([{"model": {"name": "tiny"}, "optim": {"lr": 1e-2}}, *layers], "math")
    a = cfg.algorithm
    kl = (
        AdaptiveKLController(a.kl_coef, a.kl_target, a.kl_horizon)
        if a.kl_target
        else FixedKLController(a.kl_coef)
    )
    return Learning(cfg, place(cfg, tiny, local=True), kl)


def _kept(rewards=(0.0, 0.0, 1.0), prompts=(12, 10)):
    """Groups of three episodes; in each, sample 2 is rewarded by default."""
    return [
        [
            Trajectory(
                "t",
                k,
                prompt_len=s.prompt_len,
                token_ids=s.token_ids,
                loss_mask=s.loss_mask,
                reward=r,
            )
            for s, r in zip(_group(prompt_len=p), rewards, strict=True)
        ]
        for k, p in enumerate(prompts)
    ]


def _logprobs(tr, kept):
    data, _ = build_data(tr.cfg, kept)
    return [o["logprobs"] for o in tr.clients.policy.forward(data).result().loss_fn_outputs]


def test_train_step_moves_weights_toward_positive_advantage(tiny):
    tr = _learning(tiny)
    kept = _kept(rewards=(0.0, 0.5, 1.0), prompts=(12,))
    before = _logprobs(tr, kept)
    metrics = train_step(tr, kept)
    after = _logprobs(tr, kept)
    assert metrics["grad_norm"] > 0 and metrics["trained_tokens"] == 19
    # advantage -1, 0, +1: the +1 sample's tokens become likelier, the -1 sample's less likely
    assert sum(after[2]) > sum(before[2]) and sum(after[0]) < sum(before[0])


ALGORITHMS = ["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo", "gspo"]


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_algorithm_moves_toward_the_rewarded_sample(tiny, name):
    """The same groups under each algorithm: the rewarded sample's tokens become likelier."""
    layers = [{"algorithm": {"name": name, "micro_batch_size": 2, "critic_lr": 1e-2}}]
    if name == "gspo":  # the paper's 3e-4 clip range would clip a 1e-2 step at once
        layers.append({"algorithm": {"clip_low": 0.2, "clip_high": 0.2}})
    tr = _learning(tiny, *layers)
    assert (tr.clients.reference is not None) == (name == "reinforce_pp")  # only a KL term
    assert (tr.clients.critic is not None) == (name == "ppo")
    kept = _kept()
    before = _logprobs(tr, kept)
    metrics = train_step(tr, kept)
    after = _logprobs(tr, kept)
    for i in (2, 5):  # the rewarded samples
        assert sum(after[i]) > sum(before[i]), (name, i)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0 and metrics["adv/std"] > 0
    if name == "ppo":
        assert metrics["value_loss"] > 0 and metrics["critic/grad_norm"] > 0
        assert "explained_variance" in metrics


def test_epochs_and_mini_batches_count_optimizer_steps(tiny):
    tr = _learning(
        tiny,
        {"optim": {"warmup_steps": 2}},
        {"algorithm": {"ppo_epochs": 2, "mini_batch_size": 3, "micro_batch_size": 2}},
    )
    metrics = train_step(tr, _kept())
    # 6 samples in mini-batches of 3 -> 2 optimizer steps per epoch, 2 epochs
    assert metrics["updates"] == 4 and tr.optim_steps == 4
    # later updates see a policy that moved: the ratio leaves 1
    assert metrics["approx_kl"] != 0
    assert metrics["lr"] == pytest.approx(1e-2)  # warm-up (2 steps) is over by the 4th


def test_loss_aggregation_changes_the_gradient(tiny):
    def grad_norm(mode):
        tr = _learning(tiny, {"algorithm": {"loss_agg": mode, "micro_batch_size": 1}})
        return train_step(tr, _kept())["grad_norm"]

    assert grad_norm("token-mean") != pytest.approx(grad_norm("seq-mean-token-mean"))


def test_truncated_importance_weights_use_the_samplers_logprobs(tiny):
    tr = _learning(tiny, {"algorithm": {"tis_cap": 2.0}})
    kept = _kept()
    # the sampler scored every token 1 nat lower than the learner: ratio e^1 = 2.72, capped at 2
    flat = [t for g in kept for t in g]
    for t, lps in zip(flat, _logprobs(tr, kept), strict=True):
        it = iter(lps)
        t.logprobs = [0.0] + [next(it) - 1.0 if m else 0.0 for m in t.loss_mask[1:]]
    metrics = train_step(tr, kept)
    assert metrics["tis/mean_weight"] == pytest.approx(2.0, abs=1e-4)


def test_adaptive_kl_moves_the_coefficient_and_the_reference_is_loaded(tiny):
    tr = _learning(tiny, {"algorithm": {"kl_coef": 0.1, "kl_target": 0.5, "kl_horizon": 6}})
    assert tr.clients.reference is not None
    first = train_step(tr, _kept())
    # step 1: KL 0 (policy = reference) -> error clipped to -0.2 -> 0.1 * (1 - 0.2 * 6 / 6) = 0.08
    assert first["kl"] == pytest.approx(0.0, abs=1e-6) and first["kl_coef"] == pytest.approx(0.1)
    assert tr.kl.value == pytest.approx(0.08)
    second = train_step(tr, _kept())
    assert second["kl_coef"] == pytest.approx(0.08) and second["kl"] > 0


def test_entropy_bonus_and_dual_clip_change_the_update(tiny):
    def norm(**algorithm):
        return train_step(_learning(tiny, {"algorithm": algorithm}), _kept())["grad_norm"]

    plain = norm()
    assert norm(entropy_coef=0.5) != pytest.approx(plain)
    # dual clip binds only where ratio * A < -c * A for A < 0: after the first of two epochs
    # with a large step the ratio moves, and a tight bound (c = 1.001) removes gradient
    two = {"ppo_epochs": 2, "mini_batch_size": 3}
    assert norm(**two, dual_clip=1.001) != pytest.approx(norm(**two))


def test_a_run_saved_before_the_algorithm_keys_were_renamed_still_loads(tmp_path):
    import yaml

    from trainers.config import load_saved_config

    old = {"algorithm": {"name": "grpo", "clip_eps": 0.3, "epochs": 2, "kl_coef": 0.0}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    cfg = load_saved_config(tmp_path / "config.yaml")
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (0.3, 0.3)
    assert cfg.algorithm.ppo_epochs == 2


def test_cross_entropy_raises_the_demonstrations_likelihood_and_reset_starts_fresh(tiny, tmp_path):
    tr = _learning(tiny, {"algorithm": {"kl_coef": 0.01, "micro_batch_size": 2}})
    policy, reference = tr.clients.policy, tr.clients.reference
    assert reference is not None
    data = [Datum.from_sequence(s.token_ids, s.loss_mask, s.prompt_len) for s in _group()]
    before = [o["logprobs"] for o in policy.forward(data).result().loss_fn_outputs]
    losses = []
    for _ in range(3):  # three demonstrations: micro-batches of 2 and 1
        fb = policy.forward_backward(data, "cross_entropy", {"loss_agg": "token-mean"})
        policy.optim_step(AdamParams(1e-2)).result()
        losses.append(fb.result().metrics["loss:sum"])
    after = [o["logprobs"] for o in policy.forward(data).result().loss_fn_outputs]
    # the first loss is the mean NLL of the 19 loss tokens before any update
    assert losses[0] == pytest.approx(-sum(map(sum, before)) / 19, rel=1e-4)
    assert losses[2] < losses[0]
    assert all(sum(a) > sum(b) for a, b in zip(after, before, strict=True))
    learner = policy.learner.backend  # type: ignore[attr-defined]
    assert learner.opt.state
    policy.reset_optimizer().result()
    assert not learner.opt.state
    # the reference becomes the warmed-up policy through an HF folder (what a resume reloads)
    ref_before = reference.compute_logprobs([d.tokens for d in data]).result()
    policy.save_weights_for_sampler(tmp_path / "reference").result()
    reference.load_path(str(tmp_path / "reference"), 0).result()
    ref_after = reference.compute_logprobs([d.tokens for d in data]).result()
    for d, lp_old, lp_new, lp_policy in zip(data, ref_before, ref_after, after, strict=True):
        at_loss = [x for x, w in zip(lp_new[1:], d.loss_fn_inputs["weights"], strict=True) if w]
        assert at_loss == pytest.approx(lp_policy, abs=1e-4)
        assert lp_new != pytest.approx(lp_old, abs=1e-4)


def _direct_logprobs(model, s, temperature=1.0):
    """Log-probs of a sample's loss tokens straight from the model's own forward."""
    ids = torch.tensor([s.token_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
    return lp[torch.tensor(s.loss_mask[1:], dtype=torch.bool, device=lp.device)].cpu()


def test_sft_loss_is_at_temperature_one_whatever_the_sampling_temperature(tiny):
    cfg = build_config(
        [{"model": {"name": "tiny"}, "rollout": {"temperature": 0.5}}], env_name="math"
    )
    learner = TorchLearner(tiny, learner_spec(cfg))
    batch = _group()
    nll = -torch.cat([_direct_logprobs(learner.model, s) for s in batch])
    data = [Datum.from_sequence(s.token_ids, s.loss_mask, s.prompt_len) for s in batch]
    out = learner.forward_backward(data, "cross_entropy", {"loss_agg": "token-mean"})
    assert out.metrics["loss:sum"] == pytest.approx(float(nll.mean()), rel=1e-5)


@pytest.fixture(scope="module")
def tiny_dropout(tiny, tmp_path_factory):
    """The tiny model with attention dropout 0.5 (a config key, so the weights are tiny's)."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("tiny-dropout")
    shutil.copytree(tiny, folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "attention_dropout": 0.5}))
    return folder


def test_dropout_is_off_for_logprobs_and_the_update(tiny_dropout):
    # tis_cap makes the one update compare against a separate frozen pass of the same weights
    tr = _learning(tiny_dropout, {"algorithm": {"tis_cap": 2.0, "micro_batch_size": 3}})
    kept = _kept()
    assert _logprobs(tr, kept) == _logprobs(tr, kept)
    metrics = train_step(tr, kept)
    # step 0: the update's policy is the frozen one, so every ratio is exactly 1
    assert metrics["clip_frac"] == 0.0 and metrics["approx_kl"] == 0.0


def test_the_critic_reads_values_without_dropout(tiny_dropout):
    cfg = build_config([{"model": {"name": "tiny"}, "algorithm": {"name": "ppo"}}], env_name="math")
    critic = TorchLearner(tiny_dropout, learner_spec(cfg), value_head=True)
    assert critic.head is not None
    torch.nn.init.normal_(critic.head.weight)  # zero-initialised: make values vary
    batch = _group()
    with torch.no_grad():
        first, second = (critic._values(batch) for _ in range(2))
    assert first.abs().sum() > 0 and torch.equal(first, second)


def _random_model(folder, tiny, config):
    """A seeded random model of `config`'s architecture with tiny's tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _gemma2(folder, tiny):
    from transformers import Gemma2Config

    # a small softcap, so that capping moves these random logits by much more than 1e-5
    config = Gemma2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        final_logit_softcapping=2.0,
        attn_logit_softcapping=None,
        eos_token_id=2,
        pad_token_id=0,
    )
    return _random_model(folder, tiny, config)


def _granite(folder, tiny):
    from transformers import GraniteConfig

    config = GraniteConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        logits_scaling=8.0,
        eos_token_id=2,
        pad_token_id=0,
    )
    return _random_model(folder, tiny, config)


@pytest.mark.parametrize("build", [_gemma2, _granite], ids=["gemma2", "granite"])
def test_learner_engine_and_model_forward_agree_on_logprobs(tiny, tmp_path, build):
    """Architectures that post-process logits in CausalLM.forward (Gemma2's final softcap,
    Granite's logits_scaling): the sampler and the learner must score tokens alike."""
    from agents.engine import GenRequest
    from agents.engine_hf import HFEngine

    folder = build(tmp_path / "model", tiny)
    temperature = 0.7
    engine = HFEngine(folder)
    prompt_a, prompt_b = list(range(10, 22)), list(range(40, 49))
    requests = [GenRequest(prompt_a, 8, seed=s) for s in range(3)] + [GenRequest(prompt_b, 8, 9)]
    results = engine.generate(requests, temperature=temperature)
    batch = [
        Sample(
            r.prompt_ids + g.token_ids,
            [0] * len(r.prompt_ids) + [1] * len(g.token_ids),
            prompt_len=len(r.prompt_ids),
        )
        for r, g in zip(requests, results, strict=True)
    ]
    cfg = build_config(
        [{"model": {"name": "tiny"}, "rollout": {"temperature": temperature}}], env_name="math"
    )
    learner = TorchLearner(folder, learner_spec(cfg))
    # the group of three goes through the shared-prompt forward, the fourth through the plain one
    assert [len(mb) for mb in learner._micro(batch)] == [3, 1]
    data = [Datum.from_sequence(s.token_ids, s.loss_mask, s.prompt_len) for s in batch]
    learned = [o["logprobs"] for o in learner.forward(data).loss_fn_outputs]
    # the reference's scores (a sampling client's compute_logprobs) come from the engine
    scored = engine.compute_logprobs([s.token_ids for s in batch], temperature)
    for s, g, lp, sc in zip(batch, results, learned, scored, strict=True):
        direct = _direct_logprobs(learner.model, s, temperature)
        assert torch.allclose(torch.tensor(lp), direct, atol=1e-5), (lp, direct)
        assert torch.allclose(torch.tensor(g.logprobs), direct, atol=1e-5), (g.logprobs, direct)
        ref = torch.tensor([x for x, m in zip(sc[1:], s.loss_mask[1:], strict=True) if m])
        assert torch.allclose(ref, direct, atol=1e-5), (ref, direct)


def test_bf16_keeps_fp32_master_weights_and_computes_in_bf16(tiny):
    def learning(dtype):
        layers = {"model": {"dtype": dtype}, "optim": {"lr": 1e-5}}
        return _learning(tiny, layers, {"algorithm": {"name": "ppo", "kl_coef": 0.01}})

    bf16, fp32 = learning("bfloat16"), learning("float32")
    kept = _kept()
    # the forward runs in bf16 (autocast): close to float32's log-probs, not equal to them
    lp16, lp32 = (torch.tensor(sum(_logprobs(x, kept), [])) for x in (bf16, fp32))
    assert 1e-4 < (lp16 - lp32).abs().max() < 0.1
    # one optimizer step on the learner itself, so its gradients can be read before it
    data, trained = build_data(bf16.cfg, kept)
    frozen = freeze(bf16, data, 1)
    adv, returns = compute_advantages(bf16, shaped_rewards(bf16.cfg, kept), trained, data, frozen)
    attach(data, frozen, adv, returns)
    learner = bf16.clients.policy.learner.backend  # type: ignore[attr-defined]
    learner.forward_backward(data, "ppo", loss_config(bf16.cfg, 0.01))
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    has_grad = {n: p.grad != 0 for n, p in learner.model.named_parameters() if p.grad is not None}
    learner.optim_step(AdamParams(1e-5))
    # every weight with a gradient moved by ~lr (in bf16 storage most steps of 1e-5 round away)
    moved = stepped = 0
    for n, p in learner.model.named_parameters():
        assert p.dtype == torch.float32, n
        if n in has_grad:
            stepped += int(has_grad[n].sum())
            moved += int((p.detach() != before[n])[has_grad[n]].sum())
    assert stepped > 0 and moved / stepped > 0.99
    critic = bf16.clients.critic.learner.backend  # type: ignore[union-attr]
    assert all(p.dtype == torch.float32 for p in critic.params)
    # the engines get the weights in the compute dtype
    assert {v.dtype for v in learner.state_dict().values() if v.is_floating_point()} == {
        torch.bfloat16
    }


def test_fp16_training_is_refused_in_one_sentence():
    from trainers.config import ConfigError

    with pytest.raises(ConfigError, match="loss scaling"):
        build_config([{"model": {"name": "tiny", "dtype": "float16"}}], env_name="math")


def test_approx_kl_is_the_mean_log_ratio_old_minus_new(tiny):
    """Samples come from the old policy, so mean(old - new) estimates KL(old || new), as veRL
    reports it. Two epochs over one mini-batch: the first update sees the old policy itself,
    the second the policy after one step, which a one-epoch twin reproduces."""
    two = _learning(tiny, {"algorithm": {"ppo_epochs": 2, "micro_batch_size": 6}})
    one = _learning(tiny, {"algorithm": {"ppo_epochs": 1, "micro_batch_size": 6}})
    kept = _kept()
    old = torch.tensor(sum(_logprobs(two, kept), []))
    train_step(one, kept)
    new = torch.tensor(sum(_logprobs(one, kept), []))
    metrics = train_step(two, kept)
    # approx_kl averages over every token the update passes saw: 2 epochs x N tokens
    expected = float((old - new).sum()) / (2 * len(old))
    assert expected != 0 and metrics["approx_kl"] == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_a_mixtral_checkpoint_reloads_whole_or_is_refused(tmp_path):
    """Saved Mixtral tensors are named per expert, in memory they are fused: reading the
    safetensors by name would miss the router and the experts. Loads go through transformers
    and are strict: only tied weights may be absent. The KL reference is an engine now."""
    from safetensors.torch import load_file, save_file

    from agents.engine_hf import HFEngine
    from agents.weights import WeightsError
    from tests.agents.test_engine_hf import _mixtral, _without
    from trainers.checkpoint import CheckpointError

    base = _mixtral(tmp_path / "base", seed=0)
    cfg = build_config([{"model": {"name": "tiny"}, "algorithm": {"kl_coef": 0.01}}], "math")
    learner = TorchLearner(base, learner_spec(cfg))
    with torch.no_grad():
        for p in learner.model.parameters():
            p.add_(0.5)
    learner.save_state(tmp_path / "ckpt")
    learner.save_weights(tmp_path / "reference")  # the reference := the moved policy
    other, reference = TorchLearner(base, learner_spec(cfg)), HFEngine(base)
    other.load_state(tmp_path / "ckpt")
    reference.load(tmp_path / "reference", 0)
    want = learner.model.state_dict()
    for model in (other.model, reference.model):
        got = model.state_dict()
        assert all(torch.equal(got[k].float(), want[k].to(got[k].dtype).float()) for k in want)
    # without the router (or one expert) the checkpoint is refused and nothing changes
    weights = tmp_path / "ckpt" / "model" / "model.safetensors"
    tensors = load_file(str(weights))
    gate = "model.layers.0.block_sparse_moe.gate.weight"
    save_file({k: v for k, v in tensors.items() if k != gate}, str(weights), {"format": "pt"})
    fresh = TorchLearner(base, learner_spec(cfg))
    before = {k: v.clone() for k, v in fresh.model.state_dict().items()}
    with pytest.raises(CheckpointError, match="lack 1 of the model's tensors"):
        fresh.load_state(tmp_path / "ckpt")
    assert all(torch.equal(before[k], v) for k, v in fresh.model.state_dict().items())
    expert = "model.layers.0.block_sparse_moe.experts.1.w2.weight"
    saved_ref = load_file(str(tmp_path / "reference" / "model.safetensors"))
    save_file(
        {k: v for k, v in saved_ref.items() if k != expert},
        str(tmp_path / "reference" / "model.safetensors"),
        {"format": "pt"},
    )
    with pytest.raises(WeightsError, match="shape"):
        HFEngine(base).load(tmp_path / "reference", 0)
    # nor does training start from a model folder that lacks weights
    with pytest.raises(WeightsError, match="lack"):
        TorchLearner(_without(base, tmp_path / "no-gate", gate), learner_spec(cfg))


def test_a_checkpoint_from_before_the_redesign_resumes_its_counters(tiny, tmp_path):
    """The optimizer step count and KL coefficient used to live in optimizer.pt."""
    from trainers.steps import load_checkpoint

    tr = _learning(tiny)
    tr.clients.policy.save_state(tmp_path).result()
    extra = torch.load(tmp_path / "optimizer.pt", weights_only=False)
    torch.save({**extra, "opt_steps": 7, "kl_coef": 0.3}, tmp_path / "optimizer.pt")
    fresh = _learning(tiny)
    load_checkpoint(fresh, tmp_path, {"step": 2, "version": 2})
    assert (fresh.version, fresh.optim_steps, fresh.kl.value) == (2, 7, 0.3)
    load_checkpoint(fresh, tmp_path, {"step": 3, "version": 3, "optim_steps": 9, "kl_coef": 0.1})
    assert (fresh.version, fresh.optim_steps, fresh.kl.value) == (3, 9, 0.1)


def test_the_reference_engine_loads_a_saved_reference_strictly(tiny, tmp_path):
    """The KL reference lives in an engine now; resuming it keeps issue 11's strict load
    (the engine's, issue 12 fix 2), as the learner's own reference had."""
    from safetensors.torch import load_file, save_file

    from agents.engine_hf import HFEngine
    from agents.weights import WeightsError

    tr = _learning(tiny, {"algorithm": {"kl_coef": 0.01}})
    tr.clients.policy.save_weights_for_sampler(tmp_path / "reference").result()
    weights_file = tmp_path / "reference" / "model.safetensors"
    tensors = load_file(str(weights_file))
    victim = next(k for k in tensors if "layers.0" in k)
    save_file({k: v for k, v in tensors.items() if k != victim}, str(weights_file))
    engine = HFEngine(tiny)
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    with pytest.raises(WeightsError, match="lack 1 of the model's tensors"):
        engine.load(tmp_path / "reference", 0)
    assert all(torch.equal(before[k], v) for k, v in engine.model.state_dict().items())
    save_file(tensors, str(weights_file))
    engine.load(tmp_path / "reference", 0)  # the complete folder loads, the tied head included


def test_saving_a_checkpoint_does_not_import_deepspeed(tmp_path):
    """transformers' save_pretrained asks accelerate whether the model is a DeepSpeedEngine,
    and accelerate imports deepspeed to find out wherever it is installed: 2+ s and a
    "Setting accelerator to CPU" line in every process that saved, on every run. A fresh
    process (this one may have imported deepspeed in another test) saves a checkpoint."""
    pytest.importorskip("deepspeed")  # where it is not installed there is nothing to import
    code = (
        "import sys\n"
        "from agents.models import resolve_model\n"
        "from trainers.config import build_config\n"
        "from trainers.client import learner_spec\n"
        "from trainers.learner import TorchLearner\n"
        "cfg = build_config([{'model': {'name': 'tiny'}}], env_name='math')\n"
        "learner = TorchLearner(resolve_model('tiny', quiet=True), learner_spec(cfg))\n"
        f"learner.save_state({str(tmp_path)!r})\n"
        "print('deepspeed' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip() == "False", out.stderr[-2000:]
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert "Setting accelerator" not in out.stderr
