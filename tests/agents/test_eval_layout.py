"""Issue 32, item 5: evaluation lives below the CLI. The drivers of `skyrl eval` are in
agents/ (which imports nothing above it), the SWE suite loader in tasks/swe/ (nothing of
ours outside tasks/), and every skyrl_cli/ module stays options, one call and printing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported(path: Path) -> set[str]:
    """Top-level package of every import in the file, function-local ones included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_agents_import_nothing_above_them() -> None:
    above = {"trainers", "skyrl_cli", "server", "tui"}
    bad = {p.name: sorted(_imported(p) & above) for p in sorted((ROOT / "agents").glob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}, bad
    assert (ROOT / "agents" / "eval_env.py").is_file() and (
        ROOT / "agents" / "eval_swe.py"
    ).is_file()


def test_swe_suite_loader_imports_only_tasks() -> None:
    ours = {"agents", "environments", "trainers", "skyrl_cli", "server", "tui"}
    for path in sorted((ROOT / "tasks" / "swe").glob("*.py")):
        assert not _imported(path) & ours, path.name


def test_cli_modules_stay_under_300_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "skyrl_cli").glob("*.py")}
    assert max(sizes.values()) <= 300, sizes


def test_moved_functions_have_one_home() -> None:
    """The CLI names the drivers; it does not define them again."""
    from agents import eval_env, eval_swe
    from skyrl_cli import eval_run, swe_eval
    from tasks.swe import suites
    from trainers import launch

    assert eval_run.evaluate_env is eval_env.evaluate_env
    assert swe_eval.save_result is eval_swe.save_result
    assert eval_swe.load_suite is suites.load_suite
    cli = (ROOT / "skyrl_cli" / "train.py").read_text() + (
        ROOT / "skyrl_cli" / "eval_run.py"
    ).read_text()
    for name in ("def preflight", "def load_policy", "def load_eval_tasks"):
        assert name not in cli, name
    assert callable(launch.prepare_run) and callable(launch.preflight)
