"""The local SWE-bench harness grades like the official one, on the swe-bench-mini suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from environments.swe_harness import ensure_env, evaluate, grade, prediction, report
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
        "completed_instances",
        "unresolved_instances",
        "error_instances",
        "incomplete_ids",
        "submitted_ids",
        "unresolved_ids",
        "error_ids",
    }
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


# ------------------------------------------------- the Python env, cached per repo/version


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return proc.stdout


def _wheel(dest: Path) -> Path:
    """A tiny pure-Python wheel (`tinydep`, VALUE = 42) in `dest/wheels`: pip installs it
    with no index or build backend."""
    (dest / "wheels").mkdir(exist_ok=True)
    path = dest / "wheels" / "tinydep-1.0-py3-none-any.whl"
    files = {
        "tinydep/__init__.py": "VALUE = 42\n",
        "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in [*files, "tinydep-1.0.dist-info/RECORD"])
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in {**files, "tinydep-1.0.dist-info/RECORD": record}.items():
            whl.writestr(name, text)
    return path


def _dep_repo(tmp_path: Path, requirements: str | None) -> tuple[Path, dict[str, Any]]:
    """A repository `acme/calc` whose code imports `tinydep`, and one instance of it (gold
    patch: `answer()` returns tinydep.VALUE)."""
    repos = tmp_path / "repos"
    repo = repos / "acme__calc"
    (repo / "tests").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    if requirements is not None:
        (repo / "requirements.txt").write_text(requirements)
    (repo / "calc.py").write_text("import tinydep\n\n\ndef answer():\n    return 0\n")
    test = "import tinydep\n\n\ndef test_import():\n    assert tinydep.VALUE == 42\n"
    (repo / "tests/test_calc.py").write_text(test)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("import tinydep\n\n\ndef answer():\n    return tinydep.VALUE\n")
    patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    test += "\n\ndef test_answer():\n    import calc\n\n    assert calc.answer() == 42\n"
    (repo / "tests/test_calc.py").write_text(test)
    test_patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    instance = {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "version": "1.0",
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_answer"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_import"],
    }
    return repos, instance


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
def test_requirements_are_installed_once_per_repo_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandboxed: bool
) -> None:
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SKYRL_SWE_PIP_INDEX", raising=False)
    monkeypatch.setenv("SKYRL_SWE_PIP_FIND_LINKS", str(_wheel(tmp_path).parent))
    repos, inst = _dep_repo(tmp_path, "tinydep==1.0  # the user's wheelhouse has it\n")
    first = grade(inst, inst["patch"], repos_dir=repos, sandboxed=sandboxed)
    assert first.resolved and first.python_env == "built", (first.error, first.log)
    assert "--no-index" in first.log and "--only-binary=:all:" in first.log
    built = [line for line in first.log.splitlines() if line.startswith("python env: ")]
    assert len(built) == 1 and built[0].startswith("python env: built ")
    env = Path(built[0].split()[3])
    assert env.name == f"acme__calc-1.0-py{sys.version_info.major}{sys.version_info.minor}"
    assert env.parent == tmp_path / "cache" / "swe-envs"
    assert (env / "site/tinydep/__init__.py").is_file() and (env / "site/pytest").is_dir()
    for path in [env, *env.rglob("*")]:  # nobody else may write what sandboxes link to
        assert path.is_symlink() or not path.stat().st_mode & 0o022, path
    before = env.stat()

    second_inst = {**inst, "instance_id": "acme__calc-2"}
    second = grade(
        second_inst, second_inst["patch"], repos_dir=repos, sandboxed=sandboxed, keep_workdir=True
    )
    assert second.resolved and second.python_env == "cached", (second.error, second.log)
    assert second.workdir is not None
    if sandboxed:  # the sandbox got the env in its work dir, as hard links when it has a uid
        given = (second.workdir / "box/site/tinydep/__init__.py").stat()
        cached = (env / "site/tinydep/__init__.py").stat()
        assert given.st_uid == os.getuid() and not given.st_mode & 0o022
        assert (given.st_ino == cached.st_ino) == (os.geteuid() == 0)
    shutil.rmtree(second.workdir)
    assert f"python env: cached {env}" in second.log and "pip install" not in second.log
    after = env.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in env.parent.iterdir() if not p.name.startswith(".")] == [env.name]

    # another version is another env; this one's requirements lack tinydep: nothing imports
    other = {**inst, "instance_id": "acme__calc-3", "version": "2.0", "requirements": ["# -"]}
    broken = grade(other, inst["patch"], repos_dir=repos, sandboxed=sandboxed)
    assert broken.python_env == "built" and broken.error is None and not broken.resolved
    assert "No module named 'tinydep'" in broken.log


def test_an_uninstallable_requirement_is_an_instance_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SKYRL_SWE_PIP_INDEX", raising=False)
    repos, inst = _dep_repo(tmp_path, "definitely-not-a-real-package-skyrl==9.9\n")
    result = grade(inst, inst["patch"], repos_dir=repos)
    assert result.error is not None and not result.resolved, result.log
    assert result.error.startswith("the Python env of acme/calc 1.0 could not be built: pip")
    assert "\n" not in result.error and "definitely-not-a-real-package-skyrl" in result.error
    assert result.python_env is None and "python env: failed" in result.log
    assert report([result])["error_ids"] == [inst["instance_id"]]
    envs = tmp_path / "cache" / "swe-envs"
    assert [p.name for p in envs.iterdir() if not p.name.startswith(".")] == []  # not cached
    # the instance's own `requirements` list wins over the repository's file
    monkeypatch.setenv("SKYRL_SWE_PIP_FIND_LINKS", str(_wheel(tmp_path).parent))
    listed = {**inst, "requirements": ["tinydep"]}
    assert grade(listed, inst["patch"], repos_dir=repos).resolved


def test_parallel_graders_build_an_env_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    outcomes: list[tuple[Path, bool]] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(ensure_env("acme/calc", "3.0")))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({env for env, _ in outcomes}) == 1 and sorted(b for _, b in outcomes) == [
        False,
        False,
        False,
        True,
    ]
    env = outcomes[0][0]
    assert (env / "site/_pytest").is_dir()
    assert [p.name for p in env.parent.iterdir() if not p.name.startswith(".")] == [env.name]
    assert not [p for p in env.parent.iterdir() if p.is_dir() and p.name.startswith(".")]
