"""`skyrl eval --env`: the real command on the tiny model, a trained run, and an OpenAI server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import skyrl, stand_in_openai


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_eval_math_tiny_greedy_and_pass_at_k(tmp_path: Path) -> None:
    proc = skyrl("eval", "--env", "math", "--model", "tiny", "--split", "dev", "--limit", "4",
                 "--output", "greedy", "--no-tracking", cwd=tmp_path)  # fmt: skip # the command line reads as typed
    assert "pass@1" in proc.stdout and "difficulty=" in proc.stdout  # the table
    report = json.loads((tmp_path / "greedy" / "report.json").read_text())
    assert report["n"] == 4 and report["temperature"] == 0.0 and "by_difficulty" in report
    results = _lines(tmp_path / "greedy" / "results.jsonl")
    assert len(results) == 4 and all(r["turns"] and r["token_ids"] for r in results)

    skyrl("eval", "--env", "math", "--model", "tiny", "--limit", "4", "--n-samples", "3",
          "--output", "k3", "--no-tracking", cwd=tmp_path)  # fmt: skip # the command line reads as typed
    report = json.loads((tmp_path / "k3" / "report.json").read_text())
    assert report["samples"] == 3 and report["tasks"] == 4 and report["n"] == 12
    assert report["temperature"] == 1.0
    assert 0.0 <= report["pass@1"] <= report["pass@2"] <= report["pass@3"] <= 1.0
    assert sorted({r["sample"] for r in _lines(tmp_path / "k3" / "results.jsonl")}) == [0, 1, 2]


def test_eval_of_a_run_files_under_its_eval_dir(tmp_path: Path, ray_address: str) -> None:
    skyrl("train", "--env", "math", "--model", "tiny", "--max-steps", "1", "--set", "eval.limit=0",
          "--set", "rollout.batch_size=2", "--set", "rollout.group_size=2",
          "--ray-address", ray_address, cwd=tmp_path)  # fmt: skip # the command line reads as typed
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "config.yaml").exists()]
    proc = skyrl("eval", "--model", str(run), "--limit", "3", "--output", "out", cwd=tmp_path)
    assert "math / dev" in proc.stdout
    filed = json.loads((run / "eval" / "dev-step-000001.json").read_text())
    assert filed["step"] == 1 and filed["n"] == 3 and filed["env"] == "math"
    assert set(filed) >= {
        "name",
        "split",
        "accuracy",
        "mean_reward",
        "errors",
    }  # before.json's keys
    assert len(_lines(run / "eval" / "dev-step-000001.jsonl")) == 3
    assert (tmp_path / "runs" / ".mlflow" / "mlflow.db").exists()  # next to the training run
    # `skyrl runs` and `skyrl watch` show the filed evaluation
    acc = f"{100 * filed['accuracy']:.1f}%"
    (row,) = [json.loads(ln) for ln in skyrl("runs", "--json", cwd=tmp_path).stdout.splitlines()]
    assert row["last_eval"] == f"dev {acc} @1"
    summary = skyrl("watch", "--once", str(run), cwd=tmp_path).stdout
    assert "dev-step-000001" in summary and f"dev {acc} @1" in summary


def test_eval_against_an_openai_compatible_server(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {
            "id": "a",
            "env": "math",
            "prompt": "What is 40 + 2?",
            "answer": 42,
            "metadata": {"difficulty": 1},
        },
        {
            "id": "b",
            "env": "math",
            "prompt": "What is 3 + 4?",
            "answer": 7,
            "metadata": {"difficulty": 1},
        },
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen: list[dict[str, Any]] = []
    with stand_in_openai(lambda body: "<answer>42</answer> trailing text", seen) as url:
        skyrl("eval", "--env", "math", "--tasks", str(tasks), "--model", f"openai:fake-model@{url}",
              "--output", "out", "--no-tracking", cwd=tmp_path)  # fmt: skip # the command line reads as typed
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["n"] == 2 and report["accuracy"] == 0.5  # 42 is right for a, wrong for b
    first = seen[0]
    assert first["path"] == "/v1/chat/completions" and first["model"] == "fake-model"
    assert first["messages"][-1] == {"role": "user", "content": first["messages"][-1]["content"]}
    assert "What is" in first["messages"][-1]["content"] and first["temperature"] == 0.0
    replies = [r["turns"][1]["text"] for r in _lines(tmp_path / "out" / "results.jsonl")]
    assert replies == ["<answer>42</answer>"] * 2  # cut at the env's stop string


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--env", "nope", "--model", "tiny"], "unknown environment 'nope'"),
        (["--env", "math"], "--model is required"),
        (["--env", "math", "--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--env", "math", "--model", "tiny", "--split", "valid"], "unknown split 'valid'"),
        (["--env", "math", "--model", "openai:gpt"], "openai:MODEL@BASE_URL"),
        # env.kwargs checked as train checks them (MathEnv's **kwargs would swallow `nope`)
        (
            ["--env", "math", "--model", "tiny", "--set", "env.kwargs.nope=1"],
            "env.kwargs.nope is no parameter of environments.math:MathEnv",
        ),
        (
            ["--env", "shell", "--agent", "oracle", "--set", "env.kwargs.nope=1"],
            "env.kwargs.nope is no parameter of environments.shell:ShellEnv",
        ),
        (["--suite", "swe-bench-mini", "--agent", "gold", "--slice", "abc"], "--slice 'abc'"),
        (["--suite", "swe-bench-mini", "--agent", "wizard"], "unknown agent 'wizard'"),
        (["--suite", "swe-bench-mini"], "--agent shell needs --model"),
        (["--suite", "swe-bench-mini", "--agent", "gold", "--instances", "x"], "unknown instance"),
        (["--suite", "nope.jsonl", "--agent", "gold"], "neither a known suite"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path: Path, args: list[str], words: str) -> None:
    proc = skyrl("eval", *args, "--no-tracking", cwd=tmp_path, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error:") and proc.stderr.strip().count("\n") == 0
