"""`skyrl/Shell-v0`: do a Harbor-format terminal task in a persistent, sandboxed bash.

The task is a Harbor folder (`task.metadata["task_dir"]`, format in `tasks/harbor.py`),
run as Harbor runs it (`environments/harbor.py`): `reset` builds the task's image once
(cached), refuses with a one-line reason a task whose Dockerfile cannot be honoured here,
lays a private copy of the image out at Harbor's paths in a fresh `Sandbox` (the agent works
in the WORKDIR, default /app) and starts one bash on a pty that lives for the whole
episode, so `cd`, variables and functions persist between actions. `run_oracle()` runs the
task's `solution/solve.sh` as Harbor's oracle agent does.

Action grammar (the model's text; `stop_strings` end generation at a closing tag):

    <bash>command</bash>   run it; the observation is its output (stdout and stderr merged),
                           its exit code, and the turns left
    <submit/>              end the episode and grade it

Tag rule (as in `skyrl/SQL-v0`): the FIRST `<bash>` or `<submit/>` is the action; text
before it is reasoning. An unclosed `<bash>`, a tag inside the body or an empty body is an
error observation; the turn is spent. Running out of turns (`max_turns`) grades the work as
it stands and truncates the episode. Every failure is an observation, never an exception.

The shell, its command protocol and its limits (`timeout_s`, `Limits.output_bytes`, a
flood of output) are `environments.bash`'s.

Rewards: grading (`_grade`) leaves the agent's processes running where the verifier can
join the shell's network (as root; else it kills them first), makes `/logs/verifier` anew
(empty), puts the task's `tests/` at /tests (never seen before), runs `/tests/test.sh` (read
whole before it runs, `verifier_command`; pid 1 of a PID namespace of its own, which code it
runs cannot signal; with root inside, in the episode's PID namespace, where it sees the agent's
processes) with `[verifier].env`, and reads `reward.json` (wins) or `reward.txt` (`read_reward`) only from a
verifier that finished: one stopped at its time limit or ended by a signal scores 0.0 with
the cause. `reward_key` picks the key of a multi-key reward.json (default `reward`, else the
mean); `info["rewards"]` has them all. No reward file, or an invalid one, scores 0.0 and
`info["reward_error"]` says why. A truncated episode scores the verifier's reward minus
`format_penalty`; every other turn scores 0.0.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from environments import harbor, harbor_compose, harbor_steps, text_env
from environments.bash import GRAMMAR, TAGS, Bash, intro, parse_action, quote_command
from environments.container import RUNTIMES, Container, runtime_problem
from environments.sandbox import Limits, Sandbox
from environments.sandbox_procs import wait_asleep
from environments.spaces import ActionError
from environments.text_env import MAX_ACTION_CHARS
from tasks.harbor import (
    SUITE_DIR,
    agent_timeout,
    check_folder,
    load_harbor_task,
    read_reward,
    solution_env,
    verifier_env,
    verifier_timeout,
)
from tasks.task import Task

__all__ = ["MAX_ACTION_CHARS", "ActionError", "ShellEnv", "parse_action", "quote_command"]

MAX_OBSERVATION_CHARS = 1_000_000
"""Upper bound of the observation space (observations are capped far lower by the limits)."""
OLD_VERIFIER_ENV = {"TESTS_DIR": "/tests", "LOGS_DIR": "/logs/verifier"}
"""Set for verifiers written for skyrl before it had Harbor's paths (Harbor sets neither)."""
VERIFIER_DISK_MB = 256
"""Room added to a size-capped work dir for grading (the agent's processes are gone by then)."""
ENTRYPOINT_SETTLE_S = 10.0
"""The longest an episode's start waits for what its ENTRYPOINT started to be asleep."""

VERIFIER = "/tests/test.sh"
VERIFIER_LOG = "/logs/verifier/test-stdout.txt"
MAX_LOG_BYTES = 16 * 1024 * 1024
"""What `save_logs` keeps of one log file (the rest is cut off)."""
_BASH_LINE = re.compile(rb"#!\s*\S*/(?:env\s+)?bash(?:\s|$)")


def verifier_command(test_sh: Path) -> tuple[str, bool]:
    """The shell command that runs `/tests/test.sh` (host copy `test_sh`) into the log, and
    whether the script must be bound read-only (sealed).

    Bash reads a script as it runs it, so code the verifier runs could append lines to it
    and have them run. A bash script (or one without `#!`, which bash runs) is therefore
    sourced by `bash -c '. "$0"' /tests/test.sh`: `source` reads the whole file before running
    any of it, `$0` and `BASH_SOURCE` are `/tests/test.sh` as when it is run, and the file
    stays an ordinary one the verifier may chown and chmod, as in Harbor. Any other
    interpreter (`#!/bin/sh`: dash reads as it goes too) is run by its shebang with
    `/tests/test.sh` bound read-only."""
    first = test_sh.read_bytes()[:256].split(b"\n", 1)[0] if test_sh.is_file() else b""
    if not first.startswith(b"#!") or _BASH_LINE.match(first):
        return f"exec bash -c '. \"$0\"' {VERIFIER} > {VERIFIER_LOG} 2>&1", False
    return f"chmod +x {VERIFIER} 2>/dev/null; exec {VERIFIER} > {VERIFIER_LOG} 2>&1", True


def _unfinished(returncode: int | None, timed_out: bool, limit: float) -> str | None:
    """Why the verifier's reward files are not its verdict (it did not finish), or None."""
    if timed_out:
        return f"test.sh did not finish within its {limit:g} s limit"
    if returncode is not None and returncode > 128:
        try:
            name = signal.Signals(returncode - 128).name
        except ValueError:
            return None
        return f"test.sh was ended by {name} (status {returncode}) before it finished"
    return None


class ShellEnv(gym.Env):
    """A Harbor terminal task: run bash commands in a sandbox, then submit for grading."""

    grammar = (
        "<bash>command</bash> runs in a sandboxed persistent shell; <submit/> runs the task's tests"
    )
    stop_strings = TAGS.stop_strings
    # metadata keys evaluation reports break accuracy down by
    report_by = ("difficulty", "category")

    def __init__(
        self,
        *,
        task_dir: str | Path | None = None,
        reward_key: str | None = None,
        backend: str = "bwrap",
        max_turns: int = 10,
        format_penalty: float = 0.1,
        timeout_s: float | None = None,
        limits: Limits | None = None,
        build_network: bool | str = False,
        base: str | None = None,
        image_as: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """`timeout_s` overrides `limits.timeout_s` (per command); `task_dir`, a Harbor task
        folder, replaces the task passed to (or drawn by) `reset`; `build_network` lets image
        builds (RUN, a base image's root file system) use the network; `base=host` makes
        this machine's own system every task's FROM (default `$SKYRL_HARBOR_BASE`, else
        `image`: the base image's root file system); `image_as` maps a FROM's digest to the
        image it is read as (a digest with no tag cannot be resolved offline)."""
        self.harbor_options = harbor.BuildOptions.from_kwargs(build_network, base, image_as)
        self.base_chosen = base is not None or bool(os.environ.get(harbor.BASE_ENV))
        """Whether the user chose the base; else the bundled tasks run on this machine's
        system (they are written for it and must run offline), others on their image's."""
        self.max_turns = text_env.turn_limit(max_turns)
        self.format_penalty = format_penalty
        """Subtracted from the verifier's reward when the episode ends without <submit/>."""
        self.limits = text_env.sandbox_limits(limits, timeout_s)
        self.task_dir = Path(task_dir) if task_dir is not None else None
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self._sandbox: Sandbox | None = None
        self._bash: Bash | None = None
        self._task: Task | None = None
        self._layout: harbor.Layout | Container | None = None
        self._sidecars: harbor_compose.Sidecars | None = None
        """The services of a multi-container task (its compose file), running beside it."""
        self._step = 0
        """The current step of a multi-step task (`task.metadata["steps"]`)."""
        self._step_rewards: list[dict[str, float] | None] = []
        """The rewards of the steps graded so far (None: a step graded without one)."""
        self.backend = text_env.one_of("backend", backend, ("bwrap", *RUNTIMES))
        """`bwrap` (the image's layer in a bubblewrap sandbox) or a container runtime
        (`docker`, `podman`: the task's real image, where one works)."""
        self.reward_key = reward_key
        """The reward.json key that is the training reward; None: `reward` if present, else
        the mean of all keys (the whole dict is kept in `info["rewards"]`)."""
        self._turns_left = 0

    @property
    def sandbox(self) -> Sandbox | None:
        """The current episode's sandbox (None before the first reset and after close)."""
        return self._sandbox

    @property
    def files(self) -> Path | None:
        """Where the episode's WORKDIR (`/app`) is on the host (None between episodes)."""
        if not isinstance(self._layout, harbor.Layout):
            return None
        return self._layout.host_path(self._layout.image.workdir)

    # ------------------------------------------------------------------------ episode

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on `options["task"]` (or `task_dir`, or a task drawn from the train suite).

        A broken task (no folder, a failing setup.sh) raises ValueError here."""
        super().reset(seed=seed)
        if self.task_dir is not None:
            task = load_harbor_task(self.task_dir)
        else:
            task = text_env.episode_task(self, options, lambda: text_env.train_suite("shell"))
        task_dir = task.metadata.get("task_dir")
        if not task_dir:
            raise ValueError(f"task {task.id!r} names no Harbor folder in metadata.task_dir")
        folder = Path(task_dir)
        if not (folder / "tests" / "test.sh").is_file() and not task.metadata.get("steps"):
            raise ValueError(f"task {task.id!r}: {folder} is not a Harbor task (no tests/test.sh)")
        check_folder(folder)  # a task row names the folder without loading it
        verifier_timeout(task)  # a row's own limits are checked too
        agent_timeout(task)
        self.close()
        build = self.harbor_options
        if self.backend in RUNTIMES:
            problem = runtime_problem(self.backend)
            if problem is not None:
                raise ValueError(problem)
        else:
            if not self.base_chosen and folder.resolve().is_relative_to(SUITE_DIR.resolve()):
                build = dataclasses.replace(build, base="host")
            img = harbor.image(folder, build)
            line = harbor.preflight_line(task.id, img)
            if line is not None:
                raise ValueError(line)
        sandbox: Any
        try:
            if self.backend in RUNTIMES:  # the container stands for the sandbox and the layout
                self._layout = sandbox = Container(self.backend, folder, self.limits)
            else:
                sandbox = Sandbox(self.limits)
                self._layout = harbor.Layout(img, sandbox)
            self._sandbox = sandbox
        except (OSError, ValueError, shutil.Error, subprocess.SubprocessError) as e:
            self.close()
            raise ValueError(f"task {task.id!r}: its image could not be laid out ({e})") from None
        if isinstance(self._layout, harbor.Layout):  # its compose services, beside it
            try:
                self._sidecars = harbor_compose.start(folder, self._layout, build)
            except (OSError, ValueError, shutil.Error, subprocess.SubprocessError) as e:
                self.close()
                raise ValueError(f"task {task.id!r}: {e}") from None
        self._task, self._turns_left = task, self.max_turns
        self._step, self._step_rewards = 0, []
        steps = task.metadata.get("steps") or []
        if steps and isinstance(self._layout, harbor.Layout):
            why = harbor_steps.enter(self._layout, sandbox, folder, steps[0])
            if why is not None:
                self.close()
                raise ValueError(f"task {task.id!r}: {why}")
        self._bash = self._start_bash(self.limits)
        shell = intro(sandbox, self.limits, "the task's files")  # the image's WORKDIR
        observation = (
            f"{text_env.last_message(task).strip()}\n\n{shell}Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return observation[:MAX_OBSERVATION_CHARS], info

    @text_env.tag_step(parse_action, GRAMMAR)
    def step(self, action: str | None) -> text_env.Step:
        if action is None:
            return self._finish(submitted=True, body="Submitted.", error=None)
        assert self._bash is not None
        return self._next_turn(self._bash.run(action), None)

    def _next_turn(self, body: str, error: str | None) -> text_env.Step:
        if self._turns_left <= 0:
            return self._finish(submitted=False, body=body, error=error)
        return text_env.next_turn(body, error, self._turns_left, "the work is graded after it")

    def _finish(
        self, submitted: bool, body: str, error: str | None
    ) -> tuple[str, float, bool, bool, dict]:
        """Grade the work; end the episode (terminated on submit, truncated out of turns), or,
        for a multi-step task whose step met its min_reward, go on to the next step."""
        reward, named, reward_error, verifier = self._grade()
        steps = self._steps()
        if steps:
            step = steps[self._step]
            self._step_rewards.append(named if reward_error is None else None)
            more = self._step + 1 < len(steps)
            if (
                submitted
                and more
                and harbor_steps.passes(step["min_reward"], self._step_rewards[-1])
            ):
                why = self._next_step()
                if why is None:
                    return self._step_turn(body, step["name"], reward, reward_error)
                reward_error = why
            named, reward, reward_error = self._step_total(reward_error)
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
        return text_env.graded(body, verdict, score, info, self.format_penalty)

    def _steps(self) -> list[dict[str, Any]]:
        return list(self._task.metadata.get("steps") or []) if self._task is not None else []

    def _next_step(self) -> str | None:
        """Enter the next step (its workdir, setup.sh, healthcheck), with a fresh shell and
        turns; None, or why it could not start."""
        assert self._task is not None and self._sandbox is not None
        self._step += 1
        step = self._steps()[self._step]
        if isinstance(self._layout, harbor.Layout):
            why = harbor_steps.enter(
                self._layout, self._sandbox, Path(self._task.metadata["task_dir"]), step
            )
            if why is not None:
                return why
        self._bash = self._start_bash(self.limits)
        self._turns_left = self.max_turns
        return None

    def _start_bash(self, limits: Limits) -> Bash:
        """The episode's shell, started through the image's ENTRYPOINT, handed over once what
        the ENTRYPOINT left in the background is asleep (dns-blacklisting's server, waiting
        in accept()): Harbor's agent runs seconds after the container starts."""
        assert self._sandbox is not None
        bash = Bash(self._sandbox, limits)
        if isinstance(self._layout, harbor.Layout) and self._layout.image.entrypoint:
            wait_asleep(self._sandbox.owns, ENTRYPOINT_SETTLE_S)
        return bash

    def _step_turn(
        self, body: str, done: str, reward: float | None, error: str | None
    ) -> text_env.Step:
        """The observation between two steps: the finished step's verdict, the next step's
        instruction. The step's reward counts in the task's, at the end."""
        step = self._steps()[self._step]
        verdict = f"reward {reward:g}" if error is None else f"no reward ({error})"
        text = (
            f"{body} The tests of step {done} gave {verdict}.\n\nStep {self._step + 1} of "
            f"{len(self._steps())} ({step['name']}):\n{step['instruction'].strip()}\n\n"
            f"Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "step": step["name"]}
        return text[:MAX_OBSERVATION_CHARS], 0.0, False, False, info

    def _step_total(self, error: str | None) -> tuple[dict[str, float], float | None, str | None]:
        """The task's rewards from its steps' (Harbor's multi_step_reward_strategy), the
        training reward of them, and why there is none."""
        assert self._task is not None
        strategy = str(self._task.metadata.get("step_reward_strategy") or "mean")
        named = harbor_steps.aggregate(self._step_rewards, strategy)
        if not named:
            return {}, None, error or "no step of the task was graded with a reward"
        if self.reward_key is not None:
            value = named.get(self.reward_key)
            return named, value, None if value is not None else f"no {self.reward_key!r} reward"
        return named, named.get("reward", sum(named.values()) / len(named)), None

    def _live_shell(self) -> int | None:
        """The pid of a process at the head of the agent's shell (in its network namespace),
        when the verifier can join that namespace (bwrap, as root) and the shell is alive;
        else None."""
        sandbox, bash = self._sandbox, self._bash
        if sandbox is None or bash is None or sandbox.uid is None:
            return None
        if not isinstance(self._layout, harbor.Layout) or bash.host_pid is None:
            return None
        inner = sandbox.command_roots(bash.host_pid)
        return inner[0] if len(inner) == 1 else None

    def _grade(self) -> tuple[float | None, dict[str, float], str | None, dict[str, Any]]:
        """Run the task's tests/test.sh in the sandbox after the agent, read the reward.

        As in Harbor's one live container, what the agent left running (a service the oracle
        started) keeps running while the verifier runs, and the verifier reaches it on the
        same loopback. Where the sandbox has a user namespace of its own (root inside), the
        verifier runs in the sandbox's PID namespace (`Sandbox.share_pids`): it sees and may
        signal every process of the agent (`pgrep -u`, `killall`, as in Harbor), each of them
        in a PID namespace inside it that cannot see the verifier; elsewhere the verifier is
        PID 1 of a PID namespace of its own. Its `/logs/verifier` is a fresh folder no process
        of the agent's can see. Where the verifier cannot join the shell's network (not root),
        the agent's processes are killed first."""
        sandbox, task, layout = self._sandbox, self._task, self._layout
        assert sandbox is not None and task is not None and layout is not None
        holder = self._live_shell()
        if holder is None:
            sandbox.kill_all()
        self._bash = None
        sandbox.grow_disk(VERIFIER_DISK_MB)  # the agent may have filled the work dir
        none = {"returncode": None, "timed_out": False, "output": ""}
        steps, folder = self._steps(), Path(task.metadata["task_dir"])
        step = steps[self._step] if steps else None
        try:  # the reward folder is made anew, empty: nothing the agent planted there is left
            layout.fresh_dir("/logs/verifier")
            tests = harbor_steps.tests_dir(folder, step, sandbox.workdir / "step-tests")
            command, sealed = verifier_command(tests / "test.sh")
            view = layout.private("tests", tests, VERIFIER if sealed else None)
            own: Path | None = None
            if isinstance(layout, harbor.Layout):  # seen by the verifier alone
                own = _fresh(sandbox.workdir / "verifier-logs", sandbox.uid)
                view += ["--bind", str(own), "/logs/verifier"]
        except (OSError, ValueError, subprocess.SubprocessError) as e:  # shutil.Error too
            sandbox.kill_all()
            return None, {}, f"the tests could not be put in place ({str(e)[:300]})", none
        timeout = (step or {}).get("verifier_timeout_s") or verifier_timeout(task)
        env = dict(step["verifier_env"]) if step else verifier_env(task)
        # test.sh's shell becomes the command itself (`exec`); in a PID namespace of its own it
        # is pid 1 there: code of the agent's that it runs cannot kill or stop it (a PID
        # namespace's init gets no signal it did not ask for from inside); in the sandbox's,
        # such code may end it, and a verifier ended by a signal scores 0 (`_unfinished`)
        saved = (sandbox.join_net, sandbox.entrypoint, sandbox.share_pids)
        if holder is not None:  # the ENTRYPOINT's services run already, in the shell's network
            sandbox.join_net, sandbox.entrypoint = sandbox.join_net or holder, []
        sandbox.share_pids = True  # sees the agent's processes, unseen by them (root inside)
        try:
            result = sandbox.run(
                ["bash", "-c", command], timeout=timeout, env={**OLD_VERIFIER_ENV, **env}, view=view
            )
        finally:
            sandbox.join_net, sandbox.entrypoint, sandbox.share_pids = saved
        sandbox.kill_all()
        try:
            if isinstance(layout, harbor.Layout) and own is not None:  # kept with /logs
                logs = layout.fresh_dir("/logs/verifier")
                shutil.copytree(own, logs, symlinks=True, dirs_exist_ok=True)
                logs = own
            else:
                logs = layout.collect("/logs/verifier")
        except (OSError, ValueError) as e:
            return None, {}, f"/logs/verifier cannot be read ({str(e)[:300]})", none
        return self._verdict(logs, result, timeout)

    def _verdict(
        self, logs: Path, result: Any, timeout: float
    ) -> tuple[float | None, dict[str, float], str | None, dict[str, Any]]:
        """The reward of a verifier run that wrote `logs`, with its output's tail."""
        output = logs / "test-stdout.txt"
        tail = ""
        if output.is_file() and not output.is_symlink():
            with output.open("rb") as f:
                f.seek(max(0, output.stat().st_size - 2000))
                tail = f.read().decode("utf-8", "replace")
        verifier = {"returncode": result.returncode, "timed_out": result.timed_out, "output": tail}
        unfinished = _unfinished(result.returncode, result.timed_out, timeout)
        if unfinished is not None:  # what it wrote so far is not its verdict
            return None, {}, unfinished, verifier
        reward, named, error = read_reward(logs, self.reward_key)
        return reward, named, error, verifier

    def run_oracle(self) -> dict[str, Any]:
        """Run the task's `solution/solve.sh` as Harbor's oracle agent does: `solution/` copied
        to `/solution` (never for the policy), run in the episode's live shell (what it starts
        in the background keeps running for the verifier, as in Harbor's container), output
        to `/logs/agent/oracle.txt`, the `[agent]` time limit. Then `step("<submit/>")`
        grades. A multi-step task's oracle is its current step's `solution/solve.sh`."""
        sandbox, task, layout = self._sandbox, self._task, self._layout
        if sandbox is None or task is None or layout is None:
            raise RuntimeError("reset() first")
        steps = self._steps()
        step = steps[self._step] if steps else None
        solution = harbor_steps.solution_dir(Path(task.metadata["task_dir"]), step)
        if not (solution / "solve.sh").is_file():
            raise ValueError(f"task {task.id!r} has no solution/solve.sh")
        log = f"/logs/agent/oracle{'-' + step['name'] if step else ''}.txt"
        limit = (step or {}).get("agent_timeout_s") or agent_timeout(task) or 600.0
        view = layout.private("solution", solution)
        if isinstance(layout, harbor.Layout):
            return self._oracle_in_shell(view, log, limit, solution_env(task))
        command = f"chmod +x /solution/solve.sh; (/solution/solve.sh) > {log} 2>&1"
        result = sandbox.run(
            ["bash", "-c", command], timeout=limit, env=solution_env(task), view=view
        )
        return {"returncode": result.returncode, "timed_out": result.timed_out}

    def _oracle_in_shell(
        self, view: list[str], log: str, limit: float, env: dict[str, str]
    ) -> dict[str, Any]:
        """solve.sh run by a fresh episode shell that sees `/solution` (no agent turn came
        before it): its background services outlive it, in the shell's namespaces."""
        sandbox = self._sandbox
        assert sandbox is not None
        sandbox.kill_all()
        shown = sandbox.view
        sandbox.view = [*shown, *view]
        try:
            self._bash = self._start_bash(dataclasses.replace(self.limits, timeout_s=limit))
        finally:
            sandbox.view = shown
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
        out = self._bash.run(
            f"chmod +x /solution/solve.sh; ({exports}/solution/solve.sh) > {log} 2>&1"
        )
        status = re.search(r"\[exit code: (\d+)\]\s*$", out)
        return {
            "returncode": int(status.group(1)) if status else None,
            "timed_out": "time limit" in out and status is None,
        }

    def save_logs(self, dest: Path) -> None:
        """Copy the episode's `/logs` (the oracle's output in `agent/`, the verifier's stdout
        and reward files in `verifier/`) to `dest`, after grading and before the next reset.
        The files are the task's: only regular ones are copied, never through a link, each up
        to `MAX_LOG_BYTES`. A container backend keeps none here."""
        if not isinstance(self._layout, harbor.Layout):
            return
        logs = self._layout.collect("/logs")
        for folder, dirs, files in os.walk(logs):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            for name in files:
                source = Path(folder) / name
                try:
                    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:  # a link, a FIFO the task left: not a log
                    continue
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        continue
                    data = f.read(MAX_LOG_BYTES)
                target = dest / source.relative_to(logs)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)

    def close(self) -> None:
        """Kill every process of the episode and remove its work dir."""
        if self._sandbox is not None:
            self._sandbox.close()
        if self._sidecars is not None:
            self._sidecars.close()
        self._sandbox = self._bash = self._task = self._layout = self._sidecars = None


def _fresh(path: Path, uid: int | None) -> Path:
    """An empty folder at `path` (made anew), owned by the sandbox's uid."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    if uid is not None:
        os.chown(path, uid, uid)
    return path
