"""Progress on the terminal, from the first second of `skyrl train` to its last step.

In a terminal: one live line (Rich) that says what is starting (a spinner and the phase:
the trainer, Ray, the model workers), then each evaluation's bar and the training bar, each
with one ETA, ours; notes print above it. Not a terminal (a pipe, a log file): plain lines,
one per phase, evaluation batch and step, and nothing else. A stop (Ctrl-C, an error)
closes the live line first (`close_live`), so what is printed next, and the shell prompt,
land below it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column
from rich.text import Text

BAR_WIDTH = 40
"""The bar's width where the terminal has room; narrower terminals get a shorter bar."""
BAR_MIN = 10
"""Below this the bar keeps its width and the numbers next to it are cut instead."""


class _Elapsed(TimeElapsedColumn):
    """Time so far, left out (`hidden`) where the terminal is too narrow for it."""

    hidden = False

    def render(self, task: Task) -> Text:
        return Text("") if self.hidden else super().render(task)


class _Screen:
    """The one live line of this process; its text and bar change with what runs."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Progress | None = None
        self.mode = ""  # "phase", "eval" or "train"
        self.train_fields: dict[str, Any] | None = None  # where a paused training bar was
        self.bar = BarColumn(bar_width=BAR_WIDTH)
        self.elapsed = _Elapsed()
        self.description = ""

    def _fit(self, fields: dict[str, Any]) -> dict[str, Any]:
        """One line, however narrow the terminal: the bar shrinks, then the elapsed time goes,
        then the numbers (`info`) are cut with an ellipsis; the count and ETA stay whole."""
        info = str(fields.get("info", ""))
        cells = (self.description, fields.get("count", ""), fields.get("eta", ""))
        # seven columns (the spinner is one cell), six gaps, one spare cell at the edge
        avail = self.console.width - 1 - 7 - sum(len(str(c)) for c in cells)
        elapsed = 7  # "0:00:00"
        bar = min(BAR_WIDTH, avail - len(info) - elapsed)
        self.elapsed.hidden = bar < BAR_MIN
        if self.elapsed.hidden:
            elapsed = 0
            bar = min(BAR_WIDTH, avail - len(info))
        bar = max(bar, min(BAR_MIN, avail))
        left = avail - bar - elapsed
        if len(info) > left:
            info = info[: left - 1] + "…" if left > 3 else ""
        self.bar.bar_width = bar
        return fields | {"info": info}

    def show(
        self, mode: str, description: str, total: float | None, done: int, **fields: Any
    ) -> None:
        self.description = description
        fields = self._fit(_blank(fields))
        if self.live is None:
            one_line = Column(no_wrap=True, overflow="ellipsis")
            self.live = Progress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}", table_column=one_line),
                self.bar,
                TextColumn("{task.fields[count]}", table_column=one_line),
                TextColumn("{task.fields[info]}", table_column=one_line),
                self.elapsed,
                TextColumn("{task.fields[eta]}", table_column=one_line),
                console=self.console,
            )
            self.task = self.live.add_task(description, total=total, completed=done, **fields)
            self.live.start()
        else:
            self.live.reset(
                self.task, total=total, completed=done, description=description, **fields
            )
        self.mode = mode

    def update(self, done: int, **fields: Any) -> None:
        if self.live is not None:
            current = self.live.tasks[0].fields
            self.live.update(self.task, completed=done, **self._fit(current | fields))

    def print(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def stop(self) -> None:
        """Stop the live line; a spinner (a phase) is erased, a bar stays as it last was."""
        if self.live is not None:
            self.live.live.transient = self.mode == "phase"
            self.live.stop()
            self.live = None
            self.mode = ""


def _blank(fields: dict[str, Any]) -> dict[str, Any]:
    return {"count": "", "info": "", "eta": ""} | fields


_screen: _Screen | None = None


def _get_screen() -> _Screen:
    global _screen
    if _screen is None:
        color = None if os.environ.get("NO_COLOR") else "auto"
        _screen = _Screen(Console(stderr=True, color_system=color))  # type: ignore[arg-type]
    return _screen


def phase(text: str, *, plain: bool = True) -> None:
    """Say what is starting now. In a terminal a spinner shows it until the next phase, bar
    or stop; elsewhere one plain line, unless `plain` is False (checks that may still end
    in a one-sentence error)."""
    screen = _get_screen()
    if screen.console.is_terminal:
        screen.show("phase", text + " ...", None, 0)
    elif plain:
        print(f"{text} ...", file=sys.stderr, flush=True)


def close_live() -> None:
    """Stop the live line now (before a stop or error message); safe to call at any time."""
    if _screen is not None:
        _screen.stop()


class StepProgress:
    """Notes go out at once; the training bar appears when `start` says where the run resumes."""

    def __init__(self, total: int, console: Console | None = None) -> None:
        global _screen
        if console is not None:
            _screen = _Screen(console)
        self.screen = _get_screen()
        self.console = self.screen.console
        self.total = total
        self.live = self.console.is_terminal

    # ------------------------------------------------------------ training
    def start(self, done: int) -> None:
        self.screen.train_fields = {"done": done, "info": "", "eta": ""}
        if self.live:
            self._show_train()

    def _show_train(self) -> None:
        f = self.screen.train_fields or {"done": 0, "info": "", "eta": ""}
        count = f"{f['done']}/{self.total}"
        self.screen.show(
            "train", "train", self.total, f["done"], count=count, info=f["info"], eta=f["eta"]
        )

    def step(self, step: int, m: dict[str, Any], eta_s: float | None) -> None:
        info = (
            f"reward {m['reward/mean']:+.3f} acc {m['reward/accuracy']:.2f} "
            f"loss {m['loss']:+.4f} {m['perf/episodes_per_s']:.2f} ep/s {m['perf/tokens_per_s']:.0f} tok/s"
        )
        eta = f"ETA {_fmt(eta_s)}" if eta_s is not None else ""
        self.screen.train_fields = {"done": step, "info": info, "eta": eta}
        if self.live:  # one live line: the step's numbers are in the bar, not printed under it
            if self.screen.mode != "train":
                self._show_train()
            self.screen.update(step, count=f"{step}/{self.total}", info=info, eta=eta)
        else:
            line = f"step {step}/{self.total} {info} ({m['time/step']:.1f}s)"
            print(line + (f" {eta}" if eta else ""), file=sys.stderr, flush=True)

    # ---------------------------------------------------------- evaluation
    def eval_bar(self, total: int, label: str) -> _EvalBar:
        """A bar over `total` episodes (call it with each batch's size); `done()` ends it."""
        return _EvalBar(self, total, label)

    # ----------------------------------------------------------------- text
    def note(self, text: str) -> None:
        if self.live and self.screen.live is not None:
            self.screen.print(text)  # above the live line
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.screen.train_fields = None
        self.screen.stop()


class _EvalBar:
    """Episodes done of an evaluation, with an ETA from the pace so far."""

    def __init__(self, progress: StepProgress, total: int, label: str) -> None:
        self.progress, self.total, self.label = progress, total, label
        self.n, self.t0 = 0, time.perf_counter()
        if progress.live:
            progress.screen.show("eval", f"eval {label}", total, 0, count=f"0/{total}")

    def __call__(self, n: int) -> None:
        self.n += n
        spent = time.perf_counter() - self.t0
        eta = f"ETA {_fmt(spent / self.n * (self.total - self.n))}"
        if self.progress.live:
            self.progress.screen.update(self.n, count=f"{self.n}/{self.total}", eta=eta)
        else:
            line = f"eval {self.label} {self.n}/{self.total} episodes ({spent:.0f}s, {eta})"
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        """Back to the training bar if one was showing; else the live line ends here."""
        if not self.progress.live:
            return
        if self.progress.screen.train_fields is not None:
            self.progress._show_train()
        else:
            self.progress.screen.stop()


def _fmt(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def has_terminal() -> bool:
    """stdin, stdout and stderr are all a terminal: a full-screen UI can run here."""
    return all(f.isatty() for f in (sys.stdin, sys.stdout, sys.stderr))
