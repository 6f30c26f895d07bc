"""A persistent bash on a pty inside a `Sandbox`: what `skyrl/Shell-v0` and `skyrl/SWE-v0`
run the agent's commands in. One bash lives for the whole episode, so `cd`, variables and
functions persist between commands.

Protocol: a command travels as an ANSI-C quoted string (`$'...'`, printable ASCII only, in
lines short enough for the pty's canonical mode), runs through `eval` with stdin from
/dev/null, and a marker with `$?` follows it, on the same line: the marker is new for
every command, and bash has read the whole line before the command runs, so the command
cannot read it from the terminal, and one it saw traced (`set -x`, which ends with the
command) is stale. Output past `Limits.output_bytes` is
cut to its head and tail; a command past `timeout_s`, or one that floods the pty past
`FLOOD_BYTES`, is killed with every process it left behind while the shell itself survives
(it is restarted only if it does not answer, e.g. a `while true` loop in bash itself).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import select
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from environments.sandbox import Limits, Sandbox
from environments.spaces import ActionError
from environments.text_env import Tags

FLOOD_BYTES = 1024 * 1024
"""A command that prints more than this is stopped (its output was cut long before)."""
RECOVER_S = 2.0
"""After killing a command, how long the shell gets to report back before it is restarted."""
CHUNK = 3000  # characters per input line: under the pty's 4095-byte canonical line limit
SHELL_ENV = {"PS1": "", "PS2": "", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}
SHELL_ENV |= {"GIT_EDITOR": "true", "EDITOR": "true", "GIT_TERMINAL_PROMPT": "0"}
"""Environment of the agent's shell: no prompts, no pagers or editors waiting for a human."""
GRAMMAR = "Use <bash>command</bash> to run a shell command or <submit/> when the task is done."
TAGS = Tags("bash", "submit/")


def parse_action(text: str) -> str | None:
    """The command of the first `<bash>` tag, or None for `<submit/>`; ActionError if malformed."""
    tag, body = TAGS.parse(text, strip=False)
    if tag == "submit":
        return None
    if "\x00" in body:
        raise ActionError("the command contains a NUL character")
    return body


def intro(sandbox: Sandbox, limits: Limits, holds: str) -> str:
    """What the first observation says about the shell (the task's text comes before it)."""
    return (
        f"You are in a bash shell in {sandbox.inner_workdir}, which holds {holds}. "
        "Run one command per turn as <bash>command</bash>; you will see its output and exit "
        "code, and the directory and variables persist. Commands stop after "
        f"{limits.timeout_s:g} s and output is cut past {limits.output_bytes} bytes. "
        "When the task is done, reply <submit/> to have it checked. "
    )


def chown_tree(root: Path, uid: int | None) -> None:
    """Give everything under `root` to `uid` (the sandbox's user; None: leave it)."""
    if uid is None:
        return
    for folder, dirs, files in os.walk(root):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.lchown(name, uid, uid)


def open_sandbox(limits: Limits, files: Path | None, task_id: str) -> Sandbox:
    """A fresh sandbox whose work dir holds a copy of `files` (owned by the sandbox's user);
    ValueError, the sandbox closed, when they cannot be copied (most likely too large)."""
    sandbox = Sandbox(limits)
    if files is not None and files.is_dir():
        try:
            shutil.copytree(files, sandbox.workdir, symlinks=True, dirs_exist_ok=True)
        except OSError as e:  # shutil.Error too: most likely over Limits.disk_mb
            sandbox.close()
            raise ValueError(
                f"task {task_id!r}: environment/files could not be copied into the "
                f"sandbox (work dir capped at {limits.disk_mb} MB): {str(e)[:300]}"
            ) from None
        chown_tree(sandbox.workdir, sandbox.uid)
    return sandbox


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


class Bash:
    """The agent's bash in `sandbox`, started at once; `run` one command at a time."""

    def __init__(self, sandbox: Sandbox, limits: Limits) -> None:
        self._sandbox = sandbox
        self.limits = limits
        """`timeout_s` stops a command; `output_bytes` caps what it shows."""
        self._shell: Any = None  # pexpect.spawn of the agent's bash
        self._shell_nspid = 0  # the shell's pid as it sees itself ($$)
        self._marker = b""  # the current command's end marker (new for each command)
        self._marker_re = re.compile(b"(?!)")
        self._start_shell()

    @property
    def host_pid(self) -> int | None:
        """The host pid of the shell's wrapper chain (bwrap's outer process), or None when
        the shell is gone."""
        return self._shell.pid if self._shell is not None and self._shell.isalive() else None

    def _start_shell(self) -> None:
        shell = self._sandbox.pexpect_spawn(
            ["bash", "--norc", "--noprofile", "--noediting", "-i"],
            env=SHELL_ENV,
            echo=False,
            encoding=None,
            dimensions=(50, 200),
        )
        shell.delaybeforesend = None
        self._shell = shell
        self._send(["stty -onlcr -echo 2>/dev/null; set +o history +H; unset HISTFILE"])
        said = _Output(4096)
        status, timed_out, _ = self._collect(time.monotonic() + 30, said)
        if status is None:  # what the sandbox printed on its way out is the cause (bwrap's error)
            text = " ".join(said.text().split())
            why = (
                f"it printed: {text[-300:]}"
                if text
                else "no answer in 30 s"
                if timed_out
                else "it exited without a word"
            )
            raise RuntimeError(f"the sandboxed bash did not start ({why})")
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

    def run(self, command: str) -> str:
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
                note = f"[the command was {why}; the shell was restarted in {self._sandbox.inner_workdir} (variables and cd were reset)]"
            else:
                note = f"[the command was {why}; it and every process it started were killed]"
        elif status is None:
            self._restart()
            note = f"[the shell exited; a new shell was started in {self._sandbox.inner_workdir}]"
        text = out.text()
        if text and not text.endswith("\n"):
            text += "\n"
        if status is not None and not note:
            note = f"[exit code: {status}]"
        return text + note

    def _restart(self) -> None:
        """Kill everything the agent runs and start a fresh shell in the work dir."""
        self._sandbox.kill_all()
        self._start_shell()

    def _kill_strays(self) -> int | None:
        """SIGKILL every process of the episode but the shell (and its ancestors, the
        sandbox wrappers): a timed-out command, its children, whatever it left running.
        The number of processes killed; None when the shell itself is gone."""
        root, uid = self._shell.pid, self._sandbox.uid
        # in the sandbox's PID namespace the shell's own namespace hangs below its init, not
        # below the wrapper (`Sandbox.command_roots`); the holder of that namespace stays
        roots: list[int] = getattr(self._sandbox, "command_roots", lambda pid: [])(root)
        held: set[int] = getattr(self._sandbox, "holder_pids", set)()
        killed = 0
        for _ in range(50):
            table = _proc_table()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            tree, todo = set(), [root, *roots]
            while todo:
                pid = todo.pop()
                if pid in table:
                    tree.add(pid)
                    todo += children.get(pid, [])
            shell = [p for p in tree if table[p][2] == self._shell_nspid]
            if len(shell) != 1:
                return None
            keep, pid = {root, *held}, shell[0]
            while pid in tree:
                keep.add(pid)
                pid = table[pid][0]
            victims = {p for p in tree if p not in keep}
            if uid is not None:
                owns = self._sandbox.owns
                victims |= {p for p, (_, u, _) in table.items() if owns(u) and p not in keep}
            if not victims:
                return killed
            killed += len(victims)
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        return killed
