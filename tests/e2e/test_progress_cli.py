"""Issue 13, items 6-9 and 14: honest progress from the first second, through the real
`skyrl` command on the tiny model.

- Not a terminal: plain lines only, one a phase (what is starting), an evaluation batch
  (with an ETA) and a step; `--watch` without a terminal trains here with those lines and
  exits when the run ends; the accuracy before training and after the warm-up (both step
  0) is each said once, by name.
- A terminal (a real pty): something is on screen in the first seconds; one live line
  carries the step numbers and our ETA (no plain step lines under it, no `-:--:--`); after
  Ctrl-C the stop message and the prompt land below the line, never redrawn over.
- `skyrl init`'s template trains to the end without flags, on the tiny model.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pexpect
import yaml

from tests.conftest import BIN, NO_TRACKING, TINY_MATH, skyrl

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _status(runs: Path) -> dict:
    (run,) = [p for p in runs.iterdir() if (p / "status.json").exists()]
    return json.loads((run / "status.json").read_text())


def test_without_a_terminal_watch_trains_here_with_plain_phase_eval_and_step_lines(
    tmp_path: Path, ray_address: str
) -> None:
    args = [
        *TINY_MATH,
        "--max-steps",
        "2",
        "--set",
        "warmup.sft_steps=1",
        "--ray-address",
        ray_address,
    ]
    proc = subprocess.run(
        [str(BIN / "skyrl"), "train", "--watch", *args],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "\x1b" not in out, "no control codes without a terminal"
    assert "--watch needs a terminal" in proc.stderr
    assert _status(tmp_path / "runs")["state"] == "finished"  # trained here, to the end

    lines = proc.stderr.splitlines()
    first_eval = next(i for i, ln in enumerate(lines) if ln.startswith("evaluating on"))
    before = "\n".join(lines[:first_eval])
    for phase in (
        "loading the trainer (torch) ...",
        f"joining the Ray cluster at {ray_address} ...",
        "starting one worker for the learner and engine, loading tiny ...",
        "opening the tracking store ...",
    ):
        assert phase in before, (phase, before)
    assert re.search(r"^eval dev 4/4 episodes \(\d+s, ETA 0m00s\)$", proc.stderr, re.M), out
    assert re.search(r"^step 2/2 reward .* ETA 0m00s$", proc.stderr, re.M), out
    # before training and after the warm-up are both step 0: each is said once, by name
    assert proc.stderr.count("dev accuracy before training: ") == 1, out
    assert proc.stderr.count("dev accuracy after the warm-up: ") == 1, out
    assert "at step 0" not in out


def _screen_lines(raw: str) -> list[str]:
    """What a terminal shows, line by line: each line as its last redraw left it."""
    text = ESCAPES.sub("", raw)
    return [ln.split("\r")[-1] for ln in re.split(r"\r?\n", text)]


def test_in_a_terminal_one_live_line_from_the_first_seconds_and_ctrl_c_below_it(
    tmp_path: Path, ray_address: str
) -> None:
    # the terminal's own size, 80 columns (the commonest default: the numbers used to wrap
    # onto a second line there), not a COLUMNS or LINES this shell happens to export
    drop = ("NO_COLOR", "COLUMNS", "LINES")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    t0 = time.monotonic()
    child = pexpect.spawn(
        str(BIN / "skyrl"),
        ["train", *TINY_MATH, *NO_TRACKING, "--max-steps", "200", "--ray-address", ray_address],
        cwd=str(tmp_path),
        env={**env, "TERM": "xterm-256color"},
        encoding="utf-8",
        timeout=240,
        dimensions=(40, 80),
    )
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect("checking the configuration", timeout=30)  # the first thing on screen
    first_s = time.monotonic() - t0
    child.expect("3/200 reward")  # the training bar, a few steps in
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    raw = seen.getvalue()
    assert first_s < 6.0, f"nothing on screen for {first_s:.1f}s"

    lines = _screen_lines(raw)
    assert not any(re.match(r"step \d+/200 ", ln) for ln in lines), "plain step lines under the bar"
    assert "-:--:--" not in raw
    bar = [ln for ln in lines if re.search(r"train .* \d+/200 reward", ln)]
    assert bar and all(re.search(r"ETA \d+m\d\ds\s*$", ln) for ln in bar[-3:]), raw[-2000:]
    assert all(len(ln) < 80 for ln in bar), max(bar, key=len)
    stop = raw.rindex("stopped; continue with: skyrl train --resume")
    tail = raw[stop:]
    assert "━" not in tail and tail.endswith("\n"), repr(tail)  # nothing redrawn after it
    assert child.exitstatus == 130 or child.signalstatus is not None


def test_the_template_trains_to_the_end_without_flags(tmp_path: Path, ray_address: str) -> None:
    skyrl("init", "my-agent", cwd=tmp_path)
    project = tmp_path / "my-agent"
    text = (project / "skyrl.yaml").read_text()
    assert yaml.safe_load(text)["model"]["name"] == "tiny"
    assert re.search(r"^\s*#.*name: smollm2-135m", text, re.M), "the line for a real model"
    t0 = time.monotonic()
    skyrl("train", "--ray-address", ray_address, cwd=project, timeout=300)
    took = time.monotonic() - t0
    status = _status(project / "runs")
    assert status["state"] == "finished" and status["step"] == status["max_steps"]
    assert took < 240, f"the template's first run took {took:.0f}s"


def test_skyrl_eval_shows_episodes_and_an_eta(tmp_path: Path) -> None:
    proc = skyrl("eval", "--env", "math", "--model", "tiny", "--limit", "4", cwd=tmp_path)
    assert re.search(r"^eval dev 4/4 episodes \(\d+s, ETA 0m00s\)$", proc.stderr, re.M), proc.stderr
    assert "\x1b" not in proc.stderr
