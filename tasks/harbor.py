"""Harbor-format terminal tasks: the loader and the bundled suite of `skyrl/Shell-v0`.

A Harbor task (laude-institute/harbor, the Terminal-Bench format) is one folder:

    instruction.md      what the agent is asked to do (the prompt)
    task.toml           version; [metadata] difficulty, category, tags; [verifier] timeout_sec;
                        [agent] timeout_sec; [environment] build settings
    environment/        how the starting state is built (Harbor: a Docker build context)
    tests/test.sh       the verifier; writes the reward file
    solution/solve.sh   a reference solution (the "oracle"), never shown to the agent

How skyrl runs it (`environments/harbor.py`, docs/environments.md): the Dockerfile is
honoured as far as the machine allows (FROM = the host's system; WORKDIR, ENV, COPY/ADD
from `environment/`, RUN once at build time, cached; ENTRYPOINT before each command) in a
bubblewrap sandbox at Harbor's paths: the WORKDIR (default /app), /logs/agent, and, only
for the verifier, /tests and /logs/verifier.

The verifier contract, as Harbor's: after the agent, `tests/` is put at /tests and
`/tests/test.sh` runs in the WORKDIR with `[verifier].env` and `[verifier] timeout_sec`;
it writes `/logs/verifier/reward.json` (named numbers) or `/logs/verifier/reward.txt` (one
number), and reward.json wins when both exist. Our bundled tasks use those paths as Harbor's
own tasks do (skyrl also sets `LOGS_DIR` and `TESTS_DIR` to them, for older verifiers).

A task folder is data (docs/security.md): a symlink anywhere in it that resolves outside it
is refused at load; a `[verifier].env` / `[solution].env` value never reads the trainer's
environment (Harbor's `${NAME:-default}` reads as its default, a bare `${NAME}` is refused:
Harbor fills it from the host, for secrets); every number in task.toml is finite and the
ones Harbor defines are within `BOUNDS`.

`load_suite(split)` returns the tasks bundled in `tasks/shell/`; each belongs to one fixed
split (`SPLITS`), so held-out tasks are never trained on.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.task import Task

__all__ = [
    "SPLITS",
    "SUITE_DIR",
    "agent_timeout",
    "check_folder",
    "check_links",
    "load_harbor_task",
    "load_suite",
    "read_reward",
    "solution_env",
    "verifier_env",
    "verifier_timeout",
]

SUITE_DIR = Path(__file__).parent / "shell"
"""The bundled Harbor task folders."""
SPLITS: dict[str, str] = {
    "replace-domain": "dev",
    "git-feature-branch": "dev",
    "git-revert-commit": "test",
    "backup-archive": "test",
}
"""Task folder name -> split for the held-out tasks; every other bundled task is `train`."""
SPLIT_NAMES = ("train", "dev", "test")
DEFAULT_VERIFIER_TIMEOUT_S = 60.0
"""Verifier time limit of a task whose task.toml names none."""
MAX_INSTRUCTION_CHARS = 100_000
MAX_REWARD_FILE_BYTES = 65_536
DAY_S = 86_400.0
BOUNDS: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("verifier", "timeout_sec"): (0.0, DAY_S, False),
    ("agent", "timeout_sec"): (0.0, DAY_S, False),
    ("environment", "build_timeout_sec"): (0.0, DAY_S, False),
    ("environment", "cpus"): (0.0, 1024.0, False),
    ("environment", "memory_mb"): (0.0, float(1 << 24), False),
    ("environment", "storage_mb"): (0.0, float(1 << 24), False),
    ("environment", "gpus"): (0.0, 64.0, True),
}
"""(table, key) -> (low, high, low allowed) of the numbers Harbor's task.toml defines: time
limits over 0 s up to a day, cpus up to 1024, memory and storage up to 16 TiB in MB, gpus
0-64. Any other number in task.toml must be finite."""
STEP_STRATEGIES = ("mean", "final")
"""Harbor's multi_step_reward_strategy: the mean of each key over the steps that were graded
(a key a step lacks counts 0), or the last graded step's rewards."""
_STEP_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,99}")
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}", re.DOTALL)
"""Harbor's `${NAME}` / `${NAME:-default}`: a whole value, else the value is a literal."""


def _table(config: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise ValueError(f"{where}: [{name}] must be a table")
    return value


def _numbers(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str, int | float]]:
    """(table, key, number) of every number in a task.toml value, tables and arrays opened."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield ".".join(path[:-1]), path[-1] if path else "", value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _numbers(item, (*path, str(name)))
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item, path)


def _check_numbers(config: dict[str, Any], where: Path) -> None:
    """Every number finite; Harbor's own (`BOUNDS`) within their range; else one sentence."""
    for table, key, number in _numbers(config):
        low, high, low_ok = BOUNDS.get((table, key), (-math.inf, math.inf, True))
        inside = (low <= number if low_ok else low < number) and number <= high
        if inside and (not isinstance(number, float) or math.isfinite(number)):
            continue
        shown = f"{number:.3g}" if isinstance(number, float) else f"{str(number)[:20]}"
        accepted = (
            f"a number in {'[' if low_ok else '('}{low:.10g}, {high:.10g}]"
            if (table, key) in BOUNDS
            else "a finite number"
        )
        name = f"[{table}] {key}" if table else key
        raise ValueError(f"{where}: {name} must be {accepted}, got {shown}")


def check_links(task_dir: Path) -> None:
    """ValueError (one sentence) for a symlink anywhere in the folder that resolves outside it:
    a host file would become the prompt, the build context, the tests or the solution."""
    task_dir = Path(task_dir).resolve()
    for folder, dirs, files in os.walk(task_dir):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink():
                continue
            try:
                inside = path.resolve().is_relative_to(task_dir)
            except (OSError, RuntimeError):  # a loop
                inside = False
            if not inside:
                rel = path.relative_to(task_dir)
                raise ValueError(
                    f"Harbor task {task_dir}: {rel} is a symlink to {os.readlink(path)}, "
                    "outside the task folder (a task's files must be its own)"
                )


def load_harbor_task(task_dir: Path, *, split: str | None = None) -> Task:
    """Read one Harbor task folder into a Task; ValueError names the folder and what is wrong.

    The Task: id = the folder name, env = "shell", prompt = instruction.md, answer = None
    (the grader is tests/test.sh), metadata = task_dir (absolute), difficulty, category,
    tags, verifier_timeout_s, agent_timeout_s (None when unset) and has_solution.
    """
    task_dir = Path(task_dir).expanduser().resolve()
    if not task_dir.is_dir():
        raise ValueError(f"Harbor task folder {task_dir} does not exist")
    check_links(task_dir)
    toml_path = task_dir / "task.toml"
    steps = _multi_step(toml_path)
    if steps:
        instruction = steps[0]["instruction"]
    else:
        instruction = _instruction(task_dir, task_dir / "instruction.md")
        if not (task_dir / "tests" / "test.sh").is_file():
            raise ValueError(f"Harbor task {task_dir} has no tests/test.sh (its verifier)")
    if not toml_path.is_file():
        raise ValueError(f"Harbor task {task_dir} has no task.toml")
    meta, tags, verifier, agent, envs = _settings(toml_path)
    if split is not None and split not in SPLIT_NAMES:
        raise ValueError(f"unknown split {split!r}; accepted: {', '.join(SPLIT_NAMES)}")
    return Task(
        id=task_dir.name,
        env="shell",
        prompt=instruction,
        answer=None,
        split=split,
        metadata={
            "task_dir": str(task_dir),
            "difficulty": str(meta.get("difficulty", "unknown")),
            "category": str(meta.get("category", "")),
            "tags": list(tags),
            "verifier_timeout_s": float(verifier or DEFAULT_VERIFIER_TIMEOUT_S),
            "agent_timeout_s": None if agent is None else float(agent),
            "has_solution": (task_dir / "solution" / "solve.sh").is_file()
            or bool(
                steps and all((task_dir / s["dir"] / "solution/solve.sh").is_file() for s in steps)
            ),
            **{f"{name}_env": env for name, env in envs.items() if env},
            **({"steps": steps, "step_reward_strategy": _strategy(toml_path)} if steps else {}),
        },
    )


def _instruction(task_dir: Path, path: Path) -> str:
    """The text of an instruction.md, checked (present, not empty, not huge)."""
    rel = path.relative_to(task_dir).as_posix()
    if not path.is_file():
        raise ValueError(f"Harbor task {task_dir} has no {rel}")
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        raise ValueError(f"Harbor task {task_dir}: {rel} is empty")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise ValueError(
            f"Harbor task {task_dir}: {rel} is over {MAX_INSTRUCTION_CHARS} characters"
        )
    return text


def _multi_step(toml_path: Path) -> list[dict[str, Any]]:
    """The steps of Harbor's multi-step format (`[[steps]]` in task.toml, each with
    `steps/<name>/instruction.md`), checked and made plain data; [] for a one-step task (or a
    missing or broken task.toml, which the checks that follow report)."""
    try:
        config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    raw = config.get("steps")
    if raw is None or raw == []:
        return []
    task_dir = toml_path.parent
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        raise ValueError(f"{toml_path}: steps must be an array of tables ([[steps]])")
    _check_numbers(config, toml_path)
    verifier_env = _env_table(_table(config, "verifier", toml_path), f"{toml_path}: [verifier.env]")
    steps, seen = [], set()
    for i, table in enumerate(raw):
        name = table.get("name")
        if not isinstance(name, str) or not _STEP_NAME.fullmatch(name) or name in seen:
            raise ValueError(
                f"{toml_path}: step {i + 1} needs a name of its own (letters, digits, . _ -), "
                f"got {str(name)[:40]!r}"
            )
        seen.add(name)
        folder = task_dir / "steps" / name
        if (
            not (folder / "tests" / "test.sh").is_file()
            and not (task_dir / "tests/test.sh").is_file()
        ):
            raise ValueError(
                f"Harbor task {task_dir}: step {name} has no tests/test.sh (its verifier)"
            )
        where = f"{toml_path}: step {name}"
        verifier = _table(table, "verifier", toml_path)
        steps.append(
            {
                "name": name,
                "dir": f"steps/{name}",
                "instruction": _instruction(task_dir, folder / "instruction.md"),
                "verifier_timeout_s": _step_limit(verifier.get("timeout_sec"), f"{where} verifier"),
                "agent_timeout_s": _step_limit(
                    _table(table, "agent", toml_path).get("timeout_sec"), f"{where} agent"
                ),
                "verifier_env": {**verifier_env, **_env_table(verifier, f"{where} [verifier.env]")},
                "min_reward": _min_reward(table.get("min_reward"), where),
                "healthcheck": _healthcheck(table.get("healthcheck"), where),
            }
        )
    return steps


def _step_limit(value: Any, where: str) -> float | None:
    low, high = 0.0, DAY_S
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low < value <= high:
        raise ValueError(
            f"{where} timeout_sec must be a number in (0, {high:.10g}], got {value!r:.20}"
        )
    return float(value)


def _min_reward(value: Any, where: str) -> float | dict[str, float] | None:
    """Harbor's min_reward: a number (gates the `reward` key) or a table of key -> number."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    ):
        return {str(k): float(v) for k, v in value.items()}
    raise ValueError(f"{where}: min_reward must be a number or a table of numbers")


def _healthcheck(value: Any, where: str) -> dict[str, Any] | None:
    """A step's healthcheck (`command`, `interval_sec`, `timeout_sec`, `retries`), or None."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("command"), str):
        raise ValueError(f"{where}: healthcheck must be a table with a command")
    out: dict[str, Any] = {"command": value["command"]}
    for key, default, high in (("interval_sec", 5.0, 3600.0), ("timeout_sec", 30.0, 3600.0),
                               ("retries", 3, 100)):  # fmt: skip
        number = value.get(key, default)
        if (
            isinstance(number, bool)
            or not isinstance(number, int | float)
            or not 0 <= number <= high
        ):
            raise ValueError(f"{where}: healthcheck {key} must be a number in [0, {high:g}]")
        out[key] = number
    return out


def _strategy(toml_path: Path) -> str:
    """Harbor's multi_step_reward_strategy: `mean` (the default) or `final`."""
    config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    value = config.get("multi_step_reward_strategy") or "mean"
    if value not in STEP_STRATEGIES:
        raise ValueError(
            f"{toml_path}: multi_step_reward_strategy must be one of {', '.join(STEP_STRATEGIES)}"
        )
    return str(value)


Settings = tuple[dict[str, Any], list[str], float | None, float | None, dict[str, dict[str, str]]]


def _settings(toml_path: Path) -> Settings:
    """(metadata, tags, verifier and agent timeout_sec, the verifier's and the solution's env)
    of a task.toml, every number and env value checked; ValueError names what is wrong."""
    try:
        config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except ValueError as e:  # TOMLDecodeError, UnicodeDecodeError, an int over 4300 digits
        raise ValueError(f"{toml_path} is not valid TOML ({e})") from None
    _check_numbers(config, toml_path)
    meta = _table(config, "metadata", toml_path)
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"{toml_path}: [metadata] tags must be a list of strings")
    verifier_table = _table(config, "verifier", toml_path)
    verifier = verifier_table.get("timeout_sec")
    agent = _table(config, "agent", toml_path).get("timeout_sec")
    envs = {
        name: _env_table(table, f"{toml_path}: [{name}.env]")
        for name, table in (
            ("verifier", verifier_table),
            ("solution", _table(config, "solution", toml_path)),
        )
    }
    return meta, tags, verifier, agent, envs


def check_folder(task_dir: Path) -> None:
    """The checks `load_harbor_task` makes of a folder's own files, for a task row that names
    the folder without loading it: its symlinks, and its task.toml when it has one."""
    task_dir = Path(task_dir).resolve()
    check_links(task_dir)
    if (task_dir / "task.toml").is_file():
        _settings(task_dir / "task.toml")


def _env_table(table: dict[str, Any], where: str) -> dict[str, str]:
    """A task.toml `env` table as the command will get it: never read from the trainer's
    environment. Harbor fills a whole-value `${NAME}` from its host (for secrets such as an
    LLM judge's API key) and `${NAME:-default}` with the default where NAME is unset: here
    the default is used, and a `${NAME}` without one is refused; any other text is literal."""
    value = table.get("env", {})
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{where} must be a table of names to strings")
    env = {}
    for key, raw in value.items():
        text = str(raw)
        template = _TEMPLATE.fullmatch(text)
        if template is not None and template.group(2) is None:
            raise ValueError(
                f"{where} {key} = {text[:80]!r} asks for the host's environment variable "
                f"{template.group(1)[:80]}, and skyrl gives a task none of the trainer's "
                "environment (write the value, or `${NAME:-value}`)"
            )
        env[key] = template.group(2) if template is not None else text
    return env


def _task_env(task: Task, key: str) -> dict[str, str]:
    """A task's `env` table, as strings (load_harbor_task resolved Harbor's templates)."""
    value = task.metadata.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"task {task.id!r}: metadata.{key} must be a table of names to strings")
    return {str(k): str(v) for k, v in value.items()}


def verifier_env(task: Task) -> dict[str, str]:
    """The `[verifier].env` of the task (Harbor passes it to tests/test.sh)."""
    return _task_env(task, "verifier_env")


def solution_env(task: Task) -> dict[str, str]:
    """The `[solution].env` of the task (Harbor passes it to solution/solve.sh)."""
    return _task_env(task, "solution_env")


def _time_limit(task: Task, key: str, table: str, default: float | None) -> float | None:
    value = task.metadata.get(key)
    if value is None:
        return default
    low, high, _ = BOUNDS[(table, "timeout_sec")]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (low < value <= high)  # nan fails this too
    ):
        raise ValueError(
            f"task {task.id!r}: metadata.{key} must be a number in ({low:.10g}, {high:.10g}] "
            f"seconds, got {str(value)[:20]}"
        )
    return float(value)


def verifier_timeout(task: Task) -> float:
    """The task's verifier time limit in seconds (`[verifier] timeout_sec`); ValueError when
    the metadata holds one outside (0, a day]."""
    limit = _time_limit(task, "verifier_timeout_s", "verifier", DEFAULT_VERIFIER_TIMEOUT_S)
    assert limit is not None
    return limit


def agent_timeout(task: Task) -> float | None:
    """The task's agent time limit in seconds (`[agent] timeout_sec`, the oracle's), or None."""
    return _time_limit(task, "agent_timeout_s", "agent", None)


@functools.lru_cache(maxsize=1)
def _suite() -> tuple[Task, ...]:
    folders = sorted(p for p in SUITE_DIR.iterdir() if (p / "instruction.md").is_file())
    return tuple(load_harbor_task(p, split=SPLITS.get(p.name, "train")) for p in folders)


def load_suite(split: str | None = None) -> list[Task]:
    """The bundled shell tasks of one split (`train`, `dev`, `test`), or all for None."""
    if split is not None and split not in SPLIT_NAMES:
        raise ValueError(
            f"unknown split {split!r}; accepted: {', '.join(SPLIT_NAMES)} (or None for all)"
        )
    return [t for t in _suite() if split is None or t.split == split]


def read_reward(
    logs_dir: Path, reward_key: str | None = None
) -> tuple[float | None, dict[str, float], str | None]:
    """(reward, named rewards, error) from Harbor's `reward.json` or `reward.txt` in logs_dir.

    As Harbor: `reward.json` wins when both exist. reward.txt holds one number; reward.json
    an object of named numbers or one number. All of them are kept (named rewards); the
    reward is the one named `reward_key`, else `reward`, else their mean. A missing,
    oversized, non-regular or unparsable file gives (None, {}, the reason)."""
    for name in ("reward.json", "reward.txt"):
        path = logs_dir / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file():
            return None, {}, f"{name} is not a regular file"
        if path.stat().st_size > MAX_REWARD_FILE_BYTES:
            return None, {}, f"{name} is larger than {MAX_REWARD_FILE_BYTES} bytes"
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        try:
            value = json.loads(text) if name == "reward.json" else float(text)
        except ValueError:
            return (
                None,
                {},
                f"{name} holds {text[:80]!r}, not {'JSON' if '.json' in name else 'a number'}",
            )
        named = value if isinstance(value, dict) else {"reward": value}
        if not named or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in named.values()
        ):
            return None, {}, f"{name} holds {text[:80]!r}, not finite named numbers"
        named = {str(k): float(v) for k, v in named.items()}
        if reward_key is not None:
            if reward_key not in named:
                return None, named, f"{name} has no {reward_key!r} (env.kwargs.reward_key)"
            return named[reward_key], named, None
        reward = named.get("reward", sum(named.values()) / len(named))
        return reward, named, None
    return None, {}, "the verifier wrote neither reward.json nor reward.txt"
