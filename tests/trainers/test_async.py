"""The async schedule (trainers/async_loop.py, issue 18): real `skyrl train` on the `tiny`
model against the session's real Ray cluster.

One module-scoped run carries most checks (CI time): the toy digits task behind a slow,
three-turn environment (benchmarks/latency_env.py, 0.5 s median a step, so a batch's
three turns outlast a learner step and new weights arrive while they run; a narrow spread,
delay_sigma 0.25 rather than the benchmark's 0.6, so no straggler holds a step for seconds;
enough env workers for the 3 batches in flight, so none queues behind another) on
`trainer.schedule=async` with the default bound (max_staleness 2), 14 steps at twice the
toy project's learning rate (the fewest that still show the reward rise), killed with
SIGKILL after step 5 and resumed. On it: the reward rises, new weights reach episodes
mid-way (one episode, two versions), no sample is older than the bound, the metrics are
written, and the kill lost and repeated nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, skyrl
from tests.trainers.test_refactor_pin import PINNED, _same

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "e2e" / "toy"
STEPS, P, G = 14, 4, 8
CONFIG = f"""\
environments:
  slow_digits: latency_env.py:SlowDigitsEnv
env:
  name: slow_digits
  tasks: tasks.jsonl
  max_turns: 3
  kwargs: {{turns: 3, delay_s: 0.5, delay_sigma: 0.25}}
model:
  name: tiny
rollout:
  batch_size: {P}
  group_size: {G}
  max_new_tokens: 12
  env_workers: {3 * P * G}
optim:
  lr: 0.006
trainer:
  max_steps: {STEPS}
  checkpoint_every: 4
  schedule: async
  threads: 1  # one torch thread per process: beside other tests, no wait on oversubscribed cores
eval:
  limit: 0
tracking:
  enabled: false
"""


def _lines(path: Path) -> list[dict]:
    # "\n" only: a rollout's text may hold U+2028 and the like (written with ensure_ascii=False)
    return [json.loads(ln) for ln in path.read_text().split("\n") if ln.strip()]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, ray_address):
    """The run's folder, and the checkpoint state the resume started from."""
    tmp = tmp_path_factory.mktemp("async")
    shutil.copy(ROOT / "benchmarks" / "latency_env.py", tmp)
    tasks = (TOY / "tasks.jsonl").read_text().replace('"env": "digits"', '"env": "slow_digits"')
    (tmp / "tasks.jsonl").write_text(tasks)
    (tmp / "skyrl.yaml").write_text(CONFIG)
    cmd = [str(BIN / "skyrl"), "train", "--ray-address", ray_address, "--run-name", "a"]
    with open(tmp / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        while True:  # past the step-4 checkpoint, mid-run
            runs = list((tmp / "runs").glob("a-*"))
            metrics = runs[0] / "metrics.jsonl" if runs else None
            if metrics and metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
                break
            assert proc.poll() is None and time.time() < deadline, (tmp / "first.log").read_text()
            time.sleep(0.05)
        proc.kill()  # SIGKILL: no handler, no final checkpoint
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = runs
    state = json.loads((run / "checkpoints" / "step-000004" / "trainer_state.json").read_text())
    skyrl("train", "--resume", str(run), "--ray-address", ray_address, cwd=tmp, timeout=400)
    return run, state


def test_toy_task_learns_under_async(killed_and_resumed):
    """Measured (14 steps, lr 0.006): mean reward ~0.02 over the first 5 steps, ~0.15 over
    the last 5; with the update off it stays ~0.02."""
    run, _ = killed_and_resumed
    rewards = [m["reward/mean"] for m in _lines(run / "metrics.jsonl")]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"async mean reward: first 5 steps {first:.3f}, last 5 steps {last:.3f}: {rewards}")
    assert len(rewards) == STEPS
    assert last >= 0.05 and last >= 2.5 * first, rewards


def test_weights_reach_episodes_in_flight(killed_and_resumed):
    """Some episode was sampled by two policy versions (new weights arrived mid-episode),
    and each token's version is at most one the learner had published by then."""
    run, _ = killed_and_resumed
    mixed = 0
    for step in range(1, STEPS + 1):
        for r in _lines(run / "rollouts" / f"step-{step:06d}.jsonl"):
            assert len(r["token_versions"]) == r["response_len"]
            assert max(r["token_versions"]) <= step - 1  # no version from the future
            assert r["token_versions"] == sorted(r["token_versions"])
            mixed += len(set(r["token_versions"])) > 1
    assert mixed > 0


def test_staleness_bound_and_metrics(killed_and_resumed):
    """No trained sample is more than max_staleness (2) versions old; the histogram, idle
    fractions, buffer depth and rates are in every metrics line."""
    run, _ = killed_and_resumed
    for m in _lines(run / "metrics.jsonl"):
        assert m["staleness/max"] <= 2
        assert sum(m[f"staleness/hist/{s}"] for s in range(3)) == P * G
        for key in ("perf/engine_idle", "perf/learner_idle"):
            assert 0.0 <= m[key] <= 1.0, (key, m[key])
        assert m["async/buffer_depth"] >= 0 and m["perf/trained_samples_per_s"] > 0
        assert "perf/episodes_per_s" in m
        # decoupled PPO's weight on tokens older weights sampled (none at staleness 0)
        if m["staleness/max"] > 0:
            assert m["async/stale_tokens"] > 0 and 0 < m["async/behaviour_weight"] <= 2.0
        else:
            assert "async/behaviour_weight" not in m
    staleness = [r["staleness"] for s in range(1, STEPS + 1)
                 for r in _lines(run / "rollouts" / f"step-{s:06d}.jsonl")]  # fmt: skip # a table of values, laid out by hand
    assert max(staleness) <= 2 and max(staleness) >= 1  # it did run ahead of the learner


def test_kill_and_resume_lose_and_repeat_nothing(killed_and_resumed):
    """Step t trains batch t (the tasks sync's step t would take), once: none lost, none
    twice. The batches sampled ahead of the step-4 checkpoint are trained either as the
    checkpoint's buffer held them (token for token) or, if they were mid-rollout, resampled
    from their tasks and seeds after the resume."""
    import numpy as np

    run, state = killed_and_resumed
    assert [m["step"] for m in _lines(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    tasks = [json.loads(ln)["id"] for ln in (TOY / "tasks.jsonl").read_text().splitlines()]
    for step in range(1, STEPS + 1):
        got = [r["task_id"] for r in _lines(run / "rollouts" / f"step-{step:06d}.jsonl")]
        want = []
        for i in range((step - 1) * P, step * P):  # trainers.steps.batch_tasks, seed 0
            epoch, pos = divmod(i, len(tasks))
            want += [tasks[int(np.random.default_rng([0, epoch]).permutation(len(tasks))[pos])]] * G
        assert got == want, step
    # Batches 5-7 were sampled ahead when the step-4 checkpoint was written: each one either
    # finished (in the checkpoint's buffer: trained token for token as sampled) or was still
    # running (resampled after the resume, by the checkpoint's weights, version 4, or later).
    # Which, depends on the machine's speed; both are checked, neither may go missing.
    buffered = state["async_buffer"]
    for b in range(5, 8):
        trained = _lines(run / "rollouts" / f"step-{b:06d}.jsonl")
        if str(b) in buffered:
            assert [t["token_ids"] for t in trained] == [t["token_ids"] for t in buffered[str(b)]]
        else:
            assert min(v for t in trained for v in t["token_versions"]) >= 4, b
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_checkpointed_buffer_round_trips():
    """What a checkpoint's `async_buffer` holds (JSON) comes back as the same trajectories."""
    from dataclasses import asdict

    from agents.trajectory import Trajectory, Turn
    from trainers.async_loop import restore_buffer

    t = Trajectory("d1", 2, [Turn("user", "Write digits."), Turn("assistant", "12")], 3)
    t.token_ids, t.loss_mask, t.logprobs = [1, 2, 3, 4], [0, 0, 0, 1], [0.0, 0.0, 0.0, -0.5]
    t.versions, t.token_versions, t.reward = [3], [3], 1.0
    state = json.loads(json.dumps({"async_buffer": {"5": [asdict(t)]}}))
    assert restore_buffer(state) == {5: [t]}


def test_behaviour_weights_are_decoupled_ppos_by_hand():
    """Stale tokens: advantage times min(exp(old - sampled), cap); fresh tokens: unchanged
    (their weight would be ~1 but is exactly 1, so max_staleness=0 stays sync's numbers)."""
    import math

    import torch

    from trainers.client import Datum
    from trainers.steps import behaviour_weights

    # prompt token, then 3 model tokens: the first two sampled by an older version
    d = Datum.from_sequence([5, 6, 7, 8], [0, 1, 1, 1], 1, sampler_logprobs=[0, -1.0, -2.0, -0.5])
    adv_T = torch.tensor([0.5, -0.5, 2.0])
    old_T = torch.tensor([-0.7, -0.2, -3.0])  # the learner's before the update
    stale_T = torch.tensor([True, True, False])
    (got_T,), m = behaviour_weights([adv_T], [stale_T], [old_T], [d], cap=2.0)
    w0, w1 = math.exp(-0.7 + 1.0), min(math.exp(-0.2 + 2.0), 2.0)
    assert torch.allclose(got_T, torch.tensor([0.5 * w0, -0.5 * w1, 2.0]))
    assert got_T[2].item() == 2.0
    assert m["async/stale_tokens"] == 2 and m["async/behaviour_capped"] == 0.5
    assert math.isclose(m["async/behaviour_weight"], (w0 + w1) / 2, rel_tol=1e-6)


def test_max_staleness_zero_is_the_sync_schedule(tmp_path, ray_address):
    """async.max_staleness=0 gives the numbers sync's pin recorded (test_refactor_pin)."""
    skyrl(
        "train",
        *("--env", "math", "--model", "tiny", "--max-steps", "6"),
        *("--seed", "0", "--run-name", "pin", "--set", "eval.limit=0"),
        *("--set", "tracking.enabled=false", "--ray-address", ray_address),
        *("--set", "trainer.schedule=async", "--set", "async.max_staleness=0"),
        *("--set", "trainer.threads=1"),  # as the pin's runs (test_refactor_pin)
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob("pin-*")
    got = _lines(run / "metrics.jsonl")
    _same(got, PINNED["math_grpo"])
    assert all(m["staleness/max"] == 0 for m in got)


@pytest.mark.parametrize("stale", ["drop", "reweight"])
def test_samples_beyond_the_bound_are_dropped_or_reweighted(tmp_path, ray_address, stale):
    """Two batches sampled ahead (rollout_batches=2) with max_staleness=0: samples one
    version old appear; `drop` trains none of them, `reweight` trains them with truncated
    importance weights (tis/mean_weight), every sample's behaviour log-probs the sampled ones."""
    skyrl(
        "train",
        *("--env", "math", "--model", "tiny", "--max-steps", "4", "--run-name", "s"),
        *("--set", "eval.limit=0", "--set", "tracking.enabled=false"),
        *("--set", "rollout.batch_size=2", "--set", "rollout.max_new_tokens=24"),
        *("--set", "trainer.schedule=async", "--set", "async.max_staleness=0"),
        *("--set", "async.rollout_batches=2", "--set", f"async.stale={stale}"),
        *("--set", "algorithm.tis_cap=2", "--set", "trainer.threads=1"),
        *("--ray-address", ray_address),
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob("s-*")
    metrics = _lines(run / "metrics.jsonl")
    records = [r for s in range(1, 5) for r in _lines(run / "rollouts" / f"step-{s:06d}.jsonl")]
    old = [r for r in records if r["staleness"] > 0]
    assert old, "no sample ran ahead of the learner"
    if stale == "drop":
        assert all(r["dropped"] for r in old)
        assert not any(r["dropped"] for r in records if r["staleness"] == 0)
        assert sum(m["async/dropped"] for m in metrics) == len(old)
    else:
        assert not any(r["dropped"] for r in records)
        assert all("tis/mean_weight" in m for m in metrics if m["async/trained_samples"])


def test_engine_swaps_weights_between_decode_steps():
    """The hf engine's in-flight hook: weights pushed while a request decodes go live at the
    next decode step; the request is not restarted (its earlier tokens keep version 0) and
    finishes on the new weights (version 7), token by token."""
    import torch

    from agents.engine import GenRequest
    from agents.engine_hf import HFEngine
    from agents.models import resolve_model

    engine = HFEngine(resolve_model("tiny"), threads=1)
    engine.eos_ids = []  # decode the whole budget
    new = {k: v + 0.01 for k, v in engine.model.state_dict().items()}
    out: list = []
    worker = threading.Thread(
        target=lambda: out.extend(engine.generate([GenRequest([1, 2, 3], 400, 0)], temperature=1.0))
    )
    worker.start()
    while engine._decoding == 0:
        time.sleep(0.001)
    time.sleep(0.2)
    engine.update_weights(new, 7)  # returns once live, while the request still decodes
    worker.join()
    (res,) = out
    versions = res.token_versions
    assert len(res.token_ids) == 400 and versions[0] == 0 and versions[-1] == 7
    assert versions == sorted(versions) and set(versions) == {0, 7}
    assert engine.version == 7
    p = engine.model.state_dict()
    assert all(torch.equal(p[k], new[k]) for k in new)
