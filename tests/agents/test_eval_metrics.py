"""pass@k by hand, the metadata breakdown, and the openai engine's character codec."""

from __future__ import annotations

import pytest

from agents.chat import ChatFormat
from agents.engine_openai import TextTokenizer, parse_chatml, parse_spec
from agents.evaluate import ks_for, pass_at_k


def test_pass_at_k_matches_hand_computation() -> None:
    # n=5 samples, c=2 correct, k=1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4 (= c/n)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # k=3: 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    # k=4: n-c=3 < 4, so every draw of 4 holds a correct one: 1.0
    assert pass_at_k(5, 2, 4) == 1.0
    # n=10, c=1, k=5: 1 - C(9,5)/C(10,5) = 1 - 126/252 = 0.5
    assert pass_at_k(10, 1, 5) == pytest.approx(0.5)
    # nothing correct: 0 for every k
    assert pass_at_k(4, 0, 4) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_reported_ks() -> None:
    assert ks_for(1) == [1]
    assert ks_for(3) == [1, 2, 3]
    assert ks_for(8) == [1, 2, 4, 8]


def test_text_tokenizer_round_trips_a_chat_through_chat_format() -> None:
    chat = ChatFormat(TextTokenizer())
    ids = chat.prompt_ids(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    )
    reply = "<answer>4</answer>"
    ids += [ord(c) for c in reply]
    ids += chat.observation_ids("Wrong format.", model_ended_turn=False)
    messages = parse_chatml(chat.tokenizer.decode(ids))
    assert messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Wrong format."},
    ]


def test_openai_spec() -> None:
    assert parse_spec("openai:gpt-4o-mini@https://api.openai.com/v1") == (
        "gpt-4o-mini",
        "https://api.openai.com/v1",
    )
    assert parse_spec("openai:org/m@http://127.0.0.1:8000/") == (
        "org/m",
        "http://127.0.0.1:8000/v1",
    )
    with pytest.raises(ValueError, match="openai:MODEL@BASE_URL"):
        parse_spec("openai:gpt-4o")


def test_evaluate_reports_pass_at_k_and_the_metadata_breakdown() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from agents.agent_loop import Budget
    from agents.engine import GenResult
    from agents.evaluate import evaluate
    from environments.math import MathEnv
    from tasks.task import Task

    calls = {"n": 0}

    def generate(reqs):  # a scripted policy: "4" on odd calls, "5" on even ones
        out = []
        for _ in reqs:
            calls["n"] += 1
            text = f"<answer>{4 if calls['n'] % 2 else 5}</answer>"
            out.append(GenResult([ord(c) for c in text], [0.0] * len(text), "stop", 0))
        return out

    tasks = [
        Task("a", "math", "2+2?", answer=4, metadata={"difficulty": 1, "task_dir": "x" * 50}),
        Task("b", "math", "1+3?", answer=4, metadata={"difficulty": 1}),
        Task("c", "math", "9+9?", answer=18, metadata={"difficulty": 2}),
    ]
    with ThreadPoolExecutor(2) as pool:
        report, trajs = evaluate(
            generate,
            MathEnv,
            ChatFormat(TextTokenizer()),
            tasks,
            Budget(64, 4096),
            pool,
            0,
            batch=2,
            samples=2,
        )
    # calls 1..6 answer 4,5,4,5,4,5: a gets (4,5) -> 1 of 2, b (4,5) -> 1 of 2, c never
    assert [t.task_id for t in trajs] == ["a", "a", "b", "b", "c", "c"]
    assert report["n"] == 6 and report["tasks"] == 3 and report["accuracy"] == pytest.approx(2 / 6)
    # pass@2 per task: a and b 1 - C(1,2)/C(2,2) = 1, c 0 -> mean 2/3
    assert report["pass@2"] == pytest.approx(2 / 3)
    assert report["by_difficulty"] == {"1": 0.5, "2": 0.0}
    assert report["breakdown"]["difficulty"]["1"] == {"tasks": 2, "pass@1": 0.5, "pass@2": 1.0}
    assert "by_task_dir" not in report  # long values (paths, ids) are no groups


def test_model_spec_resolution(tmp_path) -> None:
    import json

    from skyrl_cli.eval_run import resolve_eval_model
    from trainers.checkpoint import write_manifest

    run = tmp_path / "math-1"
    for step in (2, 3, 5):
        ckpt = run / "checkpoints" / f"step-{step:06d}"
        (ckpt / "model").mkdir(parents=True)
        (ckpt / "model" / "model.safetensors").write_bytes(b"w")
        (ckpt / "trainer_state.json").write_text(json.dumps({"step": step, "version": step}))
        write_manifest(ckpt)
    (run / "checkpoints" / ".tmp-step-000004").mkdir()  # an unfinished checkpoint is ignored
    (run / "checkpoints" / "step-000005" / "model" / "model.safetensors").unlink()  # damaged
    (run / "config.yaml").write_text("env: {name: math}\n")
    ref = resolve_eval_model(str(run))  # a run: its latest complete checkpoint
    assert (ref.run_dir, ref.step, ref.path) == (
        run,
        3,
        run / "checkpoints" / "step-000003" / "model",
    )
    ref = resolve_eval_model(str(run / "checkpoints" / "step-000002"))  # a named checkpoint
    assert (ref.run_dir, ref.step) == (run, 2)
    ref = resolve_eval_model("openai:m@http://127.0.0.1:1")
    assert ref.openai == ("m", "http://127.0.0.1:1/v1") and ref.run_dir is None
    with pytest.raises(ValueError, match="unknown model 'nothing-here'"):
        resolve_eval_model("nothing-here")
