"""Numbers pinned before issue 32's "one home" refactor (engine table, learner spec, shared
session, registry rows, evaluation out of the CLI): each case runs the real `skyrl`
command and compares what it wrote with one_home_pin.json, recorded from the code before
the move (233f7cf). The sync schedule's metrics are pinned in test_refactor_pin.py; the
LoRA adapter tensors of a serve session in tests/serve/test_lora_pin.py.

`SKYRL_PIN_RECORD=1 pytest tests/trainers/test_one_home_pin.py` rewrites the file; a change
that moves a value on purpose says in its commit message which fix moved which value.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import skyrl

PIN_FILE = Path(__file__).parent / "one_home_pin.json"
RECORD = os.environ.get("SKYRL_PIN_RECORD") == "1"
PINNED: dict[str, Any] = json.loads(PIN_FILE.read_text()) if PIN_FILE.exists() else {}
TIMING = ("perf/", "time", "wall_s", "per_s", "tok/s", "ep/s", "_s")


def _untimed(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not any(t in k for t in TIMING)}


def _check(key: str, got: Any) -> None:
    if RECORD:
        data = json.loads(PIN_FILE.read_text()) if PIN_FILE.exists() else {}
        data[key] = got
        PIN_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return
    assert key in PINNED, f"{key} is not pinned; record it with SKYRL_PIN_RECORD=1"
    _close(got, PINNED[key], key)


def _close(got: Any, want: Any, where: str) -> None:
    """Equal, floats to 1e-6, walking dicts and lists; `where` names the first difference."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (
            where,
            sorted(set(got) ^ set(want)),
        )
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), (where, got, want)
    else:
        assert got == want, (where, got, want)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_async_run_and_its_eval_report_are_pinned(tmp_path, ray_address):
    """The async schedule at max_staleness=0 (REINFORCE++ with overlong shaping, so the
    groups differ and every step updates), then `skyrl eval` of its last checkpoint."""
    skyrl(
        *("train", "--env", "math", "--model", "tiny", "--max-steps", "3", "--seed", "0"),
        *("--run-name", "pin", "--set", "trainer.schedule=async", "--set", "async.max_staleness=0"),
        *("--set", "algorithm.name=reinforce_pp", "--set", "algorithm.overlong_buffer=16"),
        *("--set", "rollout.batch_size=2", "--set", "eval.limit=0"),
        *("--set", "tracking.enabled=false", "--ray-address", ray_address),
        *("--set", "trainer.threads=1"),  # one torch thread a process, as test_refactor_pin's
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob("pin-*")
    _check("async_reinforce_pp", [_untimed(m) for m in _lines(run / "metrics.jsonl")])

    out = tmp_path / "ev"
    skyrl("eval", "--model", str(run), "--limit", "6", "--output", str(out), cwd=tmp_path)
    report = _untimed(json.loads((out / "report.json").read_text()))
    report.pop("model")
    _check("eval_report", report)
    results = [
        {k: r[k] for k in ("task_id", "token_ids", "reward", "turns") if k in r}
        for r in _lines(out / "results.jsonl")
    ]
    _check("eval_results", results)


def test_swe_mini_gold_report_is_pinned(tmp_path):
    out = tmp_path / "swe"
    skyrl(
        "eval", "--suite", "swe-bench-mini", "--agent", "gold", "--output", str(out), cwd=tmp_path
    )
    _check("swe_mini_gold_report", _untimed(json.loads((out / "report.json").read_text())))
    _check("swe_mini_gold_predictions", _lines(out / "predictions.jsonl"))


def test_build_config_of_every_builtin_env_is_pinned():
    from environments import registry
    from trainers.config import build_config

    got = {
        name: build_config([], name).model_dump(mode="json", by_alias=True)
        for name in sorted(registry.BUILTINS)
    }
    _check("build_config", got)


def test_skyrl_envs_output_is_pinned(tmp_path):
    text = skyrl("envs", "--json", cwd=tmp_path).stdout
    _check("envs_json", [json.loads(ln) for ln in text.splitlines() if ln.strip()])
