"""Issue 13, items 2 and 5: the step-health rules, on hand-made trajectories."""

from __future__ import annotations

import pytest

from agents.trajectory import Trajectory
from trainers.steps import EpisodesFailed, check_failures, no_signal_warning


def _trajs(errors: list[str | None]) -> list[Trajectory]:
    return [Trajectory(task_id=f"t{i}", group_id=i, error=e) for i, e in enumerate(errors)]


def test_every_failed_episode_stops_and_a_fraction_warns():
    assert check_failures(_trajs([None, None]), 1, 0.25) is None
    assert check_failures(_trajs([None, None, None, "step failed: X: a"]), 1, 0.25) is None
    warning = check_failures(_trajs([None, "step failed: X: a", "step failed: X: b"]), 2, 0.25)
    assert warning and warning.startswith("warning: 2 of 3 episodes of step 2 failed")
    assert "the first (task 't1'): step failed: X: a" in warning
    with pytest.raises(EpisodesFailed, match=r"every episode of step 3 failed \(2 of 2\)"):
        check_failures(_trajs(["reset failed: KeyError: 'u'", "boom"]), 3, 0.25)


def test_an_episode_error_cannot_drive_the_terminal():
    hostile = "step failed: ValueError: \x1b]52;c;ZWNobyBwd25lZA==\x07 \u202emoc.live\n[red]x[/red]"
    warning = check_failures(_trajs([None, hostile]), 1, 0.1)
    assert warning and "\x1b" not in warning and "\u202e" not in warning and "\n" not in warning
    assert "\\x1b]52" in warning and "\\u202e" in warning


def test_no_signal_is_said_after_three_flat_steps():
    assert no_signal_warning([1.0, 1.0], 2) is None
    assert no_signal_warning([1.0, 0.25, 1.0], 3) is None
    text = no_signal_warning([0.25, 0.5, 0.75, 1.0], 4)
    assert text and "for 3 steps" in text and "100% at step 4" in text
