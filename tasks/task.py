"""The task record: one JSON object per line in a task file.

A task is what an environment needs to run one episode and grade it. Everything
environment-specific (a database path, a Harbor task folder, a difficulty) lives in
`metadata`, so the record itself stays the same for every environment.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

Message = dict[str, str]


@dataclass(frozen=True)
class Task:
    """One episode's worth of input and the data its grader needs.

    Also a read-only view of the JSON row it was written as, so an environment may read it
    either way: `task.prompt` or `task["prompt"]`, `task.get("metadata")`, `"answer" in task`,
    `dict(task)`. The row's keys are the fields; `answer` and `split` when they are not None
    (a row may leave them out), `metadata` always (empty when the row has none).
    """

    id: str
    """Unique within its suite, stable across rebuilds (used for data position and reports)."""
    env: str
    """Environment name (`sql`, `math`, or a plugin's name)."""
    prompt: str | list[Message]
    """The user's request: a string, or chat messages ({"role", "content"})."""
    answer: Any = None
    """Whatever the grader needs: gold SQL, a number, a list of accepted strings."""
    split: str | None = None
    """`train`, `dev` or `test`; None when the file is not split."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Environment inputs: `database` for SQL, `difficulty`, `task_dir` for the shell..."""

    @staticmethod
    def from_skyrl_row(obj: dict[str, Any], *, where: str = "row") -> Task:
        """A SkyRL dataset row (`prompt`, `env_class`, `reward_spec`, `extra_info`,
        `data_source`) as a Task of env `skyrl_gym:<env_class>`: answer = the reward spec's
        `ground_truth`, the row's parts kept in metadata, split from `extra_info.split`."""
        return _from_skyrl_row(obj, where)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    # ---- the row view (collections.abc.Mapping's methods, written out: no inheritance)

    def keys(self) -> list[str]:
        return [
            f.name for f in fields(self) if f.name in _ALWAYS or getattr(self, f.name) is not None
        ]

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]

    @staticmethod
    def from_dict(obj: dict[str, Any], *, where: str = "task") -> Task:
        """Build a Task from a parsed JSON object; raise ValueError naming what is wrong."""
        if not isinstance(obj, dict):
            raise ValueError(f"{where} is not a JSON object")
        if "env_class" in obj and "env" not in obj:
            return Task.from_skyrl_row(obj, where=where)
        missing = [k for k in ("id", "env", "prompt") if k not in obj]
        if missing:
            raise ValueError(f"{where} is missing the field(s) {', '.join(missing)}")
        unknown = set(obj) - {"id", "env", "prompt", "answer", "split", "metadata"}
        if unknown:
            raise ValueError(
                f"{where} has unknown field(s) {', '.join(sorted(unknown))}; "
                "accepted: id, env, prompt, answer, split, metadata"
            )
        prompt = obj["prompt"]
        if not isinstance(prompt, str | list):
            raise ValueError(f"{where}: prompt must be a string or a list of chat messages")
        return Task(
            id=str(obj["id"]),
            env=str(obj["env"]),
            prompt=prompt,
            answer=obj.get("answer"),
            split=obj.get("split"),
            metadata=dict(obj.get("metadata") or {}),
        )


_ALWAYS = ("id", "env", "prompt", "metadata")
"""Keys of a task's row view whatever their value; `answer` and `split` only when set."""

SKYRL_ROW_FIELDS = {"data_source", "prompt", "env_class", "reward_spec", "extra_info"}
"""A SkyRL dataset row (SkyRL's examples write them to Parquet)."""


def _from_skyrl_row(obj: dict[str, Any], where: str) -> Task:
    unknown = set(obj) - SKYRL_ROW_FIELDS
    if unknown:
        raise ValueError(
            f"{where} (a SkyRL row) has unknown field(s) {', '.join(sorted(unknown))}; "
            f"accepted: {', '.join(sorted(SKYRL_ROW_FIELDS))}"
        )
    prompt = obj.get("prompt")
    if not isinstance(prompt, str | list) or not prompt:
        raise ValueError(f"{where}: prompt must be a string or a list of chat messages")
    spec = obj.get("reward_spec") or {}
    extra = obj.get("extra_info") or {}
    if not isinstance(spec, dict) or not isinstance(extra, dict):
        raise ValueError(f"{where}: reward_spec and extra_info must be objects")
    key = json.dumps([prompt, spec], sort_keys=True, default=str)
    index = extra.get("index")
    source = str(obj.get("data_source") or obj["env_class"])
    split = extra.get("split")
    return Task(
        id=f"{source}-{index}"
        if index is not None
        else hashlib.sha1(key.encode()).hexdigest()[:12],
        env=f"skyrl_gym:{obj['env_class']}",
        prompt=prompt,
        answer=spec.get("ground_truth"),
        split=split if split in ("train", "dev", "test") else None,
        metadata={"reward_spec": spec, "extra_info": extra, "data_source": source},
    )


def load_tasks(path: str | Path) -> list[Task]:
    """Read a JSONL (or .json list, or Parquet) task file, or a Spider/BIRD-format folder
    (`tasks.sql.folders`); ValueError names the bad line."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"task file {path} does not exist")
    if path.is_dir():  # a Spider- or BIRD-format download
        from tasks.sql.folders import load_folder

        return load_folder(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # optional: only when a user hands us Parquet

        rows = pq.read_table(path).to_pylist()
        return [Task.from_dict(r, where=f"{path} row {i + 1}") for i, r in enumerate(rows)]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        rows = json.loads(text)
        return [Task.from_dict(r, where=f"{path} item {i + 1}") for i, r in enumerate(rows)]
    tasks = []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} line {i + 1} is not valid JSON ({e.msg})") from None
        tasks.append(Task.from_dict(obj, where=f"{path} line {i + 1}"))
    if not tasks:
        raise ValueError(f"task file {path} holds no tasks")
    return tasks


def select_split(
    tasks: list[Task], split: str, *, holdout: float = 0.0, eval_split: str = "dev"
) -> list[Task]:
    """The tasks of `split` from a task file's tasks.

    A file whose tasks carry `split` is filtered by it. A file without any `split` is one
    pool: every split is all of it, unless `holdout` > 0 sets aside that fraction (at least
    one task, never all) as `eval_split`, and every other split is the rest. Which tasks are
    held out depends only on their ids (a stable hash), not on the file's order or the seed,
    so runs with different seeds, and `skyrl eval` on any of them, score the same tasks.
    """
    if any(t.split for t in tasks):
        if holdout:
            raise ValueError(
                "eval.holdout splits a task file without `split`, but this file has splits; "
                "remove eval.holdout or the tasks' split fields"
            )
        return [t for t in tasks if t.split == split]
    if not holdout:
        return list(tasks)
    n_held = min(len(tasks) - 1, max(1, math.ceil(holdout * len(tasks))))
    rank = sorted(
        range(len(tasks)),
        key=lambda i: (hashlib.blake2b(tasks[i].id.encode(), digest_size=8).digest(), i),
    )
    held = set(rank[:n_held])
    return [t for i, t in enumerate(tasks) if (i in held) == (split == eval_split)]


def write_tasks(path: str | Path, tasks: list[Task]) -> None:
    Path(path).write_text("".join(t.to_json() + "\n" for t in tasks), encoding="utf-8")
