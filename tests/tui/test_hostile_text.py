"""Text an episode controls never reaches the terminal as control sequences (issue 11, item 18).

A run directory holds model output, environment output and error messages; any of them can
carry an OSC 52 clipboard write, an OSC 0 title change, CSI cursor moves, C1 controls or
bidi overrides. Each test runs the real `skyrl` command on such a run and reads the bytes it
wrote to the terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from tui.synthetic import make_run, write_status

SKYRL = Path(sys.executable).parent / "skyrl"

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: put `rm -rf ~` on the clipboard
TITLE = "\x1b]0;pwned-title\x1b\\"  # OSC 0 with an ST terminator
CSI = "\x1b[2J\x1b[H\x1b[31m"  # clear screen, home, red
C1_CSI = "\x9b6n"  # an 8-bit CSI: device status report
OTHERS = "\x07\x08\r\x7f\u202e\x00"  # bell, backspace, CR, DEL, right-to-left override, NUL
HOSTILE = CLIPBOARD + TITLE + CSI + C1_CSI + OTHERS

# What may reach the terminal from the data: printable text, newlines and tabs.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def hostile_run(tmp_path: Path) -> Path:
    """A failed run whose status, config, rollouts and evaluation hold hostile text."""
    runs = tmp_path / "runs"
    run = make_run(runs, "sql-20261130-120000", steps=3, state="failed")
    write_status(run, error=HOSTILE + " RuntimeError", env="sql" + TITLE, model=CSI + "m")
    for path in sorted((run / "rollouts").glob("step-*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for i, rec in enumerate(records):
            rec["task_id"] = f"t{i}{HOSTILE}"
            rec["turns"][-1]["text"] = HOSTILE + "SELECT 1"
            rec["turns"][-2]["text"] = "Error: " + HOSTILE
            rec["error"] = HOSTILE if i % 2 else None
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "eval").mkdir()
    report = {"accuracy": 0.5, "n": 2, "step": 3, "split": "dev" + CLIPBOARD}
    (run / "eval" / "after.json").write_text(json.dumps(report))
    return run


def assert_clean(out: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in _CONTROL.findall(out)})
    assert not found, f"control characters reached the terminal: {found}"


def skyrl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "COLUMNS": "100"}
    return subprocess.run([str(SKYRL), *args], capture_output=True, text=True, env=env, timeout=60)


def test_watch_once_prints_no_control_sequences(hostile_run: Path, tmp_path: Path) -> None:
    result = skyrl("watch", "--once", str(hostile_run), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_clean(result.stdout + result.stderr)
    # Escaped, not dropped: the reader of the summary sees that something was there.
    assert "\\x1b]52;c;" in result.stdout
    assert "state    failed" in result.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_runs_prints_no_control_sequences(hostile_run: Path, tmp_path: Path, as_json) -> None:
    args = ["runs", "--runs-dir", str(hostile_run.parent)] + (["--json"] if as_json else [])
    result = skyrl(*args, home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_clean(result.stdout + result.stderr)
    assert "sql-20261130-120000" in result.stdout


def test_watch_ui_writes_no_hostile_sequence(hostile_run: Path, tmp_path: Path) -> None:
    """The live UI on a real terminal (a pty): the run screen shows the status error, task
    ids and rollout errors; the trajectory screen shows every turn. Textual writes escape
    sequences of its own, so what is checked is that none of ours gets through."""
    env = {**os.environ, "HOME": str(tmp_path), "TERM": "xterm-256color"}
    child = pexpect.spawn(
        str(SKYRL), ["watch", str(hostile_run)], env=env, dimensions=(40, 140), timeout=30
    )
    out = b""

    def read_for(seconds: float) -> bytes:
        data, deadline = b"", time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(pexpect.TIMEOUT):
                data += child.read_nonblocking(1 << 16, timeout=0.5)
        return data

    try:
        out += read_for(8)
        child.send("\r")  # open the highlighted rollout: its turns, turn by turn
        out += read_for(4)
    finally:
        child.sendcontrol("c")
        child.close(force=True)
    assert b"sql-20261130-120000" in out or b"RuntimeError" in out, out[-2000:]
    for payload in (b"\x1b]52;", b"\x1b]0;pwned", b"\x1b[2J\x1b[H\x1b[31m", b"\xc2\x9b6n"):
        assert payload not in out, payload
    assert b"\\x1b]52;" in out  # shown escaped instead


def test_eval_table_and_swe_progress_print_no_control_sequences(tmp_path, capsys) -> None:
    """Metadata groups and a grading error (text an instance or episode controls) reach the
    terminal through `skyrl eval`'s table and the SWE progress line escaped, and rich markup
    in them stays text (no hyperlink)."""
    from environments.swe_harness import GradeResult
    from skyrl_cli.eval_run import print_table
    from skyrl_cli.swe_eval import Recorder

    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07[link=http://x]t[/link]\x1b[2J"
    report = {
        "model": "m" + hostile,
        "n": 1,
        "tasks": 1,
        "accuracy": 1.0,
        "mean_reward": 1.0,
        "errors": 0,
        "breakdown": {"db" + hostile: {"v" + hostile: {"tasks": 1, "pass@1": 1.0}}},
    }
    print_table(report, "sql", "label")
    Recorder(tmp_path, 1)(GradeResult("a__b-1", "", error="boom" + hostile))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]52" in out and "[link=http://x]" in out  # shown, escaped, not interpreted
