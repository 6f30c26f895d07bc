"""Tinker's REST API of `skyrl serve --model tiny`, driven by the real `tinker` client."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import openai
import pytest
import tinker
from tinker import types

from tests.serve.conftest import Server, start_server

BIN = Path(sys.executable).parent
KEY = "tml-local-test"
EXAMPLE = Path(__file__).parents[2] / "examples" / "tinker_rl_loop.py"
TEXT = "The answer is 42 and the question is old."


_OPEN: list[tinker.ServiceClient] = []


def service(server: Server) -> tinker.ServiceClient:
    sc = tinker.ServiceClient(base_url=server.url, api_key=KEY)
    _OPEN.append(sc)
    return sc


def _close_sessions() -> None:
    """End the sessions opened so far, while their server still runs: an open session keeps a
    heartbeat thread that, once its server is gone, logs a failure every 10 s to the end of
    the suite (and closing then retries for minutes)."""
    while _OPEN:
        with contextlib.suppress(Exception):
            _OPEN.pop().close("success").result(timeout=10)


@pytest.fixture(autouse=True)
def _sessions_end_with_the_test():
    yield
    _close_sessions()


def sft_datum(tok, text: str = TEXT, prompt_tokens: int = 3) -> types.Datum:
    ids = tok.encode(text)
    weights = [0.0] * (prompt_tokens - 1) + [1.0] * (len(ids) - prompt_tokens)
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": weights},
    )


def logprobs_of(tc, datum: types.Datum) -> np.ndarray:
    out = tc.forward([datum], "cross_entropy").result()
    return np.asarray(out.loss_fn_outputs[0]["logprobs"].tolist())


def test_train_save_sample_loop_with_futures(server: Server) -> None:
    sc = service(server)
    caps = tinker.RestClient(base_url=server.url, api_key=KEY).get_server_capabilities().result()
    assert caps.supported_models[0].model_name == "tiny"
    tc = sc.create_lora_training_client(base_model="tiny", rank=8, seed=1).result()
    info = tc.get_info()
    assert info.is_lora and info.lora_rank == 8
    tok = tc.get_tokenizer()
    datum = sft_datum(tok)
    before = logprobs_of(tc, datum)
    # futures: queue every call first, then wait; the server runs them in order
    pending = []
    for _ in range(6):
        pending.append(tc.forward_backward([datum], "cross_entropy"))
        pending.append(tc.optim_step(types.AdamParams(learning_rate=5e-3)))
    losses = [p.result().metrics["loss:sum"] for p in pending[::2]]
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    mask = np.asarray(datum.loss_fn_inputs["weights"].tolist()) > 0
    assert losses[0] == pytest.approx(-before[mask].sum(), rel=1e-4)
    after = logprobs_of(tc, datum)
    assert after[mask].sum() > before[mask].sum() + 1.0

    sampler = tc.save_weights_and_get_sampling_client().result()
    ids = tok.encode(TEXT)
    prompt = types.ModelInput.from_ints(ids[:3])
    res = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=8, temperature=0.0)).result()
    seq = res.sequences[0]
    assert len(seq.tokens) == 8 and seq.stop_reason == "length"
    assert seq.tokens == res.sequences[1].tokens
    scored = sampler.compute_logprobs(
        types.ModelInput.from_ints(ids[:3] + list(seq.tokens))
    ).result()
    assert scored[0] is None
    assert np.allclose(scored[3:], seq.logprobs, atol=1e-4), "the sampler serves other weights"
    # the sampler's weights are the trained ones: its log-probs of TEXT are the learner's
    full = sampler.compute_logprobs(types.ModelInput.from_ints(ids)).result()
    assert np.allclose(np.asarray(full[1:])[mask], after[mask], atol=1e-3)
    # a named sampler checkpoint is also a model of the OpenAI API
    named = tc.save_weights_for_sampler("after-sft").result().path
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    assert named in [m.id for m in oa.models.list().data]
    via_openai = oa.completions.create(model=named, prompt=ids[:3], max_tokens=8, temperature=0)  # type: ignore[arg-type]
    assert via_openai.choices[0].text == tok.decode(seq.tokens, skip_special_tokens=True)
    with pytest.raises(openai.NotFoundError, match="no checkpoint"):
        oa.completions.create(model=named + "x", prompt="a", max_tokens=2)
    base = sc.create_sampling_client(base_model="tiny").result()
    base_lp = base.compute_logprobs(types.ModelInput.from_ints(ids)).result()
    assert np.allclose(np.asarray(base_lp[1:])[mask], before[mask], atol=1e-3)


def test_rl_losses_match_their_definition(server: Server) -> None:
    sc = service(server)
    tc = sc.create_lora_training_client(base_model="tiny", rank=4).result()
    tok = tc.get_tokenizer()
    datum = sft_datum(tok)
    lp = logprobs_of(tc, datum)
    n = len(lp)
    adv = np.linspace(-1.0, 1.0, n).astype(np.float32)
    ids = tok.encode(TEXT)
    for loss, cfg in [
        ("importance_sampling", None),
        ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    ]:
        rl = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={
                "target_tokens": ids[1:],
                "weights": [1.0] * n,
                "logprobs": lp.astype(np.float32).tolist(),
                "advantages": adv.tolist(),
            },
        )
        out = tc.forward_backward([rl], loss, cfg).result()
        # on-policy the ratio is 1, so both losses are -sum(A) over the loss tokens
        assert out.metrics["loss:sum"] == pytest.approx(-float(adv.sum()), abs=1e-3)
        assert np.allclose(out.loss_fn_outputs[0]["logprobs"].tolist(), lp, atol=1e-4)


def test_two_clients_train_two_adapters_in_isolation(server: Server) -> None:
    a = service(server).create_lora_training_client(base_model="tiny", rank=8, seed=3).result()
    b = service(server).create_lora_training_client(base_model="tiny", rank=8, seed=3).result()
    tok = a.get_tokenizer()
    da, db = sft_datum(tok), sft_datum(tok, "SELECT name FROM users WHERE age > 30;")
    b_before = logprobs_of(b, db)
    errors: list[BaseException] = []

    def train_a() -> None:
        try:
            for _ in range(4):
                a.forward_backward([da], "cross_entropy").result()
                a.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=train_a)
    t.start()
    seen = []
    while t.is_alive():
        seen.append(logprobs_of(b, db))
    t.join()
    assert not errors
    assert all(np.array_equal(x, b_before) for x in seen), "a's optim_step moved b's weights"
    a_after = logprobs_of(a, da)
    b.forward_backward([db], "cross_entropy").result()
    b.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    assert not np.array_equal(logprobs_of(b, db), b_before)
    assert np.array_equal(logprobs_of(a, da), a_after), "b's optim_step moved a's weights"


def test_unsupported_features_fail_naming_them(server: Server) -> None:
    sc = service(server)
    with pytest.raises(Exception, match="dimuon"):
        sc.create_lora_training_client(
            base_model="tiny", rank=4, optimizer=types.DimuonOptimizerConfig()
        ).result()
    with pytest.raises(Exception, match="not served here"):
        sc.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()
    tc = sc.create_lora_training_client(base_model="tiny", rank=4).result()
    tok = tc.get_tokenizer()
    datum = sft_datum(tok)
    with pytest.raises(Exception, match="'dro' is not supported"):
        tc.forward_backward([datum], "dro").result()
    ids = tok.encode(TEXT)
    shifted_wrong = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[:-1], "weights": [1.0] * (len(ids) - 1)},
    )
    with pytest.raises(Exception, match="shifted by one"):
        tc.forward_backward([shifted_wrong], "cross_entropy").result()
    with pytest.raises(Exception, match="needs"):
        tc.forward_backward([datum], "ppo").result()
    sampler = sc.create_sampling_client(base_model="tiny").result()
    with pytest.raises(Exception, match="top_k"):
        sampler.sample(
            types.ModelInput.from_ints(ids[:3]), 1, types.SamplingParams(max_tokens=4, top_k=5)
        ).result()
    # the server still trains after all that
    assert tc.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"] > 0


@pytest.mark.filterwarnings("ignore::FutureWarning")  # TrainingClient.load_state is deprecated
def test_state_survives_a_restart_and_tinker_paths_resolve(tmp_path: Path) -> None:
    state = tmp_path / "state"
    srv = start_server(state)
    try:
        sc = service(srv)
        tc = sc.create_lora_training_client(base_model="tiny", rank=8).result()
        tok = tc.get_tokenizer()
        datum = sft_datum(tok)
        for _ in range(3):
            tc.forward_backward([datum], "cross_entropy").result()
            tc.optim_step(types.AdamParams(learning_rate=2e-2)).result()
        ckpt = tc.save_state("step3").result().path
        sampler_path = tc.save_weights_for_sampler("step3").result().path
        assert ckpt.startswith("tinker://") and "/weights/step3" in ckpt
        trained = logprobs_of(tc, datum)
        ids = tok.encode(TEXT)
        served = (
            tc.create_sampling_client(sampler_path)
            .result()
            .compute_logprobs(types.ModelInput.from_ints(ids))
            .result()
        )
        old_model = tc
    finally:
        srv.stop()
    srv = start_server(state, srv.port)
    try:
        sc2 = service(srv)
        tc2 = sc2.create_training_client_from_state_with_optimizer(ckpt).result()
        assert tc2.get_info().lora_rank == 8
        assert np.allclose(logprobs_of(tc2, datum), trained, atol=1e-5)
        loss = tc2.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
        tc2.optim_step(types.AdamParams(learning_rate=2e-2)).result()
        mask = np.asarray(datum.loss_fn_inputs["weights"].tolist()) > 0
        assert loss == pytest.approx(-trained[mask].sum(), rel=1e-4)
        again = sc2.create_sampling_client(model_path=sampler_path).result()
        assert np.allclose(
            again.compute_logprobs(types.ModelInput.from_ints(ids)).result()[1:],
            served[1:],
            atol=1e-5,
        )
        with pytest.raises(Exception, match="load a checkpoint"):
            old_model.forward_backward([datum], "cross_entropy").result()
        old_model.load_state(ckpt).result()  # the restarted server rebuilds it from the path
        assert np.allclose(logprobs_of(old_model, datum), trained, atol=1e-5)
    finally:
        _close_sessions()  # both servers' sessions: the restarted one serves the same port
        srv.stop()


def test_the_tinker_cookbook_style_example_learns_the_toy_task(server: Server) -> None:
    """examples/tinker_rl_loop.py, as written, raises the digit reward against skyrl serve
    (measured: ~0.02 over its first 3 steps, 0.9-1.0 over its last 3)."""
    spec = importlib.util.spec_from_file_location("tinker_rl_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    history = module.main(module.Config(base_url=server.url, api_key=KEY))
    rewards = [h["reward"] for h in history]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"tinker_rl_loop: mean reward first 3 steps {first:.3f}, last 3 steps {last:.3f}")
    assert len(rewards) == 16
    assert first < 0.1 and last > 0.6, rewards
    # 16 snapshots were written; each model keeps only its 4 newest on disk
    per_model = [
        len(list(d.glob("sampler_weights/ephemeral-*")))
        for d in (server.state_dir / "checkpoints").iterdir()
    ]
    assert max(per_model) == 4, per_model


def test_rank_zero_asks_for_full_fine_tuning(server: Server) -> None:
    tc = service(server).create_lora_training_client(base_model="tiny", rank=0).result()
    assert tc.get_info().is_lora is False
    datum = sft_datum(tc.get_tokenizer())
    before = logprobs_of(tc, datum)
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    after = logprobs_of(tc, datum)
    mask = np.asarray(datum.loss_fn_inputs["weights"].tolist()) > 0
    assert after[mask].sum() > before[mask].sum()
    ids = tc.get_tokenizer().encode(TEXT)
    sampler = tc.save_weights_and_get_sampling_client().result()
    served = sampler.compute_logprobs(types.ModelInput.from_ints(ids)).result()
    assert np.allclose(np.asarray(served[1:])[mask], after[mask], atol=1e-3)


def test_hostile_bodies_get_4xx_and_the_server_keeps_training(server: Server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    # a chunked body with no length: cut off once it passes the cap
    conn.putrequest("POST", "/api/v1/create_session")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    chunk = b"x" * 65536
    with contextlib.suppress(OSError):
        for _ in range(40):
            conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        conn.send(b"0\r\n\r\n")
    r = conn.getresponse()
    assert r.status == 413 and b"limit" in r.read()
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    for path, body, status in [
        ("/api/v1/forward_backward", b"\x0a\xff\xff\xff\xff\x0f garbage", 400),
        ("/api/v1/create_model", b'{"session_id": 1}', 400),
        ("/api/v1/retrieve_future", b'{"request_id": "nope"}', 404),
        ("/api/v1/asample", b'{"prompt": "x"}', 400),
    ]:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == status, (path, r.status)
        assert json.loads(r.read())["detail"]
    tc = service(server).create_lora_training_client(base_model="tiny", rank=2).result()
    assert tc.forward_backward([sft_datum(tc.get_tokenizer())], "cross_entropy").result().metrics


def test_skyrl_eval_of_a_tinker_trained_checkpoint_matches_local_eval(
    server: Server, tmp_path: Path
) -> None:
    """A checkpoint trained through Tinker's API to answer 8 (it picks up the digit before the
    tags); `skyrl eval` through the OpenAI API (model=tinker://...) and on its folder give
    the same answers, greedy."""
    tc = service(server).create_lora_training_client(base_model="tiny", rank=8, seed=5).result()
    tok = tc.get_tokenizer()
    data = []
    for q in ("What is 3 + 5?", "How many shells does each friend get?", "Compute 64 / 8."):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        p_ids = tok.encode(prompt, add_special_tokens=False)
        ids = p_ids + tok.encode("<answer>8</answer><|im_end|>", add_special_tokens=False)
        weights = [0.0] * (len(p_ids) - 1) + [1.0] * (len(ids) - len(p_ids))
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": ids[1:], "weights": weights},
            )
        )
    for _ in range(20):
        tc.forward_backward(data, "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    path = tc.save_weights_for_sampler("answers-8").result().path
    folder = next((server.state_dir / "checkpoints").glob("*/sampler_weights/answers-8"))
    env = {**os.environ, "HOME": str(tmp_path), "OPENAI_API_KEY": KEY}  # the checkpoint's client
    base = [str(BIN / "skyrl"), "eval", "--env", "math", "--limit", "6", "--no-tracking"]
    texts, reports = [], []
    for name, model in [("local", str(folder)), ("remote", f"openai:{path}@{server.url}/v1")]:
        out = subprocess.run(
            [*base, "--model", model, "--output", str(tmp_path / name)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        reports.append(json.loads((tmp_path / name / "report.json").read_text()))
        rows = [json.loads(x) for x in (tmp_path / name / "results.jsonl").read_text().splitlines()]
        texts.append([[t["text"] for t in r["turns"] if t["role"] == "assistant"] for r in rows])
    assert texts[0] == texts[1]
    assert sum("8" in t[0] for t in texts[0]) >= 4, texts[0]  # not the base model's blank lines
    assert (reports[0]["accuracy"], reports[0]["mean_reward"]) == (
        reports[1]["accuracy"],
        reports[1]["mean_reward"],
    )
    print("eval through tinker:// checkpoint:", reports[0]["accuracy"], texts[0])
