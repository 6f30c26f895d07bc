"""The local SWE-bench harness grades like the official one, on the swe-bench-mini suite."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from environments.swe_harness import evaluate, grade, prediction, report
from tasks.swe import build_suite, load_instances
from tasks.swe.testrun import parse_log_pytest


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """The suite, built once per session into a private cache (shared with the suite tests)."""
    cache = tmp_path_factory.getbasetemp() / "swe-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYRL_CACHE_DIR", str(cache))
        build_suite()
        yield load_instances("swe-bench-mini")


@pytest.fixture(scope="module")
def repos(instances: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "swe-cache" / "swe-bench-mini-v1" / "repos"


def _by_id(instances: list[dict[str, Any]], iid: str) -> dict[str, Any]:
    return next(i for i in instances if i["instance_id"] == iid)


def test_gold_patches_resolve_every_instance(instances: list[dict[str, Any]], repos: Path) -> None:
    results = [grade(i, i["patch"], repos_dir=repos) for i in instances]
    failed = {
        r.instance_id: (r.error, r.tests_status, r.log[-2000:]) for r in results if not r.resolved
    }
    assert not failed
    rep = report(results, instances)
    assert rep["resolved_instances"] == rep["total_instances"] == len(instances)
    assert (
        rep["completed_ids"] == rep["resolved_ids"] == sorted(i["instance_id"] for i in instances)
    )
    one = results[0]
    assert one.patch_applied and one.error is None
    assert set(one.test_results) >= set(instances[0]["FAIL_TO_PASS"]) | set(
        instances[0]["PASS_TO_PASS"]
    )
    assert "PASSED " in one.log and one.duration_s < 30


@pytest.mark.parametrize("mode", ["fallback-sandbox", "no-sandbox"])
def test_gold_patch_resolves_without_bubblewrap(
    instances: list[dict[str, Any]], repos: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYRL_SANDBOX_BACKEND", "fallback")
    inst = instances[-1]
    result = grade(inst, inst["patch"], repos_dir=repos, sandboxed=mode == "fallback-sandbox")
    assert result.resolved, result.log


def test_empty_patches_resolve_nothing(instances: list[dict[str, Any]], repos: Path) -> None:
    results = [grade(i, "  \n", repos_dir=repos) for i in instances]
    assert not any(r.resolved for r in results)
    rep = report(results, instances)
    assert rep["empty_patch_instances"] == len(instances)
    assert rep["resolved_instances"] == rep["completed_instances"] == rep["error_instances"] == 0
    assert results[0].to_report()[results[0].instance_id]["patch_exists"] is False


def test_garbage_patch_is_an_error(instances: list[dict[str, Any]], repos: Path) -> None:
    inst = instances[0]
    result = grade(inst, "this is not a diff\n--- nor this\n", repos_dir=repos)
    assert result.error is not None and "does not apply" in result.error
    assert not result.resolved and not result.patch_applied
    assert "patch --batch --fuzz=5" in result.log
    rep = report([result], instances)
    assert rep["error_ids"] == [inst["instance_id"]] and rep["submitted_instances"] == 1
    assert len(rep["incomplete_ids"]) == len(instances) - 1


def test_patch_with_stale_context_applies_with_fuzz(
    instances: list[dict[str, Any]], repos: Path
) -> None:
    """git apply refuses a context line that changed since; `patch --fuzz=5` still applies it."""
    inst = _by_id(instances, "skyrl-mini__pager-5")
    context = '     """How many pages `total` items fill at `per_page` a page (at least one)."""'
    assert context in inst["patch"]
    stale = inst["patch"].replace(context, '     """Count the pages."""')
    result = grade(inst, stale, repos_dir=repos)
    assert result.resolved and result.patch_applied
    assert (
        "(exit 1)" in result.log
        and "patch --batch --fuzz=5 -p1 -i model.patch  (exit 0)" in result.log
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_partial_fix_by_an_agent_is_unresolved(
    instances: list[dict[str, Any]], repos: Path
) -> None:
    inst = _by_id(instances, "skyrl-mini__textkit-4")

    def agent(work: Path, instance: dict[str, Any]) -> None:
        assert instance is inst and (work / ".git").exists()
        # collapses runs of separators but leaves them at the edges
        _edit(work / "textkit/slug.py", r'r"[\s_-]"', r'r"[\s_-]+"')

    result = grade(inst, agent=agent, repos_dir=repos)
    assert result.error is None and result.patch_applied and not result.resolved
    assert result.model_patch.startswith("diff --git a/textkit/slug.py")
    f2p = result.tests_status["FAIL_TO_PASS"]
    assert f2p["success"] == ["tests/test_slug.py::test_repeated_whitespace_collapses"]
    assert f2p["failure"] == ["tests/test_slug.py::test_separators_at_edges_are_stripped"]
    assert result.tests_status["PASS_TO_PASS"]["failure"] == []
    assert report([result], [inst])["unresolved_ids"] == [inst["instance_id"]]


def test_agent_edits_to_test_files_are_reset(instances: list[dict[str, Any]], repos: Path) -> None:
    """Rewriting the tests cannot help: test files are reset before the test patch applies."""
    inst = _by_id(instances, "skyrl-mini__textkit-15")

    def agent(work: Path, instance: dict[str, Any]) -> None:
        (work / "tests/test_wrap.py").write_text("def test_truncate_respects_width():\n    pass\n")
        (work / "textkit/wrap.py").write_text("")  # and break every existing test

    result = grade(inst, agent=agent, repos_dir=repos)
    assert result.error is None and not result.resolved
    assert "tests/test_wrap.py" in result.model_patch
    assert result.tests_status["FAIL_TO_PASS"]["failure"] == inst["FAIL_TO_PASS"]
    assert result.tests_status["PASS_TO_PASS"]["failure"] == inst["PASS_TO_PASS"]


def test_hanging_tests_time_out_as_an_error(instances: list[dict[str, Any]], repos: Path) -> None:
    inst = _by_id(instances, "skyrl-mini__pager-5")

    def agent(work: Path, instance: dict[str, Any]) -> None:
        _edit(
            work / "pager/paginate.py",
            "    if per_page < 1:",
            "    while True:\n        pass\n    if per_page < 1:",
        )

    start = time.monotonic()
    result = grade(inst, agent=agent, repos_dir=repos, timeout_s=3)
    assert time.monotonic() - start < 20
    assert result.error == "the tests timed out after 3 s" and not result.resolved
    assert report([result])["error_instances"] == 1


def test_agent_crash_and_missing_repo_are_errors(
    instances: list[dict[str, Any]], repos: Path, tmp_path: Path
) -> None:
    def agent(work: Path, instance: dict[str, Any]) -> None:
        raise RuntimeError("out of tokens")

    crashed = grade(instances[0], agent=agent, repos_dir=repos)
    assert crashed.error == "the agent raised RuntimeError: out of tokens"
    missing = grade(instances[0], instances[0]["patch"], repos_dir=tmp_path)
    assert missing.error is not None and "no repository skyrl-mini__" in missing.error
    with pytest.raises(ValueError, match="exactly one of"):
        grade(instances[0], "x", agent=agent, repos_dir=repos)


def test_predictions_and_evaluate_use_the_official_keys(
    instances: list[dict[str, Any]], repos: Path
) -> None:
    first, second = instances[0], instances[1]
    preds = [
        prediction(first["instance_id"], "gold", first["patch"]),
        prediction(second["instance_id"], "gold", ""),
        prediction("someone-else__repo-1", "gold", "diff"),
    ]
    assert set(preds[0]) == {"instance_id", "model_name_or_path", "model_patch"}
    results = evaluate(instances, preds, repos_dir=repos)
    rep = report(results, instances)
    assert rep["resolved_ids"] == [first["instance_id"]]
    assert rep["empty_patch_ids"] == [second["instance_id"]]
    assert rep["total_instances"] == len(instances) and rep["submitted_instances"] == 2
    assert rep["schema_version"] == 2
    assert set(rep) >= {
        "completed_instances", "unresolved_instances", "error_instances", "incomplete_ids",
        "submitted_ids", "unresolved_ids", "error_ids",
    }  # fmt: skip
    per_instance = results[0].to_report()[first["instance_id"]]
    assert per_instance["resolved"] and per_instance["patch_successfully_applied"]


def test_pytest_log_parser_matches_the_official_one() -> None:
    log = "\n".join(
        [
            "tests/test_a.py ..F",
            "PASSED tests/test_a.py::test_one",
            "FAILED tests/test_a.py::test_two - AssertionError: 1 != 2",
            "ERROR tests/test_b.py::test_three",
            "XFAIL tests/test_b.py::test_four - reason",
            "SKIPPED [1] tests/test_b.py:9: no network",
            "FAILED",
        ]
    )
    assert parse_log_pytest(log) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
        "tests/test_b.py::test_three": "ERROR",
        "tests/test_b.py::test_four": "XFAIL",
        "[1]": "SKIPPED",
    }
