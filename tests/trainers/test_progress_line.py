"""The live line stays one line in any terminal width (issue 13, item 7): in 80 columns, the
commonest default, the training bar's numbers used to wrap onto a second line that each
redraw left behind. The count and our ETA stay whole; the bar, the elapsed time and then the
numbers give way, in that order."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from trainers.progress import StepProgress

METRICS = {
    "reward/mean": -0.1,
    "reward/accuracy": 0.0,
    "loss": 0.0,
    "perf/episodes_per_s": 38.49,
    "perf/tokens_per_s": 1949.0,
    "time/step": 0.2,
}


def _rendered(progress: StepProgress) -> list[str]:
    live = progress.screen.live
    assert live is not None
    console = progress.console
    table = live.make_tasks_table(live.tasks)
    return ["".join(seg.text for seg in line) for line in console.render_lines(table)]


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 160, 220])
def test_the_training_line_fits_the_terminal_and_ends_with_the_eta(width: int) -> None:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    progress = StepProgress(200, console=console)
    try:
        progress.start(0)
        progress.step(3, METRICS, 43.0)
        (line,) = [ln.rstrip() for ln in _rendered(progress)]  # one line, not two
        assert len(line) < width, line
        assert line.endswith("ETA 0m43s") and " 3/200 " in line, line
        if width >= 160:  # room for everything: the whole bar and all the numbers
            assert "1949 tok/s" in line and "0:00:" in line, line
        if width <= 80:
            assert "tok/s" not in line, line  # the numbers were cut to fit
        # an evaluation batch on the same line fits as well
        bar = progress.eval_bar(100, "dev")
        bar(10)
        (line,) = [ln.rstrip() for ln in _rendered(progress)]
        assert len(line) < width and "10/100" in line and "ETA" in line, line
    finally:
        progress.close()
