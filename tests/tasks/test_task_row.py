"""A user's environment gets its task the way the user wrote it in tasks.jsonl: the `Task`
handed to `reset` also reads like that JSON row (`task["prompt"]`, `task.get("metadata")`,
`"answer" in task`), and attribute access keeps working."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from environments import registry
from tasks.task import Task, load_tasks
from tests.conftest import skyrl, stand_in_openai

ROW_ENV = '''
import gymnasium as gym
from environments.spaces import TextSpace


class RowEnv(gym.Env):
    """Reads its task as the JSON row the user wrote in tasks.jsonl."""

    def __init__(self, max_turns=1):
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(10_000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = options["task"]
        self.gold = str(task["answer"]) if "answer" in task else None
        unit = (task.get("metadata") or {}).get("unit", "no unit")
        return f"{task['prompt']} ({unit})", {}

    def step(self, action):
        correct = self.gold is not None and self.gold in action
        return "", float(correct), True, False, {"correct": correct}
'''

ROWS = [
    {"id": "a", "env": "row", "prompt": "Say 42.", "answer": 42, "metadata": {"unit": "m"}},
    {"id": "b", "env": "row", "prompt": "Say 7.", "answer": 7},
    {"id": "c", "env": "row", "prompt": "Say nothing."},
]


def _project(tmp_path: Path) -> Path:
    (tmp_path / "row_env.py").write_text(ROW_ENV)
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "skyrl.yaml").write_text(
        "env:\n  name: row\n  tasks: tasks.jsonl\nenvironments:\n  row: row_env.py:RowEnv\n"
    )
    return tmp_path


def test_a_plugin_indexes_the_task_like_its_row(tmp_path: Path) -> None:
    """The registry builds the project's env; each task of the file resets it."""
    project = _project(tmp_path)
    spec = registry.resolve("row", {"row": "row_env.py:RowEnv"})
    env = registry.make_env(spec, project, max_turns=1)
    observations = [
        env.reset(options={"task": task})[0] for task in load_tasks(project / "tasks.jsonl")
    ]
    assert observations == ["Say 42. (m)", "Say 7. (no unit)", "Say nothing. (no unit)"]
    assert env.step("42")[1] == 0.0  # task c has no answer: `"answer" in task` was False


def test_a_plugin_indexes_the_task_like_its_row_through_skyrl_eval(tmp_path: Path) -> None:
    """The real `skyrl eval` in the project folder, against a loopback model that says 42."""
    project = _project(tmp_path)
    seen: list[dict[str, Any]] = []
    with stand_in_openai(lambda body: "42", seen) as url:
        skyrl("eval", "--env", "row", "--tasks", "tasks.jsonl", "--model", f"openai:m@{url}",
              "--output", "out", "--no-tracking", cwd=project)  # fmt: skip
    report = json.loads((project / "out" / "report.json").read_text())
    assert report["n"] == 3 and report["accuracy"] == pytest.approx(1 / 3), report  # only a
    asked = sorted(body["messages"][-1]["content"] for body in seen)
    assert asked == ["Say 42. (m)", "Say 7. (no unit)", "Say nothing. (no unit)"]


def test_the_view_is_the_row_and_attributes_still_work() -> None:
    row = {"id": "q1", "env": "sql", "prompt": "How many?", "answer": "SELECT 1",
           "split": "dev", "metadata": {"database": "bookshop"}}  # fmt: skip
    task = Task.from_dict(row)
    assert dict(task) == row and len(task) == 6 and list(task) == list(row)
    assert task["prompt"] == task.prompt == "How many?"
    assert task["metadata"]["database"] == task.metadata["database"] == "bookshop"
    assert task.get("answer") == "SELECT 1" and task.get("nope", 3) == 3
    assert "answer" in task and "nope" not in task
    assert dict(task.items()) == row and list(task.keys()) == list(row)
    assert list(task.values()) == list(row.values())
    with pytest.raises(KeyError):
        task["nope"]
    with pytest.raises(TypeError):
        task["prompt"] = "changed"  # type: ignore[index]
    assert json.loads(task.to_json()) == row  # the file format is unchanged
    assert task == Task.from_dict(row)  # equality is still the dataclass's


def test_fields_a_row_leaves_out_are_absent() -> None:
    """`answer` and `split` a row does not write are not keys (`get` gives None, as on the
    row); `metadata` is always there, empty when the row has none."""
    task = Task.from_dict({"id": "q2", "env": "math", "prompt": "2+2?"})
    assert dict(task) == {"id": "q2", "env": "math", "prompt": "2+2?", "metadata": {}}
    assert "answer" not in task and "split" not in task and task.get("answer") is None
    with pytest.raises(KeyError):
        task["answer"]
    assert task.answer is None and task.split is None  # attributes as before
