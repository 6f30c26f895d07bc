"""`skyrl/Python-v0`: solve a task by running Python in a persistent sandboxed REPL.

Action grammar (the model's text; `stop_strings` end generation at a closing tag):

    <python>code</python>    run code in the episode's REPL (variables persist between turns);
                             the observation is its output, any traceback, and the repr of
                             the last expression's value, like a notebook cell
    <answer>text</answer>    submit the answer; ends the episode and the task's grader scores it

Tag rule (as in the SQL environment): the FIRST opening tag in the text is the action; it
must be closed, non-empty and hold no other tag. A Markdown code fence around the code is
dropped. Anything else is an error observation, and the turn is spent.

Rewards: `<answer>` gives 1.0 when the task's grader accepts it, else 0.0. Code turns and
malformed turns give 0.0; running out of turns without an `<answer>` truncates the episode
with reward `-format_penalty`. Every failure is an observation, never an exception.

Graders (`task.metadata["grader"]`): `numeric` (default, `environments.math.numeric_match`)
or `exact` (whitespace- and case-normalised string equality). A list `answer` accepts any
of its items.

The REPL is `python_repl.py` run by the system Python inside a `Sandbox` (bubblewrap: no
network, read-only system, private work dir). Each episode gets a fresh sandbox, started at
its first `<python>` action. A cell that runs past `timeout_s`, or a REPL that crashes, is
killed with every process it started; the next action starts a new REPL, and the observation
says the variables were lost.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from typing import Any, Literal

import gymnasium as gym

from environments import text_env
from environments.math import numeric_match
from environments.python_repl import PythonRepl, ReplReply
from environments.sandbox import Limits, Sandbox
from environments.spaces import ActionError
from tasks.task import Task

__all__ = ["ActionError", "PythonEnv", "PythonRepl", "ReplReply", "grade", "parse_action"]

MAX_OBSERVATION_CHARS = 1_000_000
"""Upper bound of the observation space; step observations are capped by `max_obs_chars`."""
GRAMMAR = "Use <python>code</python> to run Python or <answer>...</answer> to answer."

TAGS = text_env.Tags("python", "answer")
_FENCE = re.compile(r"\A\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)


def parse_action(text: str) -> tuple[str, str]:
    """Return (tag, body) of the first `<python>` / `<answer>` tag; ActionError if malformed."""
    tag, body = TAGS.parse(text, strip=False)
    if tag == "python":
        fence = _FENCE.match(body)
        return tag, textwrap.dedent(fence.group(1) if fence else body).strip("\n")
    return tag, body.strip()


def _normalise(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def grade(answer: str, task: Task) -> bool:
    """True when the task's grader (`numeric` or `exact`) accepts `answer`."""
    kind = task.metadata.get("grader", "numeric")
    golds = task.answer if isinstance(task.answer, list) else [task.answer]
    if kind == "exact":
        return any(_normalise(answer) == _normalise(g) for g in golds if g is not None)
    if kind == "numeric":
        return any(numeric_match(answer, g) for g in golds)
    raise ValueError(f"task {task.id!r}: unknown grader {kind!r}; known: numeric, exact")


# ---------------------------------------------------------------------------- environment


def _clean(text: str) -> str:
    """Valid UTF-8 text: lone surrogates replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _clip(text: str, limit: int, *, keep: Literal["head", "tail"] = "head") -> str:
    if len(text) <= limit:
        return text
    marker = f"... ({len(text) - limit} characters clipped) ..."
    if keep == "tail":
        return marker + "\n" + text[len(text) - limit :]
    return text[:limit] + "\n" + marker


def default_python() -> str:
    """The system Python the sandbox runs (not a venv's: its files may be hidden there)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(path, os.X_OK):
            return path
    return shutil.which("python3") or "python3"


class PythonEnv(gym.Env):
    """Work out an answer with a sandboxed Python REPL, then submit it in `<answer>`."""

    grammar = (
        "<python>code</python> runs in a sandboxed persistent REPL; <answer>…</answer> answers"
    )
    stop_strings = TAGS.stop_strings
    report_by = ("kind",)  # metadata keys evaluation reports break accuracy down by

    def __init__(
        self,
        *,
        max_obs_chars: int = 4000,
        python: str | None = None,
        sandbox_backend: Literal["auto", "bwrap", "fallback"] | None = None,
        max_turns: int = 5,
        format_penalty: float = 0.1,
        timeout_s: float | None = None,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        """`max_turns` actions per episode; `format_penalty` is the reward for running out of
        turns without an answer (negated); `timeout_s` (default `limits.timeout_s`) is the wall
        clock of one `<python>` action; `limits` bound the sandbox; `max_obs_chars` caps an
        observation; `python` is the interpreter inside the sandbox; `sandbox_backend` picks
        `bwrap` / `fallback` (default: `$SKYRL_SANDBOX_BACKEND`, else bwrap when installed)."""
        self.max_turns = text_env.turn_limit(max_turns)
        self.format_penalty = format_penalty
        self.limits = text_env.sandbox_limits(limits, timeout_s)
        """Sandbox limits; `timeout_s` is the wall clock of one `<python>` action."""
        self.max_obs_chars = max_obs_chars
        self.python = python or default_python()
        """The interpreter inside the sandbox (the system Python, standard library only)."""
        self.sandbox_backend = sandbox_backend
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self._task: Task | None = None
        self._turns_left = 0
        self._sandbox: Sandbox | None = None
        self._repl: PythonRepl | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on `options["task"]`, or on a task drawn from the bundled train suite."""
        super().reset(seed=seed)
        self._close_sandbox()
        task = text_env.episode_task(self, options, lambda: text_env.train_suite("python"))
        grade("0", task)  # an unknown grader fails here, not in step()
        self._task, self._turns_left = task, self.max_turns
        observation = (
            f"{text_env.last_message(task)}\n"
            "You can run Python: <python>print(2 + 2)</python> runs code in a persistent "
            "session (variables survive between turns, the value of a last expression is "
            f"shown; no network, {self.limits.timeout_s:g} s per run). Reply with the final "
            f"answer inside <answer></answer>, e.g. <answer>42</answer>. Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return _clip(_clean(observation), MAX_OBSERVATION_CHARS), info

    @text_env.tag_step(parse_action, GRAMMAR)
    def step(self, action: tuple[str, str]) -> text_env.Step:
        tag, body = action
        if tag == "answer":
            return self._grade(body)
        return self._next_turn(*self._run(body))

    def _run(self, code: str) -> tuple[str, str | None]:
        """(observation body, error) of one cell."""
        if self._repl is None:
            self._sandbox = Sandbox(self.limits, backend=self.sandbox_backend)
            self._repl = PythonRepl(self._sandbox, self.python, self.limits.output_bytes)
        try:
            reply = self._repl.execute(code, self.limits.timeout_s)
        except (RuntimeError, OSError) as e:
            self._close_sandbox()
            return f"Error: {e}", str(e)
        budget = self.max_obs_chars
        error: str | None = reply.error
        if reply.status == "timeout":
            error = f"the code ran past the {self.limits.timeout_s:g} s time limit and was stopped"
        if reply.status != "ok":
            error = (
                f"Error: {error}. The Python session was restarted: variables and imports "
                "from earlier turns are lost."
            )
        tail = _clip(_clean(error or ""), budget // 2, keep="tail")
        if reply.value is not None:
            tail += ("\n" if tail else "") + "Out: " + _clip(_clean(reply.value), budget // 4)
        head = _clean(reply.output)
        room = max(200, budget - len(tail) - 40)
        if reply.truncated or len(head) > room:
            head = head[:room].rstrip("\n") + "\n... (output truncated)"
        text = "\n".join(p.rstrip("\n") for p in (head, tail) if p.strip()) or "(no output)"
        summary = error.strip().splitlines()[-1] if error and error.strip() else None
        return text, summary

    def _next_turn(self, body: str, error: str | None) -> text_env.Step:
        """An observation for a turn that did not end the episode, unless it was the last one."""
        body = _clip(body, self.max_obs_chars)
        if self._turns_left > 0:
            return text_env.next_turn(body, error, self._turns_left, "use it for <answer>")
        self._task = None
        self._close_sandbox()
        return text_env.out_of_turns(body, error, self.format_penalty, "an <answer>")

    def _grade(self, answer: str) -> text_env.Step:
        assert self._task is not None
        correct = grade(answer, self._task)
        self._task = None
        self._close_sandbox()
        return text_env.verdict(correct, self._turns_left)

    @property
    def sandbox(self) -> Sandbox | None:
        """This episode's sandbox (None until the first `<python>` action starts it)."""
        return self._sandbox

    def _close_sandbox(self) -> None:
        if self._repl is not None:
            self._repl.stop()
            self._repl = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def close(self) -> None:
        """Kill the REPL and every process it started; remove the sandbox's work dir."""
        self._close_sandbox()
        self._task = None
