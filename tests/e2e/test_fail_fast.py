"""Issue 13, items 1, 3, 4: `skyrl train` refuses what cannot train before anything heavy starts.

Each case is a project a user could have written: a plugin environment that does not load
or whose `reset` raises, a broken task file, a model that is nowhere. The real `skyrl`
command must answer with one sentence and exit 2 within seconds (no Ray, no model), and a
run that never started leaves nothing behind: no runs/ folder, nothing for `skyrl runs`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import skyrl

TOY = Path(__file__).parent / "toy"
FAST_S = 8.0
"""Generous for a loaded 2-core machine; the checks themselves take about a second."""


def _edit_env(proj: Path, old: str, new: str) -> None:
    f = proj / "digits_env.py"
    f.write_text(f.read_text().replace(old, new, 1))


def _write_tasks(proj: Path, rows: list[dict] | str) -> None:
    text = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
    (proj / "tasks.jsonl").write_text(text)


def _task(i: int, **extra) -> dict:
    return {"id": f"d{i}", "env": "digits", "prompt": f"digits {i}", **extra}


def _syntax_error(proj: Path) -> None:
    (proj / "digits_env.py").write_text((proj / "digits_env.py").read_text() + "\ndef broken(:\n")


def _import_error(proj: Path) -> None:
    _edit_env(proj, "import gymnasium as gym", "import gymnasium as gym\nimport no_such_module_x")


def _class_typo(proj: Path) -> None:
    y = proj / "skyrl.yaml"
    y.write_text(y.read_text().replace("digits_env.py:DigitsEnv", "digits_env.py:DigitEnv"))


def _reset_raises(proj: Path) -> None:
    _edit_env(proj, 'task = (options or {}).get("task")', "raise KeyError('unit')")


def _bad_json(proj: Path) -> None:
    _write_tasks(proj, json.dumps(_task(0)) + "\n{not json\n")


def _missing_prompt(proj: Path) -> None:
    _write_tasks(proj, [_task(0), {"id": "d1", "env": "digits"}])


def _no_train_split(proj: Path) -> None:
    _write_tasks(proj, [_task(i, split="dev") for i in range(4)])


def _no_tasks_at_all(proj: Path) -> None:
    y = proj / "skyrl.yaml"
    y.write_text(y.read_text().replace("  tasks: tasks.jsonl\n", ""))


def _holdout_on_split_file(proj: Path) -> None:
    _write_tasks(proj, [_task(i, split="train") for i in range(4)])
    y = proj / "skyrl.yaml"
    y.write_text(y.read_text().replace("  limit: 0", "  limit: 0\n  holdout: 0.25"))


def _empty_model_folder(proj: Path) -> None:
    (proj / "my-model").mkdir()


CASES = {
    "env module with a syntax error": (_syntax_error, [], "SyntaxError"),
    "env module that fails to import": (_import_error, [], "no_such_module_x"),
    "class name typo": (_class_typo, [], "has no class 'DigitEnv'"),
    "reset raises": (_reset_raises, [], "KeyError"),
    "task file with bad JSON": (_bad_json, [], "line 2 is not valid JSON"),
    "task without a prompt": (_missing_prompt, [], "missing the field(s) prompt"),
    "no train tasks": (_no_train_split, [], "no tasks in split 'train'"),
    "plugin without tasks": (_no_tasks_at_all, [], "no bundled tasks"),
    "holdout on a split file": (_holdout_on_split_file, [], "eval.holdout"),
    "unknown hub model": (lambda p: None, ["--model", "nobody-x/nothing-y"], "nobody-x/nothing-y"),
    "model folder without config.json": (
        _empty_model_folder,
        ["--model", "my-model"],
        "has no config.json",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_cannot_train_is_refused_in_seconds_and_leaves_nothing(tmp_path, case):
    break_it, args, needle = CASES[case]
    proj = tmp_path / "proj"
    shutil.copytree(TOY, proj)
    break_it(proj)
    t0 = time.perf_counter()
    proc = skyrl(
        "train",
        "--max-steps",
        "1",
        *args,
        cwd=proj,
        check=False,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)},
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), proc.stderr
    assert needle in err[0], err[0]
    assert elapsed < FAST_S, f"{case}: refused after {elapsed:.1f}s"
    assert not (proj / "runs").exists(), sorted(p.name for p in (proj / "runs").iterdir())
    listing = skyrl("runs", cwd=proj, check=False)
    assert "no runs" in listing.stdout
