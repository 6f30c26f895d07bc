"""`skyrl/SWE-v0`: resolve a SWE-bench-format instance with bash in its checked-out repository.

The task is one instance (`instance_task(instance)` wraps the official columns into a Task;
the instance dict sits in `task.metadata["instance"]`). `reset` checks the repository out at
`base_commit` (from `repos_dir/<owner>__<name>`, through the harness) and opens a persistent
sandboxed bash in it (`environments.bash`, the shell of `skyrl/Shell-v0`).

Action grammar, as in the shell environment:

    <bash>command</bash>   run it in the repository; the observation is its output and exit code
    <submit/>              end the episode: the patch is the `git diff` of everything changed

The episode owns its checkout, `.git` included: the diff is taken on the host from a copy of
its files alone (`tasks.swe.build.diff_tree`), never by running git on that `.git`, whose
config, hooks and attributes the agent may have written.

Reward: the harness (`environments.swe_harness.grade`) grades the patch on a fresh checkout
as the official SWE-bench harness does: 1.0 when resolved (every FAIL_TO_PASS test passes,
every PASS_TO_PASS test still does), else 0.0. Running out of turns grades the work as it
stands (truncated, minus `format_penalty`). The final info carries `model_patch`,
`resolved`, `empty_patch`, `patch_applied`, `grade_error` and the test output.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym

from environments import text_env
from environments.bash import GRAMMAR, TAGS, Bash, intro, open_sandbox, parse_action
from environments.sandbox import Limits, Sandbox
from environments.swe_harness import _checkout as checkout
from environments.swe_harness import grade
from tasks.swe.build import diff_tree
from tasks.swe.checks import check_instance
from tasks.task import Task

__all__ = ["SWEEnv", "instance_task", "load_suite"]

MAX_OBSERVATION_CHARS = 1_000_000
TEST_OUTPUT_CHARS = 20_000
"""Tail of the test output kept in the final info."""
INSTRUCTIONS = """\
<issue>
{problem}
</issue>

The repository {repo} is checked out in the current directory at the commit where this issue
was reported. Change the source code so that the issue is resolved. Run one shell command per
turn as <bash>command</bash> (read files with cat or grep, edit them with sed, python or a
here-document, run the tests with python -m pytest). When you are done, reply <submit/>: your
changes (their git diff) are then checked by the repository's tests, including hidden ones."""


def instance_task(instance: dict[str, Any], split: str | None = None) -> Task:
    """A SWE-bench instance (official columns, test lists decoded) as a Task for this env."""
    return Task(
        id=str(instance["instance_id"]),
        env="swe",
        prompt=str(instance["problem_statement"]),
        answer=None,
        split=split,
        metadata={"repo": str(instance["repo"]), "instance": instance},
    )


@functools.lru_cache(maxsize=1)
def _mini_suite() -> tuple[Task, ...]:
    from tasks.swe import load_instances

    return tuple(instance_task(i) for i in load_instances("swe-bench-mini"))


def load_suite(split: str | None = None) -> list[Task]:
    """swe-bench-mini as Tasks (the registry's `suite` hook). It is an evaluation suite:
    `dev`, `test` and None give every instance; `train` is refused, so nothing evaluated
    is trained on (train on your own instances with `--tasks FILE`, lines of `instance_task`)."""
    if split == "train":
        raise ValueError(
            "swe-bench-mini is an evaluation suite with no train split; "
            "train on your own instances with --tasks FILE"
        )
    if split not in (None, "dev", "test"):
        raise ValueError(f"unknown split {split!r}; accepted: dev, test")
    return list(_mini_suite())


class SWEEnv(gym.Env):
    """One SWE-bench instance: explore and edit the repository with bash, then submit."""

    grammar = "<bash>command</bash> runs in the checked-out repo; <submit/> grades its git diff"
    stop_strings = TAGS.stop_strings
    report_by = ("repo",)  # metadata keys evaluation reports break accuracy down by

    def __init__(
        self,
        *,
        repos_dir: str | Path | None = None,
        test_timeout_s: float = 300.0,
        max_turns: int = 20,
        format_penalty: float = 0.0,
        timeout_s: float | None = None,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        """`repos_dir` holds `<owner>__<name>` repositories (default: swe-bench-mini's);
        `timeout_s` limits one command, `test_timeout_s` the grading test run."""
        self.max_turns = text_env.turn_limit(max_turns)
        self.repos_dir = Path(repos_dir) if repos_dir is not None else None
        self.limits = text_env.sandbox_limits(limits, timeout_s)
        self.test_timeout_s = test_timeout_s
        self.format_penalty = format_penalty
        """Subtracted from the reward when the episode ends without <submit/>."""
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self._sandbox: Sandbox | None = None
        self._bash: Bash | None = None
        self._task: Task | None = None
        self._instance: dict[str, Any] | None = None
        self._src: Path | None = None
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Check out `options["task"]`'s instance (or one drawn from swe-bench-mini) and open
        a shell in it. A missing repository or a bad instance raises ValueError."""
        super().reset(seed=seed)
        task = text_env.episode_task(self, options, _mini_suite)
        instance = task.metadata.get("instance")
        if not isinstance(instance, dict):
            raise ValueError(f"task {task.id!r} holds no SWE-bench instance in metadata.instance")
        try:
            check_instance(instance)
        except ValueError as e:
            raise ValueError(f"task {task.id!r} is refused: {e}") from None
        self.close()
        repos = self.repos_dir
        if repos is None:
            from tasks.swe import suite_repos_dir

            repos = suite_repos_dir()
        src = repos / str(instance["repo"]).replace("/", "__")
        if not (src / ".git").exists() and not (src / "HEAD").exists():
            raise ValueError(f"no repository {src.name} under {repos}")
        folder = Path(tempfile.mkdtemp(prefix="skyrl-swe-task-"))
        try:
            try:
                checkout(src, str(instance["base_commit"]), folder / "repo")
            except RuntimeError as e:
                raise ValueError(f"cannot check out {instance['instance_id']}: {e}") from None
            self._sandbox = open_sandbox(self.limits, folder / "repo", task.id)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._bash = Bash(self._sandbox, self.limits)
        self._task, self._instance, self._src = task, instance, src
        self._turns_left = self.max_turns
        problem = str(instance["problem_statement"]).strip()
        prompt = INSTRUCTIONS.format(problem=problem, repo=instance["repo"]).strip()
        shell = intro(self._sandbox, self.limits, "the task's files")
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return f"{prompt}\n\n{shell}Turns left: {self._turns_left}", info

    @text_env.tag_step(parse_action, GRAMMAR)
    def step(self, action: str | None) -> text_env.Step:
        if action is None:
            return self._finish(True, "Submitted.")
        assert self._bash is not None
        return self._next_turn(self._bash.run(action).rstrip("\n"), None)

    def _next_turn(self, body: str, error: str | None) -> text_env.Step:
        if self._turns_left <= 0:
            return self._finish(False, body, error)
        return text_env.next_turn(body, error, self._turns_left, "the work is graded after it")

    def _finish(self, submitted: bool, body: str, error: str | None = None) -> text_env.Step:
        """Take the diff, grade it with the harness, end the episode."""
        assert self._instance is not None and self._src is not None
        instance, sandbox = self._instance, self._sandbox
        patch: str = ""
        grade_error: str | None = None
        if sandbox is not None:
            sandbox.kill_all()  # nothing may write while we diff
            scratch = Path(tempfile.mkdtemp(prefix="skyrl-swe-diff-"))
            try:
                patch = diff_tree(sandbox.workdir, str(instance["base_commit"]), self._src, scratch)
            except (RuntimeError, OSError) as e:
                grade_error = f"cannot take the diff: {e}"
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        self.close()
        result = grade(instance, patch, repos_dir=self.repos_dir, timeout_s=self.test_timeout_s)
        grade_error = grade_error or result.error
        reward = 1.0 if result.resolved else 0.0
        verdict = (
            "The patch is empty: nothing was graded."
            if result.empty_patch
            else f"The tests say: {'resolved' if result.resolved else 'not resolved'}"
            + (f" ({grade_error})." if grade_error else ".")
        )
        info = {
            "turns_left": self._turns_left,
            "error": error,
            "correct": result.resolved,
            "resolved": result.resolved,
            "empty_patch": result.empty_patch,
            "patch_applied": result.patch_applied,
            "grade_error": grade_error,
            "model_patch": patch,
            "tests_status": json.dumps(result.tests_status),
            "test_output": result.log[-TEST_OUTPUT_CHARS:],
            "submitted": submitted,
        }
        return text_env.graded(body, verdict, reward, info, self.format_penalty)

    def close(self) -> None:
        """Kill the agent's processes and remove the checkout."""
        if self._sandbox is not None:
            self._sandbox.close()
        self._sandbox = self._bash = self._task = self._instance = None
