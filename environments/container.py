"""`skyrl/Shell-v0` with `backend=docker|podman`: a Harbor task in its real image.

Where a container runtime works, the task's `environment/` is built as Harbor builds it
(`<runtime> build`, tagged by the image digest of `environments.harbor`) and started as
Harbor starts it (the image's ENTRYPOINT, command `sleep infinity`, no network); the
agent's persistent bash (`environments.bash.Bash`) runs through `<runtime> exec`, in the
image's WORKDIR. `/tests` is copied in only for the verifier and `/solution` only for
the oracle, as Harbor does; the reward files are copied out and read by `read_reward`.

`Container` offers what `Bash` and `ShellEnv` use of a `Sandbox`: `pexpect_spawn`, `run`,
`kill_all`, `close`, `inner_workdir`, `limits`. A command past its time limit restarts the
shell (the container's processes are not our children, so they cannot be picked out).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from environments import harbor
from environments.sandbox import Limits, Result

__all__ = ["RUNTIMES", "Container", "runtime_problem"]

RUNTIMES = ("docker", "podman")


def runtime_problem(runtime: str) -> str | None:
    """None when `runtime` can run containers here, else why not (one sentence)."""
    if runtime not in RUNTIMES:
        return f"unknown backend {runtime!r}; known: bwrap, {', '.join(RUNTIMES)}"
    if shutil.which(runtime) is None:
        return f"backend={runtime}: {runtime} is not installed"
    try:
        info = subprocess.run([runtime, "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"backend={runtime}: `{runtime} info` failed ({e})"
    if info.returncode != 0:
        lines = (info.stderr.strip() or info.stdout.strip()).splitlines() or ["no output"]
        return f"backend={runtime}: `{runtime} info` failed: {lines[-1][:200]}"
    return None


class Container:
    """One episode's container of a Harbor task's image."""

    uid = None
    backend = "container"

    def __init__(self, runtime: str, task_dir: Path, limits: Limits) -> None:
        self.runtime, self.limits = runtime, limits
        self.workdir = Path(tempfile.mkdtemp(prefix="skyrl-container-"))
        tag = f"skyrl-harbor-{task_dir.name.lower()}:{secrets.token_hex(4)}"
        context, dockerfile = harbor.main_build(task_dir)  # the compose file's, if it builds main
        named = ["-f", str(dockerfile)] if dockerfile else []
        built = subprocess.run(
            [runtime, "build", "-q", "-t", tag, *named, str(context)],
            capture_output=True, text=True, timeout=3600,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        if built.returncode != 0:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise ValueError(f"{runtime} build of {task_dir.name} failed: {built.stderr[-300:]}")
        inspect = subprocess.run(
            [runtime, "image", "inspect", "-f", "{{.Config.WorkingDir}}", tag],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        self.inner_workdir = inspect.stdout.strip() or "/"
        self.name = f"skyrl-{secrets.token_hex(6)}"
        started = subprocess.run(
            [runtime, "run", "-d", "--name", self.name, "--network", "none",
             f"--memory={limits.memory_mb}m", f"--pids-limit={limits.processes}",
             tag, "sh", "-c", "sleep infinity"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip # the command line reads as typed
        if started.returncode != 0:
            self.close()
            raise ValueError(f"{runtime} run of {task_dir.name} failed: {started.stderr[-300:]}")
        self.run(["mkdir", "-p", "/logs/agent", "/logs/verifier"])

    def _exec(self, env: dict[str, str] | None, cwd: str | None, tty: bool) -> list[str]:
        cmd = [self.runtime, "exec", "-i", *(["-t"] if tty else [])]
        cmd += ["-w", cwd or self.inner_workdir]
        for key, value in (env or {}).items():
            cmd += ["-e", f"{key}={value}"]
        return [*cmd, self.name]

    def pexpect_spawn(self, argv: list[str], **kwargs: Any) -> Any:
        import pexpect

        cmd = [*self._exec(kwargs.pop("env", None), kwargs.pop("cwd", None), True), *argv]
        kwargs.setdefault("encoding", "utf-8")
        return pexpect.spawn(cmd[0], cmd[1:], **kwargs)

    def run(self, argv: list[str], *, timeout: float | None = None, **how: Any) -> Result:
        """As `Sandbox.run` (`input`, `cwd`, `env`; a `view` has no meaning here)."""
        cmd = [*self._exec(how.get("env"), how.get("cwd"), False), *argv]
        input = how.get("input")
        limit = self.limits.timeout_s if timeout is None else timeout
        try:
            done = subprocess.run(cmd, input=input, capture_output=True, timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill_all()
            return Result(None, "", "", timed_out=True, truncated=False)
        cap = self.limits.output_bytes
        out, err = done.stdout[:cap], done.stderr[: max(0, cap - len(done.stdout))]
        return Result(
            done.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            timed_out=False,
            truncated=len(done.stdout) + len(done.stderr) > cap,
        )

    def copy_in(self, source: Path, inner: str) -> None:
        """`source` (a folder) at `inner`, replacing what was there."""
        self.run(["rm", "-rf", inner])
        subprocess.run(
            [self.runtime, "cp", str(source), f"{self.name}:{inner}"],
            capture_output=True, check=True, timeout=300,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them

    def copy_out(self, inner: str) -> Path:
        """A host copy of the container's `inner` folder (links stay links)."""
        dest = self.workdir / secrets.token_hex(4)
        subprocess.run(
            [self.runtime, "cp", f"{self.name}:{inner}", str(dest)],
            capture_output=True, timeout=300, check=False,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        return dest

    def fresh_dir(self, inner: str) -> None:
        """The folder made anew, empty, before the verifier runs (nothing the agent left)."""
        self.run(["sh", "-c", f"rm -rf {inner} && mkdir -p {inner}"])

    def private(self, name: str, source: Path, sealed: str | None = None) -> list[str]:
        """`source` copied to `/name` (tests/, solution/); Harbor's upload (`sealed` has no
        meaning here: the container's verifier runs as root, as in Harbor)."""
        self.copy_in(source, f"/{name}")
        return []

    def collect(self, inner: str) -> Path:
        return self.copy_out(inner)

    def kill_all(self) -> None:
        """Every process of the container but its init (the ENTRYPOINT's `sleep infinity`)."""
        subprocess.run(
            [self.runtime, "exec", self.name, "sh", "-c", "kill -9 -1"],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them

    def grow_disk(self, extra_mb: int) -> None:
        """Nothing to grow: the container's disk is the runtime's."""

    def close(self) -> None:
        subprocess.run(
            [self.runtime, "rm", "-f", getattr(self, "name", "-")],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        shutil.rmtree(self.workdir, ignore_errors=True)
