"""The persistent Python REPL of `skyrl/Python-v0`: both ends of its protocol.

Host side: `PythonRepl` starts the driver in a `Sandbox` and runs cells (`execute`).
Sandbox side: `main()`, run as `python3 -E -c SOURCE RESP_FD OUTPUT_CAP`. The whole file is
passed with `-c` (the project's files are not visible inside the sandbox) to whatever
Python the sandbox has, so it uses the standard library only and runs on Python 3.8+.

Protocol (one request at a time):

- request, on stdin: a 4-byte big-endian length, then that many bytes of UTF-8 code;
- response, on fd RESP_FD: a 4-byte big-endian length, then a JSON object
  `{"value": repr of the last expression or null, "error": traceback or null,
  "truncated": bool}`; one `{"ready": true}` is sent at start.

Program output (`print`, warnings, subprocesses) goes to fd 1 and 2, a pipe the host reads
while the code runs. `sys.stdout` and `sys.stderr` stop writing after OUTPUT_CAP bytes per
request (the rest is dropped here, so a loop printing a gigabyte costs no pipe traffic).
The protocol fds are moved away from 0 and marked close-on-exec, and stdin is /dev/null,
so neither user code nor its subprocesses read requests by accident.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import fcntl
import io
import json
import linecache
import os
import selectors
import struct
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from environments.sandbox import Sandbox


class _Budget:
    """Bytes of output this request may still write (shared by stdout and stderr)."""

    def __init__(self, left: int) -> None:
        self.left = left
        self.truncated = False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _CappedBinary(io.RawIOBase):
    """`sys.stdout.buffer`: bytes straight to the fd, within the budget."""

    def __init__(self, fd: int, budget: _Budget) -> None:
        self._fd, self._budget = fd, budget

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        room = self._budget.left
        if room > 0:
            _write_all(self._fd, data[:room])
            self._budget.left -= min(room, len(data))
        if len(data) > room:
            self._budget.truncated = True
        return len(data)


class _CappedText(io.TextIOBase):
    """`sys.stdout` / `sys.stderr`: UTF-8 text to the fd until the budget is spent."""

    def __init__(self, fd: int, budget: _Budget) -> None:
        self._fd = fd
        self._raw = _CappedBinary(fd, budget)

    @property
    def buffer(self) -> _CappedBinary:  # type: ignore[override]
        return self._raw

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, s: Any) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        room = self._raw._budget.left
        if room <= 0:  # spent: do not even encode (a print loop of a gigabyte stays cheap)
            self._raw._budget.truncated = self._raw._budget.truncated or bool(s)
            return len(s)
        data = s[: room + 1].encode("utf-8", "backslashreplace")  # >= 1 byte a character
        self._raw.write(data)
        if len(s) > room + 1:
            self._raw._budget.truncated = True
        return len(s)


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        data = os.read(fd, min(left, 1 << 20))
        if not data:
            return None
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def _send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    _write_all(fd, struct.pack(">I", len(data)) + data)


def run_cell(code: str, namespace: dict[str, Any], name: str, cap: int) -> tuple[Any, Any]:
    """Execute `code` like a notebook cell: (repr of its last expression or None, error)."""
    try:
        tree = ast.parse(code, name, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return None, "".join(traceback.format_exception_only(type(e), e))
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)  # type: ignore[attr-defined]
    try:
        exec(compile(tree, name, "exec"), namespace)
        if last is None:
            return None, None
        value = eval(compile(last, name, "eval"), namespace)
        if value is None:
            return None, None
        namespace["_"] = value
        text = repr(value)
        if len(text) > cap:
            text = f"{text[:cap]}... ({len(text) - cap} more characters)"
        return text, None
    except BaseException as e:  # SystemExit and KeyboardInterrupt are errors of the cell too
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        parts = traceback.format_exception(type(e), e, tb)  # a huge message stays here
        return None, _clip("".join(_clip(part, TRACEBACK_PART_CHARS) for part in parts), cap)


TRACEBACK_PART_CHARS = 1000
"""Longest piece of a traceback (a frame, the exception's line) kept whole."""


def _clip(text: str, cap: int) -> str:
    """At most about `cap` characters of `text`: its head and tail (a traceback's last line
    names the exception)."""
    if len(text) <= cap:
        return text
    half = max(1, cap // 2)
    return f"{text[:half]}\n... ({len(text) - 2 * half} characters clipped) ...\n{text[-half:]}"


# ---------------------------------------------------------------------------- host side
# (defined inside the sandbox too, where it is unused: the file travels whole)

START_TIMEOUT_S = 20.0
"""Time a new REPL gets to say it is ready (bwrap + interpreter start take ~30 ms)."""


def max_response_bytes(output_bytes: int) -> int:
    """The largest response the host reads: a value and an error of `output_bytes` characters
    each, JSON-escaped (up to 12 bytes a character). A longer header ends the REPL unread."""
    return 24 * output_bytes + 4096


def driver_source() -> str:
    """This file's text, what the sandboxed interpreter runs with `-c`."""
    with open(__file__, encoding="utf-8") as f:
        return f.read()


@dataclass(frozen=True)
class ReplReply:
    """What one cell produced."""

    output: str
    """stdout and stderr of the cell and its subprocesses, in order, capped."""
    value: str | None
    """repr of the last expression's value (None when it is None or not an expression)."""
    error: str | None
    """Traceback of an exception the cell raised, or what went wrong with the REPL."""
    truncated: bool
    """Output went past `Limits.output_bytes`; the rest was dropped."""
    status: Literal["ok", "timeout", "crashed"]
    """`ok`, or the REPL was killed (timeout) or died (crashed); then its state is gone."""


class PythonRepl:
    """A persistent Python process inside a sandbox, driven by `python_repl.py`."""

    def __init__(self, sandbox: Sandbox, python: str, output_bytes: int) -> None:
        self.sandbox = sandbox
        self.python = python
        self.output_bytes = output_bytes
        self._proc: subprocess.Popen | None = None
        self._resp_fd = -1
        self._oom_kills = 0

    @property
    def alive(self) -> bool:
        """True while the REPL process runs."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the process and wait for its ready message; RuntimeError if it fails."""
        self.stop()
        read_fd, write_fd = os.pipe()
        try:
            self._proc = self.sandbox.popen(
                [self.python, "-E", "-c", driver_source(), str(write_fd), str(self.output_bytes)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                bufsize=0,
            )
        finally:
            os.close(write_fd)
        self._resp_fd = read_fd
        assert self._proc.stdout is not None and self._proc.stdin is not None
        with contextlib.suppress(OSError):  # a bigger pipe: fewer wake-ups for chatty code
            fcntl.fcntl(self._proc.stdout.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
        os.set_blocking(self._proc.stdout.fileno(), False)
        os.set_blocking(self._proc.stdin.fileno(), False)
        reply = self._exchange(None, START_TIMEOUT_S)
        if reply.status != "ok":
            self.stop()
            raise RuntimeError(f"the sandboxed Python did not start: {reply.error}")

    def execute(self, code: str, timeout: float) -> ReplReply:
        """Run one cell; a timeout or crash kills the REPL (start() makes a new one)."""
        if not self.alive:
            self.start()
        data = code.encode("utf-8", "replace")
        reply = self._exchange(struct.pack(">I", len(data)) + data, timeout)
        if reply.status != "ok":
            self.stop()
        return reply

    def _exchange(self, request: bytes | None, timeout: float) -> ReplReply:
        """Send `request`, collect output until the response arrives, the REPL dies or time runs out."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        out, resp, dropped = bytearray(), bytearray(), 0

        def keep(
            data: bytes,
        ) -> None:  # the first `output_bytes` of the output, a count of the rest
            nonlocal dropped
            room = max(0, self.output_bytes - len(out))
            out.extend(data[:room])
            dropped += max(0, len(data) - room)

        pending = memoryview(request or b"")
        self._oom_kills = self.sandbox.oom_kills()
        deadline = time.monotonic() + timeout
        status: Literal["ok", "timeout", "crashed"] = "crashed"
        limit, oversized = max_response_bytes(self.output_bytes), 0
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, "out")
            sel.register(self._resp_fd, selectors.EVENT_READ, "resp")
            if pending:
                sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
            done = False
            while not done:
                left = deadline - time.monotonic()
                if left <= 0:
                    status = "timeout"
                    break
                for key, _ in sel.select(left):
                    try:
                        if key.data == "in":
                            pending = pending[os.write(proc.stdin.fileno(), pending[: 1 << 20]) :]
                            if not pending:
                                sel.unregister(proc.stdin)
                            continue
                        data = os.read(key.fd, 1 << 20)
                    except BlockingIOError:
                        continue
                    except OSError:  # broken pipe: the REPL is gone
                        done = True
                        break
                    if not data:
                        sel.unregister(key.fileobj)
                        done = done or key.data == "resp"  # EOF on output alone: wait on
                        continue
                    if key.data == "out":
                        keep(data)
                        continue
                    resp += data
                    size = struct.unpack(">I", resp[:4])[0] if len(resp) >= 4 else 0
                    if size > limit or len(resp) > 4 + limit:  # forged by the cell: stop here
                        oversized, done = max(size, len(resp) - 4), True
                        break
                    if len(resp) >= 4 and len(resp) >= 4 + size:
                        status, done = "ok", True
        with contextlib.suppress(BlockingIOError, OSError):  # what the cell printed last
            while len(chunk := os.read(proc.stdout.fileno(), 1 << 20)):
                keep(chunk)
        output = bytes(out).decode("utf-8", "replace")
        if status == "timeout":
            return ReplReply(output, None, None, dropped > 0, "timeout")
        if oversized:
            error = (
                f"the REPL sent a {oversized}-byte response, over the {limit}-byte limit "
                "(the cell wrote to the REPL's own pipe)"
            )
            return ReplReply(output, None, error, True, "crashed")
        if status == "crashed":
            code = proc.poll()
            if code is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = proc.wait(timeout=0.5)
            # bwrap reports a child killed by signal N as exit status 128 + N
            signum = -code if code and code < 0 else code - 128 if code and code > 128 else 0
            how = f"killed by signal {signum}" if signum else f"exit status {code}"
            if signum == 9 and self.sandbox.oom_kills() > self._oom_kills:
                how += f": the sandbox ran out of its {self.sandbox.limits.memory_mb} MB of memory"
            return ReplReply(
                output, None, f"the Python process died ({how})", dropped > 0, "crashed"
            )
        try:
            message = json.loads(resp[4:].decode("utf-8", "replace"))
        except ValueError:
            return ReplReply(output, None, "the REPL sent garbage", True, "crashed")
        return ReplReply(
            output=output,
            value=message.get("value"),
            error=message.get("error"),
            truncated=dropped > 0 or bool(message.get("truncated")),
            status="ok",
        )

    def stop(self) -> None:
        """Kill the REPL and every process of the sandbox."""
        if self._proc is not None:
            self.sandbox.kill_all()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self._proc = None
        if self._resp_fd >= 0:
            os.close(self._resp_fd)
            self._resp_fd = -1


# ---------------------------------------------------------------------------- sandbox side


def main() -> None:
    resp_fd, cap = int(sys.argv[1]), int(sys.argv[2])
    req_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(resp_fd, False)
    # copies of stdin (/dev/null), stdout and stderr, put back before every cell: a cell
    # that closes or redirects them does not break the next one
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    for fd in saved:
        os.set_inheritable(fd, False)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    sys.argv = [""]
    me = os.getpid()
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    _send(resp_fd, {"ready": True})
    cell = 0
    while True:
        header = _read_exact(req_fd, 4)
        body = _read_exact(req_fd, struct.unpack(">I", header)[0]) if header else None
        if body is None:
            return
        cell += 1
        for fd, copy in enumerate(saved):
            os.dup2(copy, fd)
        budget = _Budget(cap)
        sys.stdout, sys.stderr = _CappedText(1, budget), _CappedText(2, budget)
        try:
            value, error = run_cell(
                body.decode("utf-8", "replace"), namespace, f"<cell {cell}>", cap
            )
        except BaseException as e:  # formatting the traceback itself failed (MemoryError...)
            value, error = None, f"{type(e).__name__} while reporting the cell's result\n"
        if os.getpid() != me:  # a fork of the REPL returned from the cell: it must not answer
            os._exit(0)
        try:
            _send(resp_fd, {"value": value, "error": error, "truncated": budget.truncated})
        except (TypeError, ValueError, MemoryError):
            _send(resp_fd, {"value": None, "error": "(unreportable result)\n", "truncated": True})


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # the protocol broke (a cell closed its fds): exit without a word
        os._exit(70)
