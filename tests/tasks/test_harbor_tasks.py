"""The Harbor loader and the bundled shell suite: every shipped solution scores 1 through
ShellEnv, an empty attempt scores 0, splits are fixed and disjoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from environments.shell import ShellEnv
from tasks import harbor
from tasks.harbor import SUITE_DIR, load_harbor_task, load_suite, read_reward
from tests.conftest import skyrl

CATEGORIES = {
    "file-editing",
    "debugging",
    "text-processing",
    "version-control",
    "system-administration",
    "file-operations",
}


def make_task_dir(root: Path, toml: str = "", test: str = "echo 1 >$LOGS_DIR/reward.txt") -> Path:
    root.mkdir(parents=True)
    (root / "instruction.md").write_text("Do the thing.\n")
    (root / "task.toml").write_text(toml or 'version = "1.0"\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n")
    return root


# ---------------------------------------------------------------------------- loader


def test_load_harbor_task_reads_instruction_and_toml(tmp_path):
    folder = make_task_dir(
        tmp_path / "my-task",
        '[metadata]\ndifficulty = "hard"\ncategory = "devops"\ntags = ["a", "b"]\n'
        "[verifier]\ntimeout_sec = 12\n[agent]\ntimeout_sec = 99.5\n",
    )
    task = load_harbor_task(folder)
    assert (task.id, task.env, task.prompt, task.answer, task.split) == (
        "my-task",
        "shell",
        "Do the thing.",
        None,
        None,
    )
    assert task.metadata == {
        "task_dir": str(folder.resolve()),
        "difficulty": "hard",
        "category": "devops",
        "tags": ["a", "b"],
        "verifier_timeout_s": 12.0,
        "agent_timeout_s": 99.5,
        "has_solution": False,
    }
    assert harbor.verifier_timeout(task) == 12.0


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda d: (d / "instruction.md").unlink(), "no instruction.md"),
        (lambda d: (d / "instruction.md").write_text("  \n"), "instruction.md is empty"),
        (lambda d: (d / "tests" / "test.sh").unlink(), "no tests/test.sh"),
        (lambda d: (d / "task.toml").unlink(), "no task.toml"),
        (lambda d: (d / "task.toml").write_text("[verifier\n"), "not valid TOML"),
        (
            lambda d: (d / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n"),
            r"\[verifier\] timeout_sec must be a number in \(0, 86400\], got -1",
        ),
        (lambda d: (d / "task.toml").write_text("metadata = 3\n"), "must be a table"),
        (lambda d: (d / "task.toml").write_text("[metadata]\ntags = 'x'\n"), "list of strings"),
    ],
)
def test_load_harbor_task_names_what_is_wrong(tmp_path, breakage, message):
    folder = make_task_dir(tmp_path / "t")
    breakage(folder)
    with pytest.raises(ValueError, match=message):
        load_harbor_task(folder)
    with pytest.raises(ValueError, match="does not exist"):
        load_harbor_task(tmp_path / "missing")


def test_read_reward_txt_json_and_errors(tmp_path):
    assert read_reward(tmp_path) == (
        None,
        {},
        "the verifier wrote neither reward.json nor reward.txt",
    )
    (tmp_path / "reward.json").write_text(json.dumps({"a": 1, "b": 0}))
    assert read_reward(tmp_path) == (0.5, {"a": 1.0, "b": 0.0}, None)
    (tmp_path / "reward.json").write_text(json.dumps({"a": 1, "reward": 0.25}))
    assert read_reward(tmp_path)[0] == 0.25
    assert read_reward(tmp_path, "a") == (1.0, {"a": 1.0, "reward": 0.25}, None)
    assert "has no 'b'" in read_reward(tmp_path, "b")[2]
    (tmp_path / "reward.txt").write_text(" 0.75\n")  # reward.json wins, as in Harbor 0.26
    assert read_reward(tmp_path)[0] == 0.25
    (tmp_path / "reward.json").write_text('{"a": "yes"}')
    assert read_reward(tmp_path)[2] and read_reward(tmp_path)[0] is None
    (tmp_path / "reward.json").unlink()
    assert read_reward(tmp_path) == (0.75, {"reward": 0.75}, None)
    for bad in ("nan", "one", "", "inf"):
        (tmp_path / "reward.txt").write_text(bad)
        reward, _, error = read_reward(tmp_path)
        assert reward is None and "reward.txt holds" in error, bad
    (tmp_path / "reward.txt").unlink()
    (tmp_path / "reward.txt").symlink_to("/etc/hostname")
    assert read_reward(tmp_path)[2] == "reward.txt is not a regular file"


# ---------------------------------------------------------------------------- bundled suite


def test_suite_has_fixed_disjoint_splits_and_a_mix_of_tasks():
    everything = load_suite(None)
    assert len(everything) >= 10
    splits = {s: load_suite(s) for s in ("train", "dev", "test")}
    assert sum(len(v) for v in splits.values()) == len(everything)
    assert {t.id for t in splits["dev"]} == {"replace-domain", "git-feature-branch"}
    assert {t.id for t in splits["test"]} == {"git-revert-commit", "backup-archive"}
    assert all(t.split == s for s, tasks in splits.items() for t in tasks)
    assert {t.metadata["category"] for t in everything} == CATEGORIES
    tags = {tag for t in everything for tag in t.metadata["tags"]}
    assert {"git", "grep", "sed", "awk", "sort", "uniq", "tar", "chmod"} <= tags
    for task in everything:
        assert task.env == "shell" and task.metadata["has_solution"], task.id
        assert Path(task.metadata["task_dir"]).parent == SUITE_DIR.resolve()
        assert (Path(task.metadata["task_dir"]) / "environment" / "Dockerfile").is_file()
    with pytest.raises(ValueError, match="unknown split"):
        load_suite("validation")


def run_in(env, command):
    """The agent's view: what `command` prints (stderr dropped) and its exit code."""
    obs = env.step(f"<bash>{command} 2>/dev/null</bash>")[0]
    return obs.split("\nTurns left")[0].strip()


@pytest.fixture(scope="module")
def env():
    env = ShellEnv(max_turns=4, timeout_s=20)
    yield env
    env.close()


@pytest.mark.parametrize("task", load_suite(None), ids=lambda t: t.id)
def test_shipped_solution_scores_one_and_empty_attempt_zero(env, task):
    solution = (Path(task.metadata["task_dir"]) / "solution" / "solve.sh").read_text()
    obs, info = env.reset(options={"task": task})
    assert task.prompt in obs and info["task_id"] == task.id
    assert "You are in a bash shell in /app," in obs  # the Dockerfile's WORKDIR
    obs, reward, terminated, _, info = env.step(f"<bash>{solution}</bash>")
    assert obs.startswith("[exit code: 0]"), obs
    assert "tests-copy" not in {p.name for p in env.sandbox.workdir.iterdir()}  # not yet
    assert run_in(env, "ls -d /tests /solution") == "[exit code: 2]"  # never the policy's
    obs, reward, terminated, truncated, info = env.step("Done. <submit/>")
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True), info
    assert info["reward_error"] is None and info["submitted"]

    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step("<submit/>")
    assert (reward, terminated, truncated, info["correct"]) == (0.0, True, False, False), info
    assert info["reward_error"] is None, info  # a real 0 from the tests, not a missing file


def test_skyrl_eval_oracle_on_the_bundled_split(tmp_path):
    """`skyrl eval --env shell --agent oracle`: Harbor's oracle agent, no model."""
    done = skyrl("eval", "--env", "shell", "--agent", "oracle", "--split", "test", cwd=tmp_path)
    assert done.stdout.splitlines() == [
        "backup-archive: reward 1 [reward=1]",
        "git-revert-commit: reward 1 [reward=1]",
        "oracle: mean reward 1.000 over 2 tasks run, 0 not run",
    ]
    bad = skyrl("eval", "--env", "shell", "--agent", "bogus", cwd=tmp_path, check=False)
    assert (bad.returncode, bad.stderr.strip()) == (
        2,
        "error: unknown --agent 'bogus' for --env shell; known: oracle, noop",
    )
