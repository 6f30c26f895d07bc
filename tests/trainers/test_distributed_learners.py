"""Learner groups on a real local Ray cluster (trainers/learner_group.py): `fsdp` (FSDP2) and
`deepspeed` (ZeRO-2, ZeRO-3) on 2 gloo workers step the `tiny` model exactly as the
one-process torch learner does on the same batch; their checkpoints load into another
worker count; the engine gets one gathered copy of the weights per version."""

from __future__ import annotations

import pytest
import torch

from agents.models import resolve_model
from trainers.client import AdamParams, Datum, learner_spec
from trainers.config import build_config
from trainers.learner import TorchLearner

pytest.importorskip("deepspeed")


@pytest.fixture(scope="module")
def tiny():
    return resolve_model("tiny", quiet=True)


@pytest.fixture(scope="module")
def ray_driver(ray_address):
    import ray

    from trainers.placement import start_ray

    start_ray(ray_address)
    yield ray
    ray.shutdown()


def _cfg(strategy="torch", workers=1, stage=2, dtype="float32"):
    return build_config(
        [
            {
                "model": {"name": "tiny", "dtype": dtype},
                "algorithm": {"micro_batch_size": 2},
                "optim": {"lr": 1e-3},
                "learner": {"strategy": strategy, "num_workers": workers, "zero_stage": stage},
                "trainer": {"threads": 1},
            }
        ],
        env_name="math",
    )


def _batch(n=5):
    """n sequences, three of them sharing a prompt: 3 passes of micro-batch 2 (uneven over 2)."""
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 300, (6,), generator=g).tolist()
    data = []
    for i in range(n):
        p = prompt if i < 3 else torch.randint(3, 300, (4,), generator=g).tolist()
        resp = torch.randint(3, 300, (3 + i,), generator=g).tolist()
        ids = p + resp
        mask = [0] * len(p) + [1] * len(resp)
        adv = [0.0] * len(p) + [float(i - 2) / 2] * len(resp)
        data.append(Datum.from_sequence(ids, mask, len(p), advantages=adv))
    return data


# Adam's eps at 1e-6, not 1e-8: the first step moves a weight by lr * g / (|g| + eps), so a
# gradient element near eps turns the rounding of a differently ordered sum (~1e-10) into a
# weight difference of lr / eps * 1e-10 = 1e-5 (seen: ZeRO-3, a gate_proj element whose
# clipped gradient was 4e-9). At 1e-6 rounding stays ~4e-7; a worker's advantages 2% off
# still differ by 2e-3.
ADAM = AdamParams(learning_rate=1e-3, eps=1e-6)


def _one_update(handle_call, data):
    fb = handle_call("forward_backward", data, "ppo", {"clip_low": 0.2, "clip_high": 0.2})
    out = fb.result()
    handle_call("optim_step", ADAM).result()
    return out


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    """The one-process learner: weights after one and two updates, and a checkpoint after one."""
    learner = TorchLearner(tiny, learner_spec(_cfg()))
    out = _one_update(lambda m, *a: _Done(getattr(learner, m)(*a)), _batch())
    first = _floats(learner.state_dict())
    moments = {
        n: {k: v.clone() for k, v in learner.opt.state[p].items()}
        for n, p in learner.model.named_parameters()
    }
    ckpt = tmp_path_factory.mktemp("torch-ckpt")
    learner.save_state(ckpt)
    _one_update(lambda m, *a: _Done(getattr(learner, m)(*a)), _batch(4))
    return out, first, moments, ckpt, _floats(learner.state_dict())


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def _floats(state):
    return {k: v.float().clone() for k, v in state.items()}


def _worst(got, want):
    assert got and set(got) <= set(want)
    return max((got[k].float() - want[k]).abs().max().item() for k in got)


@pytest.mark.parametrize(
    "strategy,stage", [("fsdp", 2), ("deepspeed", 2), ("deepspeed", 3), ("torch", 2)]
)
def test_two_workers_step_like_one_process(
    ray_driver, tiny, reference, strategy, stage, tmp_path, monkeypatch
):
    from trainers.learner_group import learner_group

    # where the workers would compile an op (learner_group hands them the driver's setting)
    ops = tmp_path / "torch-extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ops))
    want_out, want, want_moments, torch_ckpt, want_second = reference
    group = learner_group(learner_spec(_cfg(strategy, 2, stage)), str(tiny), threads=2)
    out = _one_update(group.call, _batch())
    # the engine's copy: gathered into rank 0 alone
    got, other = ray_driver.get([a.call.remote("state_dict") for a in group.actors])
    assert other is None
    initial = _floats(TorchLearner(tiny, learner_spec(_cfg())).state_dict())
    assert _worst(got, initial) > 1e-4  # the update moved the weights
    assert _worst(got, want) < 1e-5, f"{strategy} ZeRO-{stage}"
    for a, b in zip(out.loss_fn_outputs, want_out.loss_fn_outputs, strict=True):
        assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-5)
    assert out.metrics["tokens"] == want_out.metrics["tokens"]

    # the group's checkpoint (full tensors) loads into the one-process learner: same moments
    group.call("save_state", str(tmp_path)).result()
    alone = TorchLearner(tiny, learner_spec(_cfg()))
    alone.load_state(tmp_path)
    assert _worst(_floats(alone.state_dict()), want) < 1e-5
    for n, p in alone.model.named_parameters():
        for k in ("exp_avg", "exp_avg_sq"):
            assert (alone.opt.state[p][k] - want_moments[n][k]).abs().max() < 1e-6, (n, k)
        assert float(alone.opt.state[p]["step"]) == 1

    # the one-process checkpoint loads into the group; the next update matches too
    group.call("load_state", str(torch_ckpt)).result()
    _one_update(group.call, _batch(4))
    assert _worst(group.call("state_dict").result(), want_second) < 1e-5

    # after a supervised warm-up RL starts with a fresh optimizer: no moments, step 0
    group.call("reset_optimizer").result()
    group.call("save_state", str(tmp_path / "reset")).result()
    moments = torch.load(tmp_path / "reset" / "optimizer.pt", weights_only=False)
    for m in moments["full_optimizer"].values():
        assert m["step"] == 0 and not m["exp_avg"].any() and not m["exp_avg_sq"].any()
    # nothing was compiled: DeepSpeed's CPU shared-memory all-reduce op, a ~60 s build on a
    # fresh machine, serves only its inference path (trainers/learner_dist.py)
    assert not list(ops.rglob("*.so")), sorted(p.name for p in ops.rglob("*"))
    for a in group.actors:
        ray_driver.kill(a)


def test_one_fsdp_worker_steps_like_one_process(ray_driver, tiny, reference):
    """One FSDP2 worker (a run resumed with `learner.num_workers=1`) takes the one-process
    path where a micro-batch shares its prompt: the prompt pass must go through the wrapped
    model's own forward, where FSDP gathers the root's sharded weights, not its body alone."""
    from trainers.learner_group import learner_group

    want_out, want, *_ = reference
    group = learner_group(learner_spec(_cfg("fsdp", 1)), str(tiny), threads=2)
    out = _one_update(group.call, _batch())
    assert _worst(group.call("state_dict").result(), want) < 1e-5
    for a, b in zip(out.loss_fn_outputs, want_out.loss_fn_outputs, strict=True):
        assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-5)
    for a in group.actors:
        ray_driver.kill(a)


def _master_delta(save, tiny, tmp_path):
    """The fp32 master weights' change from the initial weights, read from a saved folder."""
    from agents.weights import from_pretrained

    save(str(tmp_path))
    after = from_pretrained(tmp_path, torch.float32).state_dict()
    before = from_pretrained(tiny, torch.float32).state_dict()
    return {k: after[k] - before[k] for k in before if k in after and "weight" in k}


@pytest.mark.parametrize("strategy", ["torch", "fsdp", "deepspeed"])
def test_bf16_keeps_fp32_master_weights(ray_driver, tiny, strategy, tmp_path):
    """lr 1e-5 moves a weight by ~1e-5, below bf16's resolution at these weights' size
    (~1e-4): stepped in bf16 the update would round away. With fp32 master weights it lands,
    and matches the fp32 update's direction."""
    from trainers.learner_group import learner_group

    small = AdamParams(learning_rate=1e-5)

    def update(call):
        call("forward_backward", _batch(), "ppo", {"clip_low": 0.2, "clip_high": 0.2}).result()
        call("optim_step", small).result()

    fp32 = TorchLearner(tiny, learner_spec(_cfg()))
    update(lambda m, *a: _Done(getattr(fp32, m)(*a)))
    want = _master_delta(fp32.save_weights, tiny, tmp_path / "fp32")
    if strategy == "torch":
        learner = TorchLearner(tiny, learner_spec(_cfg(dtype="bfloat16")))
        update(lambda m, *a: _Done(getattr(learner, m)(*a)))
        got = _master_delta(learner.save_weights, tiny, tmp_path / "bf16")
    else:
        group = learner_group(learner_spec(_cfg(strategy, 2, 2, "bfloat16")), str(tiny), threads=2)
        update(group.call)
        got = _master_delta(
            lambda d: group.call("save_weights", d).result(), tiny, tmp_path / "bf16"
        )
        for a in group.actors:
            ray_driver.kill(a)
    from agents.weights import from_pretrained

    w0 = from_pretrained(tiny, torch.float32).state_dict()
    lost = moved = agree = total = 0
    for k, d32 in want.items():
        rounded = (w0[k] + d32).bfloat16() == w0[k].bfloat16()
        lost += int(rounded[d32 != 0].sum())
        moved += int((got[k] != 0).sum())
        agree += int((torch.sign(got[k]) == torch.sign(d32))[d32 != 0].sum())
        total += int((d32 != 0).sum())
    assert lost / total > 0.5  # bf16 weights would have kept most of them unchanged
    assert moved / total > 0.95, f"{strategy}: only {moved / total:.1%} of the weights moved"
    # Adam's first step is ~lr * sign(gradient): agreement is the bf16 gradients' sign
    # agreement. DeepSpeed runs the whole pass on bf16 weights (not autocast over fp32 ones),
    # so its small gradients are noisier: measured 69.9% there, above 90% for torch and fsdp.
    floor = 0.65 if strategy == "deepspeed" else 0.9
    assert agree / total > floor, f"{strategy}: {agree / total:.1%} agree with the fp32 update"
