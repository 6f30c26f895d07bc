"""The learner's shared-prompt forward is the plain forward, done cheaper (tiny model)."""

import math

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
    fn = learner._shared_prefix if shared else learner._plain
    logits, pred, tgt = fn(learner.model, batch, True)
    logp = torch.log_softmax(logits[pred], -1).gather(-1, tgt[pred][:, None])[:, 0]
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


ALGORITHMS = ["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo", "gspo"]


def _two_groups():
    """Two groups of three; in each, sample 2 is rewarded (1.0), samples 0 and 1 are not."""
    batch = []
    for prompt_len in (12, 10):
        group = _group(prompt_len=prompt_len)
        for s, reward in zip(group, (0.0, 0.0, 1.0), strict=True):
            s.reward = reward
        batch += group
    return batch


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_algorithm_moves_toward_the_rewarded_sample(tiny, name):
    """The same batch under each algorithm: the rewarded sample's tokens become likelier."""
    from trainers.sync import sequence_advantages

    layers = [
        {
            "model": {"name": "tiny"},
            "optim": {"lr": 1e-2},
            "algorithm": {"name": name, "micro_batch_size": 2, "critic_lr": 1e-2},
        }
    ]
    if name == "gspo":  # the paper's 3e-4 clip range would clip a 1e-2 step at once
        layers.append({"algorithm": {"clip_low": 0.2, "clip_high": 0.2}})
    cfg = build_config(layers, env_name="math")
    learner = TorchLearner(tiny, cfg)
    batch = _two_groups()
    rewards = torch.tensor([[s.reward for s in batch[:3]], [s.reward for s in batch[3:]]])
    for s, adv in zip(batch, sequence_advantages(cfg, rewards).flatten(), strict=True):
        s.advantage = float(adv)
    assert (learner.ref is not None) == (name == "reinforce_pp")  # only a KL term loads it
    assert (learner.critic is not None) == (name == "ppo")
    before = learner.forward_logprobs(batch)
    metrics = learner.train_step(batch)
    after = learner.forward_logprobs(batch)
    for i in (2, 5):  # the rewarded samples
        assert sum(after[i]) > sum(before[i]), (name, i)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0 and metrics["adv/std"] > 0
    if name == "ppo":
        assert metrics["value_loss"] > 0 and metrics["critic/grad_norm"] > 0
        assert "explained_variance" in metrics


def test_epochs_and_mini_batches_count_optimizer_steps(tiny):
    cfg = build_config(
        [
            {
                "model": {"name": "tiny"},
                "optim": {"lr": 1e-2, "warmup_steps": 2},
                "algorithm": {"ppo_epochs": 2, "mini_batch_size": 3, "micro_batch_size": 2},
            }
        ],
        env_name="math",
    )
    learner = TorchLearner(tiny, cfg)
    batch = _two_groups()
    for s in batch:
        s.advantage = s.reward - 1 / 3
    metrics = learner.train_step(batch)
    # 6 samples in mini-batches of 3 -> 2 optimizer steps per epoch, 2 epochs
    assert metrics["updates"] == 4 and learner.opt_steps == 4
    # later updates see a policy that moved: the ratio leaves 1
    assert metrics["approx_kl"] != 0
    assert metrics["lr"] == pytest.approx(1e-2)  # warm-up (2 steps) is over by the 4th


def test_loss_aggregation_changes_the_gradient(tiny):
    def grad_norm(mode):
        cfg = build_config(
            [{"model": {"name": "tiny"}, "algorithm": {"loss_agg": mode, "micro_batch_size": 1}}],
            env_name="math",
        )
        learner = TorchLearner(tiny, cfg)
        batch = _group()
        return learner.train_step(batch)["grad_norm"]

    token = grad_norm("token-mean")
    seq = grad_norm("seq-mean-token-mean")
    assert token != pytest.approx(seq)


def _learner(tiny, **algorithm):
    cfg = build_config(
        [{"model": {"name": "tiny"}, "optim": {"lr": 1e-2}, "algorithm": algorithm}],
        env_name="math",
    )
    return TorchLearner(tiny, cfg)


def _advantaged_batch():
    batch = _two_groups()
    for s in batch:
        s.advantage = s.reward - 1 / 3
    return batch


def test_truncated_importance_weights_use_the_samplers_logprobs(tiny):
    learner = _learner(tiny, tis_cap=2.0)
    batch = _advantaged_batch()
    # the sampler scored every token 1 nat lower than the learner: ratio e^1 = 2.72, capped at 2
    for s, lps in zip(batch, learner.forward_logprobs(batch), strict=True):
        it = iter(lps)
        s.logprobs = [0.0] + [next(it) - 1.0 if m else 0.0 for m in s.loss_mask[1:]]
    metrics = learner.train_step(batch)
    assert metrics["tis/mean_weight"] == pytest.approx(2.0, abs=1e-4)


def test_adaptive_kl_moves_the_coefficient_and_the_reference_is_loaded(tiny):
    learner = _learner(tiny, kl_coef=0.1, kl_target=0.5, kl_horizon=6)
    assert learner.ref is not None
    first = learner.train_step(_advantaged_batch())
    # step 1: KL 0 (policy = reference) -> error clipped to -0.2 -> 0.1 * (1 - 0.2 * 6 / 6) = 0.08
    assert first["kl"] == pytest.approx(0.0, abs=1e-6) and first["kl_coef"] == pytest.approx(0.1)
    assert learner.kl_ctl.value == pytest.approx(0.08)
    second = learner.train_step(_advantaged_batch())
    assert second["kl_coef"] == pytest.approx(0.08) and second["kl"] > 0


def test_entropy_bonus_and_dual_clip_change_the_update(tiny):
    def norm(**algorithm):
        return _learner(tiny, **algorithm).train_step(_advantaged_batch())["grad_norm"]

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


def test_sft_step_raises_the_demonstrations_likelihood_and_leaves_rl_fresh(tiny, tmp_path):
    cfg = build_config(
        [{"model": {"name": "tiny"}, "algorithm": {"kl_coef": 0.01, "micro_batch_size": 2}}],
        env_name="math",
    )
    learner = TorchLearner(tiny, cfg)
    batch = _group(lens=(5, 9, 3))  # three demonstrations (micro-batches of 2 and 1)
    before = learner.forward_logprobs(batch)
    losses = [learner.sft_step(batch, lr=1e-2)["sft_loss"] for _ in range(3)]
    after = learner.forward_logprobs(batch)
    # the first loss is the mean NLL of the 19 loss tokens before any update
    assert losses[0] == pytest.approx(-sum(map(sum, before)) / 19, rel=1e-4)
    assert losses[2] < losses[0]
    assert all(sum(a) > sum(b) for a, b in zip(after, before, strict=True))
    # the RL optimizer has taken no step; the reference becomes the warmed-up policy
    assert learner.opt_steps == 0 and not learner.opt.state
    learner.end_warmup(tmp_path / "reference")
    assert learner._sft_opt is None
    policy, ref = learner.model.state_dict(), learner.ref.state_dict()
    assert all(torch.equal(policy[k], ref[k]) for k in policy)
    # and a resumed learner gets that reference back, not the base model
    other = TorchLearner(tiny, cfg)
    assert not all(torch.equal(policy[k], other.ref.state_dict()[k]) for k in policy)
    other.load_reference(tmp_path / "reference")
    assert all(torch.equal(policy[k], other.ref.state_dict()[k]) for k in policy)


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
    learner = TorchLearner(tiny, cfg)
    batch = _group()
    nll = -torch.cat([_direct_logprobs(learner.model, s) for s in batch])
    loss = learner.sft_step(batch, lr=1e-3)["sft_loss"]
    assert loss == pytest.approx(float(nll.mean()), rel=1e-5)


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
    cfg = build_config(
        [{"model": {"name": "tiny"}, "algorithm": {"tis_cap": 2.0, "micro_batch_size": 3}}],
        env_name="math",
    )
    learner = TorchLearner(tiny_dropout, cfg)
    batch = _advantaged_batch()
    assert learner.forward_logprobs(batch) == learner.forward_logprobs(batch)
    metrics = learner.train_step(batch)
    # step 0: the update's policy is the frozen one, so every ratio is exactly 1
    assert metrics["clip_frac"] == 0.0 and metrics["approx_kl"] == 0.0


def test_the_critic_reads_values_without_dropout(tiny_dropout):
    cfg = build_config([{"model": {"name": "tiny"}, "algorithm": {"name": "ppo"}}], env_name="math")
    learner = TorchLearner(tiny_dropout, cfg)
    torch.nn.init.normal_(learner.critic.head.weight)  # zero-initialised: make values vary
    batch = _group()
    with torch.no_grad():
        first, second = (
            learner.critic.values(learner._loss_outputs(learner.critic.model, batch, False)[0])
            for _ in range(2)
        )
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
    learner = TorchLearner(folder, cfg)
    # the group of three goes through the shared-prompt forward, the fourth through the plain one
    assert [len(mb) for mb in learner._micro_batches(batch)] == [3, 1]
    learned = learner.forward_logprobs(batch)
    for s, g, lp in zip(batch, results, learned, strict=True):
        direct = _direct_logprobs(learner.model, s, temperature)
        assert torch.allclose(torch.tensor(lp), direct, atol=1e-5), (lp, direct)
        assert torch.allclose(torch.tensor(g.logprobs), direct, atol=1e-5), (g.logprobs, direct)


def test_bf16_keeps_fp32_master_weights_and_computes_in_bf16(tiny):
    def learner(dtype):
        cfg = build_config(
            [
                {
                    "model": {"name": "tiny", "dtype": dtype},
                    "optim": {"lr": 1e-5},
                    "algorithm": {"name": "ppo", "kl_coef": 0.01},
                }
            ],
            env_name="math",
        )
        return TorchLearner(tiny, cfg)

    bf16, fp32 = learner("bfloat16"), learner("float32")
    batch = _advantaged_batch()
    # the forward runs in bf16 (autocast): close to float32's log-probs, not equal to them
    lp16, lp32 = (torch.tensor(sum(x.forward_logprobs(batch), [])) for x in (bf16, fp32))
    assert 1e-4 < (lp16 - lp32).abs().max() < 0.1
    before = {n: p.detach().clone() for n, p in bf16.model.named_parameters()}
    bf16.train_step(batch)
    # every weight with a gradient moved by ~lr (in bf16 storage most steps of 1e-5 round away)
    moved = stepped = 0
    for n, p in bf16.model.named_parameters():
        assert p.dtype == torch.float32, n
        has_grad = p.grad != 0
        stepped += int(has_grad.sum())
        moved += int((p.detach() != before[n])[has_grad].sum())
    assert stepped > 0 and moved / stepped > 0.99
    assert all(p.dtype == torch.float32 for p in bf16.critic.params)
    # the engines get the weights in the compute dtype
    assert {v.dtype for v in bf16.state_dict().values() if v.is_floating_point()} == {
        torch.bfloat16
    }


def test_fp16_training_is_refused_in_one_sentence():
    from trainers.config import ConfigError

    with pytest.raises(ConfigError, match="loss scaling"):
        build_config([{"model": {"name": "tiny", "dtype": "float16"}}], env_name="math")


def test_approx_kl_is_the_mean_log_ratio_old_minus_new(tiny):
    """Samples come from the old policy, so mean(old - new) estimates KL(old || new), as veRL
    reports it. Two epochs over one mini-batch: the first update sees the old policy itself,
    the second the policy after one step, which a one-epoch twin learner reproduces."""
    two = _learner(tiny, ppo_epochs=2, micro_batch_size=6)
    one = _learner(tiny, ppo_epochs=1, micro_batch_size=6)
    batch = _advantaged_batch()
    old = torch.tensor(sum(two.forward_logprobs(batch), []))
    one.train_step(batch)
    new = torch.tensor(sum(one.forward_logprobs(batch), []))
    metrics = two.train_step(batch)
    # approx_kl averages over every token the update passes saw: 2 epochs x N tokens
    expected = float((old - new).sum()) / (2 * len(old))
    assert expected != 0 and metrics["approx_kl"] == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_a_mixtral_checkpoint_reloads_whole_or_is_refused(tmp_path):
    """Saved Mixtral tensors are named per expert, in memory they are fused: reading the
    safetensors by name would miss the router and the experts. Loads go through transformers
    and are strict: only tied weights may be absent."""
    from safetensors.torch import load_file, save_file

    from agents.weights import WeightsError
    from tests.agents.test_engine_hf import _mixtral, _without
    from trainers.checkpoint import CheckpointError

    base = _mixtral(tmp_path / "base", seed=0)
    cfg = build_config([{"model": {"name": "tiny"}, "algorithm": {"kl_coef": 0.01}}], "math")
    learner = TorchLearner(base, cfg)
    with torch.no_grad():
        for p in learner.model.parameters():
            p.add_(0.5)
    learner.save(tmp_path / "ckpt")
    learner.end_warmup(tmp_path / "reference")  # the reference := the moved policy
    other = TorchLearner(base, cfg)
    other.load(tmp_path / "ckpt")
    other.load_reference(tmp_path / "reference")
    want = learner.model.state_dict()
    for model in (other.model, other.ref):
        got = model.state_dict()
        assert all(torch.equal(got[k].float(), want[k].to(got[k].dtype).float()) for k in want)
    # without the router (or one expert) the checkpoint is refused and nothing changes
    weights = tmp_path / "ckpt" / "model" / "model.safetensors"
    tensors = load_file(str(weights))
    gate = "model.layers.0.block_sparse_moe.gate.weight"
    save_file({k: v for k, v in tensors.items() if k != gate}, str(weights), {"format": "pt"})
    fresh = TorchLearner(base, cfg)
    before = {k: v.clone() for k, v in fresh.model.state_dict().items()}
    with pytest.raises(CheckpointError, match="lack 1 of the model's tensors"):
        fresh.load(tmp_path / "ckpt")
    assert all(torch.equal(before[k], v) for k, v in fresh.model.state_dict().items())
    expert = "model.layers.0.block_sparse_moe.experts.1.w2.weight"
    reference = load_file(str(tmp_path / "reference" / "model.safetensors"))
    save_file(
        {k: v for k, v in reference.items() if k != expert},
        str(tmp_path / "reference" / "model.safetensors"),
        {"format": "pt"},
    )
    with pytest.raises(CheckpointError, match="shape"):
        fresh.load_reference(tmp_path / "reference")
    # nor does training start from a model folder that lacks weights
    with pytest.raises(WeightsError, match="lack"):
        TorchLearner(_without(base, tmp_path / "no-gate", gate), cfg)
