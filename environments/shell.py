"""`skyrl/Shell-v0`: do a Harbor-format terminal task in a persistent, sandboxed bash.

The task is a Harbor folder (`task.metadata["task_dir"]`, format and verifier contract in
`tasks/harbor.py`). `reset` builds a fresh `Sandbox`, copies `environment/files/` into its
work dir, runs `environment/setup.sh` there, and starts one bash on a pty that lives for the
whole episode, so `cd`, variables and functions persist between actions.

Action grammar (the model's text; `stop_strings` end generation at a closing tag):

    <bash>command</bash>   run it; the observation is its output (stdout and stderr merged),
                           its exit code, and the turns left
    <submit/>              end the episode and grade it

Tag rule (as in `skyrl/SQL-v0`): the FIRST `<bash>` or `<submit/>` is the action; text
before it is reasoning. An unclosed `<bash>`, a tag inside the body or an empty body is an
error observation; the turn is spent. Running out of turns (`max_turns`) grades the work as
it stands and truncates the episode. Every failure is an observation, never an exception.

Protocol: a command travels as an ANSI-C quoted string (`$'...'`, printable ASCII only, in
lines short enough for the pty's canonical mode), runs through `eval` with stdin from
/dev/null, and a marker with `$?` follows it, on the same line: the marker is new for
every command, and bash has read the whole line before the command runs, so the command
cannot read it from the terminal, and one it saw traced (`set -x`, which ends with the
command) is stale. Output past `Limits.output_bytes` is
cut to its head and tail; a command past `timeout_s`, or one that floods the pty past
`FLOOD_BYTES`, is killed with every process it left behind while the shell itself survives
(it is restarted only if it does not answer, e.g. a `while true` loop in bash itself).

Rewards: grading kills every process of the agent, copies the task's `tests/` into the
sandbox (never seen before), runs `tests/test.sh`, and reads `reward.txt` or `reward.json`
(`read_reward`). No reward file, or an invalid one, scores 0.0 and `info["reward_error"]`
says why. A truncated episode scores the verifier's reward minus `format_penalty`; every
other turn scores 0.0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import secrets
import select
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from environments.sandbox import Limits, Sandbox
from environments.spaces import ActionError, TextSpace, action_text
from tasks.harbor import load_harbor_task, load_suite, read_reward, verifier_timeout
from tasks.task import Task

__all__ = ["ActionError", "ShellEnv", "parse_action", "quote_command"]

MAX_ACTION_CHARS = 100_000
"""Longer actions are rejected unread."""
MAX_OBSERVATION_CHARS = 1_000_000
"""Upper bound of the observation space (observations are capped far lower by the limits)."""
FLOOD_BYTES = 1024 * 1024
"""A command that prints more than this is stopped (its output was cut long before)."""
RECOVER_S = 2.0
"""After killing a command, how long the shell gets to report back before it is restarted."""
VERIFIER_DISK_MB = 256
"""Room added to a size-capped work dir for grading (the agent's processes are gone by then)."""
CHUNK = 3000  # characters per input line: under the pty's 4095-byte canonical line limit
GRAMMAR = "Use <bash>command</bash> to run a shell command or <submit/> when the task is done."
SHELL_ENV = {"PS1": "", "PS2": "", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}
SHELL_ENV |= {"GIT_EDITOR": "true", "EDITOR": "true", "GIT_TERMINAL_PROMPT": "0"}
"""Environment of the agent's shell: no prompts, no pagers or editors waiting for a human."""

_TAG = re.compile(r"<bash>|<submit/>")
_ANY_TAG = re.compile(r"</?bash>|<submit/>")


def parse_action(text: str) -> str | None:
    """The command of the first `<bash>` tag, or None for `<submit/>`; ActionError if malformed."""
    first = _TAG.search(text)
    if first is None:
        raise ActionError("no <bash> or <submit/> tag found")
    if first.group() == "<submit/>":
        return None
    end = text.find("</bash>", first.end())
    if end < 0:
        raise ActionError("<bash> is not closed with </bash>")
    body = text[first.end() : end]
    if _ANY_TAG.search(body):
        raise ActionError("<bash> contains another tag; tags cannot be nested")
    if not body.strip():
        raise ActionError("<bash></bash> is empty")
    if "\x00" in body:
        raise ActionError("the command contains a NUL character")
    return body


def quote_command(command: str) -> list[str]:
    """Bash lines that set `__skyrl_cmd` to `command` exactly, each under CHUNK characters.

    Only printable ASCII is sent (everything else as `\\xHH` in `$'...'`), so no byte of the
    command can act as a terminal control character or end a line early."""
    tokens = [
        chr(b) if 0x20 <= b < 0x7F and b not in (0x27, 0x5C) else f"\\x{b:02x}"
        for b in command.encode("utf-8", "replace")
    ]
    lines: list[str] = []
    current: list[str] = []
    size = 0
    for token in tokens:
        if size + len(token) > CHUNK:
            lines.append("".join(current))
            current, size = [], 0
        current.append(token)
        size += len(token)
    lines.append("".join(current))
    return [f"__skyrl_cmd{'+' * (i > 0)}=$'{line}'" for i, line in enumerate(lines)]


def _chown_tree(root: Path, uid: int | None) -> None:
    if uid is None:
        return
    for folder, dirs, files in os.walk(root):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.lchown(name, uid, uid)


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, real uid, pid in its own namespace) of every live process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{entry}/status").read_text().splitlines()
            )
            table[int(entry)] = (
                int(fields["PPid"]),
                int(fields["Uid"].split()[0]),
                int(fields.get("NSpid", entry).split()[-1]),
            )
    return table


@functools.lru_cache(maxsize=1)
def _train_suite() -> list[Task]:
    return load_suite("train")


class _Output:
    """The head and tail of a command's output within `cap` bytes, and its total size."""

    def __init__(self, cap: int) -> None:
        self.half = max(1, cap // 2)
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        self.head += data[:room]
        self.tail += data[max(0, room) :]
        if len(self.tail) > 4 * self.half:
            del self.tail[: -self.half]

    def text(self) -> str:
        tail = bytes(self.tail[-self.half :])
        omitted = self.total - len(self.head) - len(tail)
        middle = f"\n[... {omitted} bytes of output omitted ...]\n" if omitted > 0 else ""
        out = bytes(self.head).decode("utf-8", "replace") + middle + tail.decode("utf-8", "replace")
        return out.replace("\r\n", "\n")


class ShellEnv(gym.Env):
    """A Harbor terminal task: run bash commands in a sandbox, then submit for grading."""

    metadata = {"render_modes": []}
    stop_strings = ("</bash>", "<submit/>")
    # metadata keys evaluation reports break accuracy down by
    report_by = ("difficulty", "category")

    def __init__(
        self,
        max_turns: int = 10,
        format_penalty: float = 0.1,
        timeout_s: float | None = None,
        limits: Limits | None = None,
        task_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        """`timeout_s` overrides `limits.timeout_s` (per command); `task_dir`, a Harbor task
        folder, replaces the task passed to (or drawn by) `reset`."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.max_turns = max_turns
        self.format_penalty = format_penalty
        """Subtracted from the verifier's reward when the episode ends without <submit/>."""
        self.limits = limits or Limits()
        if timeout_s is not None:
            self.limits = dataclasses.replace(self.limits, timeout_s=float(timeout_s))
        self.task_dir = Path(task_dir) if task_dir is not None else None
        self.observation_space = TextSpace(MAX_OBSERVATION_CHARS)
        self.action_space = TextSpace(MAX_ACTION_CHARS)
        self._sandbox: Sandbox | None = None
        self._shell: Any = None  # pexpect.spawn of the agent's bash
        self._shell_nspid = 0  # the shell's pid as it sees itself ($$)
        self._task: Task | None = None
        self._turns_left = 0
        self._marker = b""  # the current command's end marker (new for each command)
        self._marker_re = re.compile(b"(?!)")

    @property
    def sandbox(self) -> Sandbox | None:
        """The current episode's sandbox (None before the first reset and after close)."""
        return self._sandbox

    # ------------------------------------------------------------------------ episode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on `options["task"]` (or `task_dir`, or a task drawn from the train suite).

        A broken task (no folder, a failing setup.sh) raises ValueError here."""
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if self.task_dir is not None:
            task = load_harbor_task(self.task_dir)
        elif task is None:
            suite = _train_suite()
            task = suite[int(self.np_random.integers(len(suite)))]
        task_dir = task.metadata.get("task_dir")
        if not task_dir:
            raise ValueError(f"task {task.id!r} names no Harbor folder in metadata.task_dir")
        folder = Path(task_dir)
        if not (folder / "tests" / "test.sh").is_file():
            raise ValueError(f"task {task.id!r}: {folder} is not a Harbor task (no tests/test.sh)")
        self.close()
        self._sandbox = sandbox = Sandbox(self.limits)
        files = folder / "environment" / "files"
        if files.is_dir():
            try:
                shutil.copytree(files, sandbox.workdir, symlinks=True, dirs_exist_ok=True)
            except OSError as e:  # shutil.Error too: most likely over Limits.disk_mb
                self.close()
                raise ValueError(
                    f"task {task.id!r}: environment/files could not be copied into the "
                    f"sandbox (work dir capped at {self.limits.disk_mb} MB): {str(e)[:300]}"
                ) from None
            _chown_tree(sandbox.workdir, sandbox.uid)
        setup = folder / "environment" / "setup.sh"
        if setup.is_file():
            script = "set -o pipefail; bash -s 2>&1 | tail -c 2000"  # quiet: run() caps output
            result = sandbox.run(["bash", "-c", script], input=setup.read_bytes(), timeout=120)
            if result.returncode != 0:
                self.close()
                raise ValueError(
                    f"task {task.id!r}: environment/setup.sh failed ({result.returncode}): "
                    f"{result.stdout}{result.stderr}"
                )
        self._start_shell()
        self._task, self._turns_left = task, self.max_turns
        instruction = task.prompt if isinstance(task.prompt, str) else task.prompt[-1]["content"]
        observation = (
            f"{instruction.strip()}\n\n"
            f"You are in a bash shell in {sandbox.inner_workdir}, which holds the task's files. "
            "Run one command per turn as <bash>command</bash>; you will see its output and exit "
            "code, and the directory and variables persist. Commands stop after "
            f"{self.limits.timeout_s:g} s and output is cut past {self.limits.output_bytes} bytes. "
            f"When the task is done, reply <submit/> to have it checked. Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return observation[:MAX_OBSERVATION_CHARS], info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            error = "the episode is over; call reset() to start a new one"
            return f"Error: {error}.", 0.0, True, False, {"turns_left": 0, "error": error}
        self._turns_left -= 1
        try:
            action = action_text(action, MAX_ACTION_CHARS)
            command = parse_action(action.encode("utf-8", "replace").decode("utf-8"))
        except ActionError as e:
            return self._next_turn(f"Error: {e}. {GRAMMAR}", str(e))
        if command is None:
            return self._finish(submitted=True, body="Submitted.", error=None)
        return self._next_turn(self._run(command), None)

    def _next_turn(self, body: str, error: str | None) -> tuple[str, float, bool, bool, dict]:
        if self._turns_left <= 0:
            return self._finish(submitted=False, body=body, error=error)
        note = " (the work is graded after it)" if self._turns_left == 1 else ""
        observation = f"{body}\nTurns left: {self._turns_left}{note}"
        return observation, 0.0, False, False, {"turns_left": self._turns_left, "error": error}

    def _finish(
        self, submitted: bool, body: str, error: str | None
    ) -> tuple[str, float, bool, bool, dict]:
        """Grade the work; end the episode (terminated on submit, truncated out of turns)."""
        reward, named, reward_error, verifier = self._grade()
        self._task = None
        score = reward if reward is not None else 0.0
        verdict = (
            f"The tests gave reward {score:g}."
            if reward_error is None
            else f"The tests gave no reward ({reward_error}): reward 0."
        )
        info = {
            "turns_left": self._turns_left,
            "error": error,
            "correct": score >= 1.0,
            "rewards": named,
            "reward_error": reward_error,
            "verifier": verifier,
            "submitted": submitted,
        }
        if submitted:
            return f"{body} {verdict}", score, True, False, info
        footer = (
            f"\nTurns left: 0. The episode ended without <submit/>; the work was graded. {verdict}"
        )
        return body + footer, score - float(self.format_penalty), False, True, info

    def _grade(self) -> tuple[float | None, dict[str, float], str | None, dict[str, Any]]:
        """Kill the agent's processes, run the task's tests/test.sh in the sandbox, read the reward."""
        sandbox, task = self._sandbox, self._task
        assert sandbox is not None and task is not None
        sandbox.kill_all()
        self._shell = None
        sandbox.grow_disk(VERIFIER_DISK_MB)  # the agent may have filled the work dir
        vdir = sandbox.workdir / f".skyrl-verifier-{secrets.token_hex(8)}"
        logs = vdir / "logs" / "verifier"
        try:
            shutil.copytree(
                Path(task.metadata["task_dir"]) / "tests", vdir / "tests", symlinks=True
            )
            logs.mkdir(parents=True)
        except OSError as e:  # shutil.Error too
            why = f"the tests could not be copied into the work dir ({str(e)[:300]})"
            return None, {}, why, {"returncode": None, "timed_out": False, "output": ""}
        _chown_tree(vdir, sandbox.uid)
        inner = f"{sandbox.inner_workdir}/{vdir.name}"
        timeout = verifier_timeout(task)
        result = sandbox.run(
            ["bash", "-c", 'bash "$TESTS_DIR/test.sh" >"$LOGS_DIR/test-stdout.txt" 2>&1'],
            timeout=timeout,
            env={"TESTS_DIR": f"{inner}/tests", "LOGS_DIR": f"{inner}/logs/verifier"},
        )
        sandbox.kill_all()
        output = logs / "test-stdout.txt"
        tail = ""
        if output.is_file() and not output.is_symlink():
            with output.open("rb") as f:
                f.seek(max(0, output.stat().st_size - 2000))
                tail = f.read().decode("utf-8", "replace")
        verifier = {"returncode": result.returncode, "timed_out": result.timed_out, "output": tail}
        reward, named, error = read_reward(logs)
        if error and result.timed_out:
            error += f" (test.sh was stopped at its {timeout:g} s limit)"
        return reward, named, error, verifier

    def close(self) -> None:
        """Kill every process of the episode and remove its work dir."""
        if self._sandbox is not None:
            self._sandbox.close()
        self._sandbox = self._shell = self._task = None

    # ------------------------------------------------------------------------ the shell

    def _start_shell(self) -> None:
        sandbox = self._sandbox
        assert sandbox is not None
        shell = sandbox.pexpect_spawn(
            ["bash", "--norc", "--noprofile", "--noediting", "-i"],
            env=SHELL_ENV,
            echo=False,
            encoding=None,
            dimensions=(50, 200),
        )
        shell.delaybeforesend = None
        self._shell = shell
        self._send(["stty -onlcr -echo 2>/dev/null; set +o history +H; unset HISTFILE"])
        status, _, _ = self._collect(time.monotonic() + 30, _Output(4096))
        if status is None:
            raise RuntimeError("the sandboxed bash did not start")
        self._shell_nspid = status  # the handshake reports $$

    def _send(self, lines: list[str], status: str = "$$") -> None:
        """Send `lines`; the last one also reports `status` after a fresh marker.

        The marker is new for every command and travels on the same line as the command's
        `eval`: bash reads that whole line before it runs any of it, so nothing is left in
        the terminal's input for the command to read, and a marker seen earlier (`set -x`
        traces the report) is worthless. Only `\\n<marker><digits>\\n` ends a command."""
        self._marker = f"__skyrl_{secrets.token_hex(12)}__".encode()
        self._marker_re = re.compile(re.escape(b"\n" + self._marker) + rb"(\d{1,10})\n")
        report = (
            f'__skyrl_status="{status}"; {{ set +xv; }} 2>/dev/null; PS1= PS2=; '
            f"unset PROMPT_COMMAND; printf '\\n%s%d\\n' {self._marker.decode()} "
            '"$__skyrl_status"'
        )
        *head, last = lines
        self._shell.send(("\n".join([*head, f"{last}; {report}"]) + "\n").encode())

    def _collect(self, deadline: float, out: _Output) -> tuple[int | None, bool, bool]:
        """Read until the marker: (status or None, timed out, flooded); output goes to out."""
        fd, pending = self._shell.child_fd, b""
        keep = len(self._marker) + 16
        poller = select.poll()  # not select(): a trainer may hold over 1024 descriptors
        poller.register(fd, select.POLLIN)
        while True:
            found = self._marker_re.search(pending)
            if found is not None:
                out.add(pending[: found.start()])
                return int(found.group(1)), False, False
            if len(pending) > keep:
                out.add(pending[:-keep])
                pending = pending[-keep:]
            if out.total > FLOOD_BYTES:
                return None, False, True
            left = deadline - time.monotonic()
            if left <= 0:
                return None, True, False
            if not poller.poll(left * 1000):
                continue
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            if not data:  # the shell is gone
                out.add(pending)
                return None, False, False
            pending += data

    def _run(self, command: str) -> str:
        """Run one command in the shell; its output, exit code and what went wrong, as text."""
        if self._shell is None or not self._shell.isalive():
            self._restart()
        out = _Output(self.limits.output_bytes)
        self._send([*quote_command(command), 'eval "$__skyrl_cmd" </dev/null'], status="$?")
        status, timed_out, flooded = self._collect(time.monotonic() + self.limits.timeout_s, out)
        note = ""
        if status is None and (timed_out or flooded):
            killed = self._kill_strays()
            if killed is not None:  # the shell is alive; if nothing was killed, bash itself is busy
                wait = RECOVER_S if killed else 0.2
                status, _, _ = self._collect(time.monotonic() + wait, _Output(0))
            why = (
                f"stopped at the {self.limits.timeout_s:g} s time limit"
                if timed_out
                else f"stopped after printing more than {FLOOD_BYTES} bytes"
            )
            if status is None:
                self._restart()
                note = f"[the command was {why}; the shell was restarted in {self._where()} (variables and cd were reset)]"
            else:
                note = f"[the command was {why}; it and every process it started were killed]"
        elif status is None:
            self._restart()
            note = f"[the shell exited; a new shell was started in {self._where()}]"
        text = out.text()
        if text and not text.endswith("\n"):
            text += "\n"
        if status is not None and not note:
            note = f"[exit code: {status}]"
        return text + note

    def _where(self) -> str:
        return self._sandbox.inner_workdir if self._sandbox else "the work dir"

    def _restart(self) -> None:
        """Kill everything the agent runs and start a fresh shell in the work dir."""
        assert self._sandbox is not None
        self._sandbox.kill_all()
        self._start_shell()

    def _kill_strays(self) -> int | None:
        """SIGKILL every process of the episode but the shell (and its ancestors, the
        sandbox wrappers): a timed-out command, its children, whatever it left running.
        The number of processes killed; None when the shell itself is gone."""
        root, uid = self._shell.pid, self._sandbox.uid if self._sandbox else None
        killed = 0
        for _ in range(50):
            table = _proc_table()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            tree, todo = set(), [root]
            while todo:
                pid = todo.pop()
                tree.add(pid)
                todo += children.get(pid, [])
            shell = [p for p in tree if table[p][2] == self._shell_nspid]
            if len(shell) != 1:
                return None
            keep, pid = set(), shell[0]
            while pid in tree:
                keep.add(pid)
                pid = table[pid][0]
            victims = {p for p in tree if p not in keep}
            if uid is not None:
                victims |= {p for p, (_, u, _) in table.items() if u == uid and p not in keep}
            if not victims:
                return killed
            killed += len(victims)
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        return killed
