"""Issue 13, items 12 and 13: the conventions a newcomer expects of a CLI, through the real
`skyrl` command: --version, shell completion, bare `skyrl`, Rich help without internal
placeholders, NO_COLOR, and errors that all read the same way."""

from __future__ import annotations

import os
import re
from importlib.metadata import version
from pathlib import Path

import pexpect
import pytest

from tests.conftest import BIN, skyrl

COMMANDS = ("init", "train", "runs", "envs", "watch", "eval")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_version_and_completion_options(tmp_path: Path) -> None:
    proc = skyrl("--version", cwd=tmp_path)
    assert proc.stdout.strip() == f"skyrl {version('skyrl')}"
    helptext = skyrl("--help", cwd=tmp_path, env={"COLUMNS": "120"}).stdout
    assert "--install-completion" in helptext and "--show-completion" in helptext
    shown = skyrl("--show-completion", "bash", cwd=tmp_path, env={"COLUMNS": "120"})
    assert "_SKYRL_COMPLETE" in shown.stdout


def test_bare_skyrl_prints_help_and_exits_0(tmp_path: Path) -> None:
    proc = skyrl(cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and "train" in proc.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_internal_placeholders(tmp_path: Path, command: str) -> None:
    text = skyrl(command, "--help", cwd=tmp_path, env={"COLUMNS": "160"}).stdout
    assert "╭" in text  # rendered by Rich (panels)
    for placeholder in ("<str>", "<int>", "<bool>", "<path>", "<float>", "<list[str]>"):
        assert placeholder not in text, (placeholder, text)
    assert not re.search(r"\{[a-z_]+\}", text), text  # `{path}`: an argument's internal name


def _in_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    child = pexpect.spawn(
        str(BIN / "skyrl"),
        args,
        cwd=str(cwd),
        env={**base, "TERM": "xterm-256color", "COLUMNS": "120", **env},
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 120),
    )
    out = child.read()
    child.close()
    return out


def test_no_color_removes_every_style_bold_included(tmp_path: Path) -> None:
    styled = _in_a_terminal(["train", "--help"], {}, tmp_path)
    assert ANSI.search(styled), "a terminal gets styled help (else this test proves nothing)"
    bare = _in_a_terminal(["train", "--help"], {"NO_COLOR": "1"}, tmp_path)
    assert "Usage" in bare and not ANSI.search(bare), repr(bare[:400])


# ------------------------------------------------------------------ item 13: errors


def _one_error_line(proc, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["train", "--nope"], "No such option: --nope"),
        (["eval", "--n-samples", "many"], "Invalid value for '--n-samples'"),
        (["watch", "not-a-run"], "not-a-run is not a run directory"),
        (["init"], "Missing argument 'PATH'"),
        (["eval", "--env", "math", "--model", "runs/nope"], "runs/nope does not exist"),
        (["bogus"], "No such command 'bogus'"),
    ],
)
def test_every_error_starts_with_error(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "runs").mkdir()
    _one_error_line(skyrl(*args, cwd=tmp_path, check=False, timeout=120), needle)


def test_unknown_env_outside_a_project_points_at_skyrl_yaml(tmp_path: Path) -> None:
    proc = skyrl("train", "--env", "my_env", cwd=tmp_path, check=False, timeout=120)
    _one_error_line(proc, "unknown environment 'my_env'")
    assert "skyrl.yaml" in proc.stderr


def test_train_help_names_every_builtin_env(tmp_path: Path) -> None:
    from environments.registry import BUILTINS

    text = skyrl("train", "--help", cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    env_help = text[text.index("│ --env") :].split("--model")[0]  # the options panel
    for name in BUILTINS:
        assert re.search(rf"\b{name}\b", env_help), (name, env_help)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name in BUILTINS:
        assert f"| `{name}` (`skyrl/" in readme, f"README's environment table lacks {name}"


def test_init_dot_works_in_place(tmp_path: Path) -> None:
    project = tmp_path / "units-agent"
    project.mkdir()
    proc = skyrl("init", ".", cwd=project)
    assert (project / "skyrl.yaml").exists()
    assert "cd ." not in proc.stdout
    assert (project / "README.md").read_text().startswith("# units-agent\n")


def test_runs_and_watch_once_agree_when_there_are_no_runs(tmp_path: Path) -> None:
    runs = skyrl("runs", cwd=tmp_path, check=False)
    once = skyrl("watch", "--once", cwd=tmp_path, check=False)
    assert runs.returncode == once.returncode == 0, (runs, once)
    said = (runs.stdout + runs.stderr).strip().lower()
    assert said == (once.stdout + once.stderr).strip().lower()
    assert "no runs" in said


def test_readme_first_screen_says_what_happens() -> None:
    """Issue 36: the first 40 lines hold the two commands, an excerpt of what `make train`
    prints (an accuracy line) with the expected results and time; measured history (dates,
    load averages) lives in docs/, not in the README."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    first = "\n".join(readme.splitlines()[:40])
    assert "make train" in first and "make test" in first
    assert re.search(r"^dev accuracy before training: [\d.]+% \(\d+ tasks\)$", first, re.M), (
        "the first screen shows a real accuracy line of `make train`"
    )
    for words in ("after the warm-up", "after training"):
        assert words in first, f"the first screen says what the accuracy is {words}"
    assert re.search(r"about \d+ minutes", first), "the first screen states the expected time"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", readme), "a date in the README"
    assert not re.search(r"\bload (average|~?\d)", readme), "a load average in the README"
