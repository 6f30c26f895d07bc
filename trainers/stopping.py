"""Stopping a training process: SIGINT, SIGTERM and SIGHUP, at any phase.

Inside the training loop the first signal finishes the step and checkpoints it (the loop
sets `graceful`); anywhere else (setup, evaluation, warm-up), and on a second signal, the
process stops at once. Either way the caller records the state and calls `end_processes`,
which shuts Ray down (the private cluster with it) and ends every process this one started
(Ray workers, sandboxes) with a bounded wait. Ray's `ray.init` replaces the SIGTERM handler
with `sys.exit`, which ends the interpreter under Ray's threads (a C++ abort); `install`
runs again after it.

Light on purpose: the CLI imports this before anything heavy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stop:
    """What the signal handlers saw; the loop polls `is_set()` between steps."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None
        """The first stop signal received."""
        self.graceful = False
        """True while a first signal should only finish the current step (the training loop)."""
        self.note: Callable[[str], None] = lambda text: None
        """Where a graceful stop says what it does (the progress line)."""

    def is_set(self) -> bool:
        return self._event.is_set()

    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process that a signal ended."""
        return 128 + (self.signum or signal.SIGINT)

    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name

    def _handle(self, signum: int, frame: Any) -> None:
        first = not self._event.is_set()
        if first:
            self.signum = signum
            self._event.set()
        if first and self.graceful:
            self.note("stopping after this step (Ctrl-C again to stop at once)...")
            return
        raise KeyboardInterrupt


STOP = Stop()


def install(note: Callable[[str], None] | None = None) -> Stop:
    """(Re)install the stop handlers in the main thread; returns the process's Stop."""
    if note is not None:
        STOP.note = note
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, STOP._handle)
    return STOP


def uninstall() -> None:
    """The default handlers again (a process that hands the run to another one)."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(
                signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            )


def mark_signal(signum: int) -> None:
    """Record a stop that reached us another way (Ray's SIGTERM handler's SystemExit)."""
    if STOP.signum is None:
        STOP.signum = signum
        STOP._event.set()


# -- ending the run's processes ----------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, state) of every process we can read."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
        table[int(entry)] = (int(fields[1]), fields[19], fields[0])
    return table


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root`: pid -> start time (to tell a reused pid)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = table[pid][1]
            todo += children.get(pid, [])
    return out


def _alive(procs: dict[int, str]) -> dict[int, str]:
    table = _proc_table()
    live = {}
    for pid, start in procs.items():
        if pid in table and table[pid][1] == start and table[pid][2] != "Z":
            live[pid] = start
        elif pid in table:  # our own zombie child: reap it
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
    return live


def _signal_all(procs: dict[int, str], signum: int) -> None:
    for pid in _alive(procs):
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def _wait_gone(procs: dict[int, str], seconds: float) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    live = _alive(procs)
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        live = _alive(live)
    return live


def end_processes(grace_s: float = 3.0) -> None:
    """Shut Ray down (a private cluster stops; a joined one ends this job's workers) and
    end every process this one started: SIGTERM, `grace_s` to exit, then SIGKILL."""
    if sys.platform != "linux":  # the process walk reads /proc
        grace_s = 0.0
    me = os.getpid()
    procs = descendants(me) if sys.platform == "linux" else {}
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        watchdog = threading.Timer(20.0, lambda: _signal_all(procs, signal.SIGKILL))
        watchdog.daemon = True
        watchdog.start()
        placement = sys.modules.get("trainers.placement")
        if placement is not None:  # warm workers this run took outlive it: end them too
            with contextlib.suppress(Exception):
                placement.end_warm()
        with contextlib.suppress(Exception):
            ray.shutdown()
        watchdog.cancel()
    if sys.platform == "linux":
        procs.update(descendants(me))
        _signal_all(procs, signal.SIGTERM)
        left = _wait_gone(procs, grace_s)
        _signal_all(left, signal.SIGKILL)
        _wait_gone(left, 2.0)
