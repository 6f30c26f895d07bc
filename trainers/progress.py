"""Step progress for the terminal: a live bar with ETA on a TTY, plain lines elsewhere."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class StepProgress:
    """Notes go out at once; the bar appears when `start` says where the run resumes."""

    def __init__(self, total: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.total = total
        self.bar: Progress | None = None

    def start(self, done: int) -> None:
        if not self.console.is_terminal:
            return
        self.bar = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.task = self.bar.add_task("train", total=self.total, completed=done, info="")
        self.bar.start()

    def step(self, step: int, m: dict[str, Any], eta_s: float | None) -> None:
        info = (
            f"reward {m['reward/mean']:+.3f} acc {m['reward/accuracy']:.2f} "
            f"loss {m['loss']:+.4f} {m['perf/episodes_per_s']:.2f} ep/s {m['perf/tokens_per_s']:.0f} tok/s"
        )
        eta = f" ETA {_fmt(eta_s)}" if eta_s is not None else ""
        line = f"step {step}/{self.total} {info} ({m['time/step']:.1f}s){eta}"
        if self.bar is not None:
            self.bar.update(self.task, completed=step, info=info)
            self.bar.console.print(line, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _fmt(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
