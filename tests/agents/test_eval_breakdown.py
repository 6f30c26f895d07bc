"""Issue 13, item 14: evaluation breaks accuracy down only by the metadata keys an
environment declares (`report_by`), not by every short metadata value a task carries."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from agents.agent_loop import Budget
from agents.chat import ChatFormat
from agents.engine import GenResult
from agents.evaluate import evaluate
from environments.math import MathEnv
from tasks.task import Task
from tests.agents.test_eval_metrics import TextTokenizer


def _answer_4(reqs):
    text = "<answer>4</answer>"
    return [GenResult([ord(c) for c in text], [0.0] * len(text), "stop", 0) for _ in reqs]


class WordsEnv(MathEnv):
    """A user's environment: its tasks carry a `word` each and a `level`; it declares none."""

    report_by = ()


class LevelsEnv(MathEnv):
    report_by = ("level",)


TASKS = [
    Task(
        f"t{i}",
        "words",
        "2+2?",
        answer=4 if i % 2 else 5,
        metadata={"word": f"w{i}", "level": i % 3},
    )
    for i in range(12)
]


def _report(env_cls: type) -> dict:
    with ThreadPoolExecutor(2) as pool:
        report, _ = evaluate(
            _answer_4, env_cls, ChatFormat(TextTokenizer()), TASKS, Budget(64, 4096), pool, 0
        )
    return report


def test_undeclared_metadata_is_no_breakdown() -> None:
    report = _report(WordsEnv)
    assert report["accuracy"] == 0.5
    assert "breakdown" not in report and not any(k.startswith("by_") for k in report)


def test_only_declared_keys_are_broken_down() -> None:
    report = _report(LevelsEnv)
    assert set(report["breakdown"]) == {"level"}
    assert report["by_level"] == {"0": 0.5, "1": 0.5, "2": 0.5}
    assert "by_word" not in report


def test_every_builtin_declares_what_it_is_broken_down_by() -> None:
    from environments import registry

    for name, spec in registry.BUILTINS.items():
        keys = getattr(registry.load_class(spec.entry), "report_by", None)
        assert isinstance(keys, tuple), f"{name} declares no report_by"
