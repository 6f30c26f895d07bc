"""`skyrl eval --suite`: the real command on swe-bench-mini with the gold, empty and shell agents."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import skyrl

REPORT_KEYS = {
    "total_instances", "submitted_instances", "completed_instances", "resolved_instances",
    "unresolved_instances", "empty_patch_instances", "error_instances", "resolved_ids",
    "unresolved_ids", "empty_patch_ids", "error_ids", "completed_ids", "submitted_ids",
}  # fmt: skip # a table of values, laid out by hand
LEDGER, PAGER = "skyrl-mini__ledger-3", "skyrl-mini__pager-5"


def _read(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    report = json.loads((out / "report.json").read_text())
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    return report, preds


def test_gold_resolves_everything_and_empty_nothing(tmp_path: Path) -> None:
    proc = skyrl(
        "eval", "--suite", "swe-bench-mini", "--agent", "gold", "--output", "gold", cwd=tmp_path
    )
    report, preds = _read(tmp_path / "gold")
    assert set(report) >= REPORT_KEYS
    n = report["total_instances"]
    assert n >= 10 and report["resolved_instances"] == n and report["error_instances"] == 0
    assert {p["instance_id"] for p in preds} == set(report["resolved_ids"])
    assert all(
        p["model_name_or_path"] == "gold" and p["model_patch"].startswith("diff --git")
        for p in preds
    )
    assert f"resolved {n}/{n}" in proc.stdout
    logs = tmp_path / "gold" / "logs" / LEDGER
    assert "PASSED" in (logs / "test_output.txt").read_text() and (logs / "patch.diff").read_text()

    skyrl(
        "eval", "--suite", "swe-bench-mini", "--agent", "empty", "--output", "empty", cwd=tmp_path
    )
    report, preds = _read(tmp_path / "empty")
    assert report["resolved_instances"] == 0 and report["empty_patch_instances"] == n
    assert len(preds) == n and all(p["model_patch"] == "" for p in preds)


def test_select_resume_and_a_missing_repo(tmp_path: Path) -> None:
    skyrl(
        "eval",
        "--suite",
        "swe-bench-mini",
        "--agent",
        "gold",
        "--slice",
        "0:2",
        "--output",
        "o",
        cwd=tmp_path,
    )
    report, _ = _read(tmp_path / "o")
    assert report["total_instances"] == 2 and report["resolved_instances"] == 2
    first_two = report["resolved_ids"]

    # --resume: the two finished instances are skipped, only the new one runs
    proc = skyrl("eval", "--suite", "swe-bench-mini", "--agent", "gold", "--slice", "0:3",
                 "--output", "o", "--resume", cwd=tmp_path)  # fmt: skip # the command line reads as typed
    assert "2 already finished" in proc.stderr and "[1/1]" in proc.stdout
    assert not any(f"{i}:" in proc.stdout for i in first_two)
    report, preds = _read(tmp_path / "o")
    assert report["resolved_instances"] == 3 and len(preds) == 3

    # a repos dir without the pager repo: that instance is an error, the other resolves
    from tasks.swe import suite_repos_dir

    repos = tmp_path / "repos"
    shutil.copytree(suite_repos_dir(), repos, symlinks=True)
    shutil.rmtree(repos / "skyrl-mini__pager")
    proc = skyrl("eval", "--suite", "swe-bench-mini", "--agent", "gold", "--instances", f"{PAGER},{LEDGER}",
                 "--repos", str(repos), "--output", "m", cwd=tmp_path, check=False)  # fmt: skip # the command line reads as typed
    assert proc.returncode == 1 and "1 of 2 instances could not be graded" in proc.stderr
    assert f"{PAGER}: error: no repository skyrl-mini__pager" in proc.stdout
    report, _ = _read(tmp_path / "m")
    assert report["error_ids"] == [PAGER] and report["resolved_ids"] == [LEDGER]
    assert (
        "no repository skyrl-mini__pager"
        in json.loads((tmp_path / "m" / "logs" / PAGER / "result.json").read_text())["error"]
    )


def test_official_suite_without_a_hub_is_one_sentence(tmp_path: Path) -> None:
    proc = skyrl("eval", "--suite", "swe-bench-lite", "--agent", "gold", cwd=tmp_path, check=False,
                 env={"HF_HUB_OFFLINE": "1"})  # fmt: skip # the command line reads as typed
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: swe-bench-lite is downloaded from the Hugging Face hub")
    assert proc.stderr.strip().count("\n") == 0


def test_shell_agent_with_the_tiny_model_runs_end_to_end(tmp_path: Path) -> None:
    proc = skyrl("eval", "--suite", "swe-bench-mini", "--model", "tiny", "--slice", "0:2",
                 "--max-turns", "2", "--max-new-tokens", "24", "--output", "s", cwd=tmp_path,
                 env={"OMP_NUM_THREADS": str(os.cpu_count() or 1)})  # fmt: skip # the command line reads as typed
    report, preds = _read(tmp_path / "s")
    assert report["total_instances"] == 2 and report["resolved_instances"] == 0
    assert report["error_instances"] == 0 and len(preds) == 2
    assert all(p["model_name_or_path"] == "tiny" for p in preds)
    traj = json.loads((tmp_path / "s" / "logs" / LEDGER / "trajectory.json").read_text())
    roles = [t["role"] for t in traj["turns"]]
    assert roles[:2] == ["user", "assistant"] and roles.count("assistant") == 2  # the turn budget
    assert "Money.parse" in traj["turns"][0]["text"] and traj["info"]["resolved"] is False
    assert "resolved 0/2" in proc.stdout
