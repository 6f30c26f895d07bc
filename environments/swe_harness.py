"""Grade SWE-bench-format instances locally, as the official harness does, without Docker.

Rows with an official specification (real SWE-bench rows, or a row's own `spec`) take the
path of `environments.swe_official`: the official environment, the repository installed,
official directives and log parser. What follows is the path of this project's own suites
(swe-bench-mini), whose repositories need no more than their `requirements.txt`.

    from environments.swe_harness import grade, report, prediction
    result = grade(instance, model_patch)             # repos default to swe-bench-mini's
    result.resolved, result.error, result.tests_status["FAIL_TO_PASS"]
    report([result], instances)                        # the official run-report keys

One grading, step by step (the official `run_instance` + eval script):

0. The instance is checked first (`tasks.swe.checks`): a commit id of hex digits, `owner/name`,
   an id and version that are single path components, a `test_patch` (and model patch)
   whose every path is relative, without `..`, outside `.git`. Otherwise it is refused with
   a one-line `error` and nothing runs.
1. With an `agent`, the agent edits a checkout of `base_commit` (fetched from
   `repos_dir/<owner>__<name>` without any later commit); its patch is the diff of
   everything it changed, taken by `tasks.swe.build.diff_tree` (its files copied out, its
   `.git` never read). Grading then starts clean, as for a prediction.
2. The graded checkout is a work tree without `.git`: its repository lives beside it
   (`git/`, reading the source repository's objects), so nothing a patch writes in the tree
   is ever git's config, hooks or index. Every host git call goes through
   `tasks.swe.build.run_git` (no system, global or `$HOME` config, fsmonitor and hooks off).
3. An empty patch is an `empty_patch` result; nothing runs (the official harness skips it).
4. The model patch applies with `git apply --verbose`, then `git apply --verbose --reject`,
   then `patch --batch --fuzz=5 -p1 -i` (with no `PATH`: it can start no `ed` or `get`);
   the tree is reset between attempts.
5. Test files the patch touched are reset to `base_commit` (deleted if new; a symlink or
   file where the path needs a directory is removed, never followed), and the `test_patch`
   is applied.
6. `pytest -rA` runs the test files of the `test_patch`, in `environments.sandbox`, with
   the instance's cached Python env (below; built before step 4, from the clean checkout);
   each test's status comes from the official pytest log parser.
7. FAIL_TO_PASS / PASS_TO_PASS are graded with the official rules: a test passed when its
   status is PASSED or XFAIL, failed when FAILED, ERROR or absent from the log (a SKIPPED
   test counts as neither, as upstream). `resolved` when every F2P and every P2P test that
   counts has passed.

Which Python runs the tests: inside bubblewrap (which hides `$HOME`, where venvs and pyenv
interpreters usually live) or as the sandbox's own uid (when we are root), the system
interpreter; otherwise the current one. Either way it imports from a `site/` dir on its
`PYTHONPATH`: the instance's Python environment, built once per (repo, version, interpreter
version) under `tasks.cache.cache_dir() / "swe-envs"` (see `env_dir`) and reused by every
later instance of that repo and version. It holds the requirements of the repository at
`base_commit` (its `requirements.txt`, a regular file, or the instance's `requirements`
list), installed by `<that interpreter> -m pip install --target` (the current interpreter's
pip, for the same Python version, when that one has none), then pytest's pure-Python
packages copied from the current environment (unless the requirements brought their own
pytest). Nothing is built on the host: a requirement is a package name (with extras,
versions, markers, hashes) or the instance is refused (`tasks.swe.checks.safe_requirements`:
no `.`, paths, URLs, VCS links or pip options), and pip takes wheels only
(`--only-binary=:all:`), from `$SKYRL_SWE_PIP_FIND_LINKS` (a folder of wheels) and, when
`$SKYRL_SWE_PIP_INDEX` names one, an index (else `--no-index`). A failed install is that
instance's `error` and is not cached. Each
sandbox gets the env as hard links in its work dir (`{inner_workdir}/site`), made after the
sandbox hands the work dir to its uid, so they stay ours and read-only to sandboxed code;
without a uid of its own the sandbox gets a plain copy instead. The repository itself is
not installed: the tests run from its root, which is on `sys.path`. No venv is built: a
venv would live in the hidden cache dir, and `--system-site-packages` from a venv sees the
base interpreter's packages, not the venv's pytest.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.sandbox import BACKEND_ENV, Limits, Sandbox, bwrap_available
from environments.swe_official import BuildOptions
from tasks.swe.build import attach_objects, diff_tree, git, run_git
from tasks.swe.checks import check_instance, check_patch, check_relpath, safe_requirements
from tasks.swe.official import OfficialUnavailable, Spec, spec_for
from tasks.swe.testrun import (
    TEST_ENV,
    TestStatus,
    parse_log_pytest,
    passed,
    pytest_argv,
    run_tests_plain,
)
from tasks.swe.testrun import directives as _directives

__all__ = ["GradeResult", "env_dir", "ensure_env", "evaluate", "grade", "prediction", "report"]

Agent = Callable[[Path, dict[str, Any]], None]
"""Edits the checked-out repository (its path) to solve the instance (the dict)."""

APPLY_CMDS: tuple[tuple[str, ...], ...] = (
    ("git", "apply", "--verbose"),
    ("git", "apply", "--verbose", "--reject"),
    ("patch", "--batch", "--fuzz=5", "-p1", "-i"),
)
"""The official harness's ways to apply a model patch, tried in order."""
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py")
"""What `pytest -p no:cacheprovider` imports with plugin autoload off (pure Python)."""
PYTEST_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging")
"""Distributions whose version pytest looks up (a minimal `.dist-info` is written for each)."""
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
PIP_INDEX_ENV = "SKYRL_SWE_PIP_INDEX"
"""An index URL for the env builds' pip; unset means `--no-index` (offline)."""
PIP_FIND_LINKS_ENV = "SKYRL_SWE_PIP_FIND_LINKS"
"""A folder of wheels (the user's) the env builds' pip may install from."""
PIP_TIMEOUT_S = 1800.0
"""Wall-clock limit of one env build's `pip install`."""


@dataclass
class GradeResult:
    """The outcome of grading one instance."""

    instance_id: str
    """The instance graded."""
    model_patch: str
    """The patch graded (the agent's `git diff` when an agent worked)."""
    resolved: bool = False
    """Every FAIL_TO_PASS test now passes and every PASS_TO_PASS test still does."""
    empty_patch: bool = False
    """The patch was empty: nothing ran (the official `empty_patch` bucket)."""
    patch_applied: bool = False
    """The model patch applied to `base_commit`."""
    error: str | None = None
    """Why grading could not finish: the patch does not apply, timeout, crash; else None."""
    tests_status: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Official `tests_status`: FAIL_TO_PASS, PASS_TO_PASS, FAIL_TO_FAIL, PASS_TO_FAIL, each
    {"success": [...], "failure": [...]}."""
    test_results: dict[str, str] = field(default_factory=dict)
    """Every test of the log -> PASSED, FAILED, ERROR, SKIPPED or XFAIL."""
    log: str = ""
    """What ran and what it printed: patch application and the pytest output."""
    build_log: str = ""
    """Official rows: how the environment was had (built now, with pip's output, or
    cached) and the instance's set-up (the repository's install)."""
    duration_s: float = 0.0
    """Wall-clock seconds of the grading (the agent's time excluded)."""
    workdir: Path | None = None
    """With `keep_workdir=True`: the kept dir (`box/repo/` the graded checkout, `box/site/`
    its Python env, `git/` its repository, the patches)."""
    python_env: str | None = None
    """"cached" or "built": where the instance's Python env (`env_dir`) came from; None when
    grading stopped before the tests needed one."""
    python_specified: str | None = None
    """The Python version the official specification asks for (official rows only)."""
    python_used: str | None = None
    """The Python version the tests ran with."""
    python_mismatch: str | None = None
    """"3.9 specified, 3.11 used (why)" when no interpreter of the specified version could
    be had; the outcome then says less than the official harness's would."""
    note: str | None = None
    """What else a reader of the outcome should know (the tests wanted the network)."""
    env_build_s: float = 0.0
    """Seconds spent getting the environment (building it, or 0 when cached)."""
    test_s: float = 0.0
    """Seconds of the instance's set-up and test run."""

    def to_report(self) -> dict[str, Any]:
        """The official per-instance `report.json` content."""
        return {
            self.instance_id: {
                "patch_is_None": False,
                "patch_exists": not self.empty_patch,
                "patch_successfully_applied": self.patch_applied,
                "resolved": self.resolved,
                "tests_status": self.tests_status,
            }
        }


def prediction(instance_id: str, model_name: str, patch: str) -> dict[str, str]:
    """One line of an official `predictions.jsonl`."""
    return {"instance_id": instance_id, "model_name_or_path": model_name, "model_patch": patch}


def grade(
    instance: dict[str, Any],
    model_patch: str | None = None,
    *,
    repos_dir: Path | None = None,
    agent: Agent | None = None,
    timeout_s: float = 300.0,
    sandboxed: bool = True,
    keep_workdir: bool = False,
    build: BuildOptions | None = None,
) -> GradeResult:
    """Grade a model patch (or what `agent` does in the checkout) on one instance.

    `instance` has the official columns with FAIL_TO_PASS / PASS_TO_PASS as lists (what
    `tasks.swe.load_instances` returns). `repos_dir` holds `<owner>__<name>` repositories;
    None means the swe-bench-mini suite's (built if needed). `sandboxed=False` runs the tests
    in a plain subprocess of its own session (trusted patches only, e.g. gold patches).
    A row with an official specification (`tasks.swe.official.spec_for`) is graded in its
    official environment (`environments.swe_official`; `build` says what that may use).
    Never raises for a bad patch, an agent crash or a timeout: see `GradeResult.error`.
    """
    if (model_patch is None) == (agent is None):
        raise ValueError("grade() needs exactly one of model_patch and agent")
    iid = str(instance.get("instance_id"))
    result = GradeResult(instance_id=iid, model_patch=model_patch or "")
    try:
        check_instance(instance)
        check_patch(str(instance["test_patch"]), "the test_patch")
        for rel in _directives(str(instance["test_patch"])):  # pytest's arguments, our unlinks
            check_relpath(rel, "the test_patch", argument=True)
        spec = spec_for(instance)
    except (ValueError, KeyError) as e:
        result.error = f"the instance is refused: {e}"
        return result
    except OfficialUnavailable as e:
        result.error = str(e)
        return result
    if repos_dir is None:
        from tasks.swe import suite_repos_dir

        repos_dir = suite_repos_dir()
    base = str(instance["base_commit"])
    root = Path(tempfile.mkdtemp(prefix="skyrl-swe-"))
    root.chmod(0o711)  # the sandbox's uid must reach box/ inside it, and see nothing else
    log: list[str] = []
    try:
        src = Path(repos_dir) / str(instance["repo"]).replace("/", "__")
        if not (src / ".git").exists() and not (src / "HEAD").exists():
            result.error = f"no repository {src.name} under {repos_dir}"
            return result
        if agent is not None:
            _checkout(src, base, root / "agent")
            try:
                agent(root / "agent", instance)
            except Exception as e:  # an agent crash is a result, not our crash
                result.error = f"the agent raised {type(e).__name__}: {e}"
                return result
            result.model_patch = diff_tree(root / "agent", base, src, root / "diff")
        start = time.monotonic()
        if not result.model_patch.strip():
            result.empty_patch = True  # nothing runs, as upstream: no env is needed
        else:
            try:
                check_patch(result.model_patch, "the model patch")
            except ValueError as e:
                result.error = f"the model patch is refused: {e}"
                return result
            if spec is not None:
                _grade_official(instance, spec, src, root, result, log, timeout_s, build)
            else:
                work = _Checkout(src, base, root)
                env = _prepare_env(instance, work, root, result, log, sandboxed)
                if env is not None:
                    _grade_checkout(instance, work, root, env, result, log, timeout_s, sandboxed)
        result.duration_s = time.monotonic() - start
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        result.error = f"the harness failed: {e}"
    finally:
        result.log = "\n".join(log)
        if keep_workdir:
            result.workdir = root
        else:
            shutil.rmtree(root, ignore_errors=True)
    return result


class _Checkout:
    """The graded checkout: files in `root/box/repo` (what the sandbox sees), the repository
    in `root/git` (ours; it reads the source repository's objects). No `.git` is in the
    tree, so whatever a patch writes there is a file, never git's config or hooks."""

    def __init__(self, src: Path, base: str, root: Path) -> None:
        self.git_dir, self.tree, self.base = root / "git", root / "box" / "repo", base
        attach_objects(self.git_dir, src)
        self.tree.mkdir(parents=True)
        self.git("checkout", "-q", "-f", "--detach", base, "--")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_git(self.tree, *args, git_dir=self.git_dir, work_tree=self.tree, timeout=600)

    def git(self, *args: str) -> str:
        return git(self.tree, *args, git_dir=self.git_dir, work_tree=self.tree)

    def reset(self) -> None:
        self.git("reset", "-q", "--hard", "HEAD", "--")
        self.git("clean", "-q", "-ffdx")


def _grade_checkout(
    instance: dict[str, Any],
    work: _Checkout,
    root: Path,
    env: Path,
    result: GradeResult,
    log: list[str],
    timeout_s: float,
    sandboxed: bool,
) -> None:
    """Steps 4-7 of the module docstring (a non-empty patch), filling `result` in place."""
    test_files = _directives(str(instance["test_patch"]))
    if not _apply_model_patch(work, root, result.model_patch, result, log):
        return
    if not _apply_test_patch(work, root, str(instance["test_patch"]), test_files, result, log):
        return
    output, failure = _run_tests(root / "box", test_files, timeout_s, sandboxed, env / "site")
    log.append(output)
    result.test_results = parse_log_pytest(output)
    if failure:
        result.error = failure
        return
    result.tests_status = tests_status(instance, result.test_results)
    result.resolved = all(
        not result.tests_status[key]["failure"] for key in ("FAIL_TO_PASS", "PASS_TO_PASS")
    )


def _grade_official(
    instance: dict[str, Any],
    spec: Spec,
    src: Path,
    root: Path,
    result: GradeResult,
    log: list[str],
    timeout_s: float,
    build: BuildOptions | None,
) -> None:
    """A non-empty patch on an official row (`environments.swe_official`), in place."""

    build = build or BuildOptions.from_env()
    blog: list[str] = [f"specification: {spec.source}; python {spec.python}"]
    try:
        _official_grade(instance, spec, src, root, result, log, blog, timeout_s, build)
    finally:
        result.build_log = "\n".join(blog)


def _official_grade(
    instance: dict[str, Any],
    spec: Spec,
    src: Path,
    root: Path,
    result: GradeResult,
    log: list[str],
    blog: list[str],
    timeout_s: float,
    build: BuildOptions,
) -> None:
    from environments import swe_official as so
    from tasks.swe.official import parser, test_directives

    runtime = so.runtime_for(spec.python, build, blog)
    result.python_specified, result.python_used = spec.python, runtime.version
    result.python_mismatch = runtime.mismatch
    start = time.monotonic()
    try:
        env, built = so.ensure_env(instance, spec, src, runtime, build, blog)
    except so.SetupError as e:
        result.error = str(e)
        return
    result.python_env = "built" if built else "cached"
    if not built:
        blog.append(f"environment: cached in {env} (its build log: {env / 'build.log'})")
    result.env_build_s = time.monotonic() - start if built else 0.0
    start = time.monotonic()
    directives = test_directives(instance)
    output, failure = _official_run(instance, spec, src, root / "run", env, runtime, build,
                                    result.model_patch, directives, log, blog, timeout_s, result)  # fmt: skip # one call
    result.test_s = time.monotonic() - start
    if output is None:
        return  # result.error says why
    result.test_results = parser(instance, spec)(output)
    if failure:
        result.error = failure
        return
    expected = [*instance["FAIL_TO_PASS"], *instance["PASS_TO_PASS"]]
    if expected and not any(t in result.test_results for t in expected):
        # none of the graded tests ran: the model's fault only if they run without its patch
        log.append("no graded test has a status; the tests run once more without the model patch")
        base_out, _ = _official_run(instance, spec, src, root / "base", env, runtime, build,
                                    None, directives, log, blog, timeout_s, result)  # fmt: skip # one call
        base_results = parser(instance, spec)(base_out) if base_out is not None else {}
        if not any(t in base_results for t in expected):
            result.error = (
                f"the tests do not run even without the model patch: {so.crash_cause(output)}"
            )
            return
    result.tests_status = tests_status(instance, result.test_results)
    result.resolved = all(
        not result.tests_status[key]["failure"] for key in ("FAIL_TO_PASS", "PASS_TO_PASS")
    )
    if not result.resolved and not build.test_network and so.needs_network(output):
        result.note = "the tests reached for the network, which is off (--test-network grants it)"


def _official_run(
    instance: dict[str, Any],
    spec: Spec,
    src: Path,
    root: Path,
    env: Path,
    runtime: Any,
    build: BuildOptions,
    model_patch: str | None,
    directives: list[str],
    log: list[str],
    blog: list[str],
    timeout_s: float,
    result: GradeResult,
) -> tuple[str | None, str | None]:
    """Check out `base_commit` under `root`, apply `model_patch` (None: none), reset the test
    files and apply the test patch, set the instance up, run its tests. (output, failure);
    output None when it stopped before the tests (with `result.error` set)."""
    from environments import swe_official as so
    from tasks.swe.official import modified_files

    root.mkdir()
    work = _Checkout(src, str(instance["base_commit"]), root)
    if model_patch is not None and not _apply_model_patch(work, root, model_patch, result, log):
        return None, None
    test_files = modified_files(str(instance["test_patch"]))
    for rel in test_files:
        check_relpath(rel, "the test_patch", argument=True)
    if not _apply_test_patch(work, root, str(instance["test_patch"]), test_files, result, log):
        return None, None
    box = root / "box"
    so.copy_env(env, box)
    try:
        so.setup_instance(box, spec, runtime, build, blog, so.scm_version(src, work.base))
    except so.SetupError as e:
        result.error = str(e)
        return None, None
    output, failure = so.run_tests(box, spec, directives, runtime, build, timeout_s)
    log.append(output)
    return output, failure


def _apply_model_patch(
    work: _Checkout, root: Path, patch: str, result: GradeResult, log: list[str]
) -> bool:
    """Step 4: the model patch by the official ways; False with `result.error` if none works."""
    model_file = root / "model.patch"
    model_file.write_text(patch, encoding="utf-8")
    if not _apply(work, model_file, log):
        result.error = "the model patch does not apply (git apply and patch --fuzz=5 failed)"
        return False
    result.patch_applied = True
    return True


def _apply_test_patch(
    work: _Checkout,
    root: Path,
    test_patch: str,
    test_files: list[str],
    result: GradeResult,
    log: list[str],
) -> bool:
    """Step 5: `test_files` reset to `base_commit` (the official eval script's `git
    checkout <base> <test files>`), then the test patch; False with `result.error`."""
    for rel in test_files:
        _remove_in_tree(work.tree, rel)
        if work.run("cat-file", "-e", f"{work.base}:{rel}").returncode == 0:
            work.git("checkout", work.base, "--", rel)
    test_file = root / "test.patch"
    test_file.write_text(test_patch, encoding="utf-8")
    proc = work.run("apply", "--verbose", "--", str(test_file))
    log.append(
        f"$ git apply --verbose test.patch  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"
    )
    if proc.returncode != 0:
        result.error = "the test patch does not apply on top of the model patch"
        return False
    return True


def _remove_in_tree(tree: Path, rel: str) -> None:
    """Delete `tree/rel` (a checked relative path) without following a symlink: a symlink or
    file where the path needs a directory is itself removed (as git would replace it)."""
    here = tree
    for name in rel.split("/")[:-1]:
        here = here / name
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()
            return
        if not here.exists():
            return
    last = here / rel.split("/")[-1]
    if last.is_symlink() or last.is_file():
        last.unlink()
    elif last.is_dir():
        shutil.rmtree(last)


def tests_status(instance: dict[str, Any], results: dict[str, str]) -> dict[str, Any]:
    """The official `get_eval_tests_report`: each expected test as success or failure.

    A test is a success when PASSED or XFAIL, a failure when FAILED, ERROR or missing;
    SKIPPED lands in neither list, exactly as upstream.
    """
    failed = (TestStatus.FAILED.value, TestStatus.ERROR.value)
    report: dict[str, Any] = {}
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        tests = instance[key]
        report[key] = {
            "success": [t for t in tests if passed(results.get(t))],
            "failure": [t for t in tests if t not in results or results[t] in failed],
        }
    report["FAIL_TO_FAIL"] = {"success": [], "failure": []}
    report["PASS_TO_FAIL"] = {"success": [], "failure": []}
    return report


def report(
    results: Iterable[GradeResult], instances: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The official run report (`schema_version` 2): counts and sorted id lists.

    `instances` is the full dataset (its size is `total_instances`; those without a result
    are `incomplete_ids`); None means exactly the graded ones.
    """
    results = list(results)
    by_id = {r.instance_id: r for r in results}
    ids = [str(i["instance_id"]) for i in instances] if instances is not None else list(by_id)
    buckets: dict[str, set[str]] = {
        k: set()
        for k in ("completed", "incomplete", "empty_patch", "resolved", "unresolved", "error")
    }
    for iid in ids:
        r = by_id.get(iid)
        if r is None:
            buckets["incomplete"].add(iid)
        elif r.empty_patch:
            buckets["empty_patch"].add(iid)
        elif r.error is not None:
            buckets["error"].add(iid)
        else:
            buckets["completed"].add(iid)
            buckets["resolved" if r.resolved else "unresolved"].add(iid)
    return {
        "total_instances": len(ids),
        "submitted_instances": len(results),
        "completed_instances": len(buckets["completed"]),
        "resolved_instances": len(buckets["resolved"]),
        "unresolved_instances": len(buckets["unresolved"]),
        "empty_patch_instances": len(buckets["empty_patch"]),
        "error_instances": len(buckets["error"]),
        "completed_ids": sorted(buckets["completed"]),
        "incomplete_ids": sorted(buckets["incomplete"]),
        "empty_patch_ids": sorted(buckets["empty_patch"]),
        "submitted_ids": sorted(by_id),
        "resolved_ids": sorted(buckets["resolved"]),
        "unresolved_ids": sorted(buckets["unresolved"]),
        "error_ids": sorted(buckets["error"]),
        "schema_version": 2,
    }


def evaluate(
    instances: list[dict[str, Any]],
    predictions: Iterable[dict[str, Any]],
    *,
    repos_dir: Path | None = None,
    timeout_s: float = 300.0,
) -> list[GradeResult]:
    """Grade official-format predictions (`instance_id`, `model_patch`) against instances.

    Predictions for unknown instances are ignored, as upstream; instances without a
    prediction get no result (they are `incomplete_ids` in `report`).
    """
    patches = {str(p["instance_id"]): p.get("model_patch") or "" for p in predictions}
    return [
        grade(inst, patches[inst["instance_id"]], repos_dir=repos_dir, timeout_s=timeout_s)
        for inst in instances
        if inst["instance_id"] in patches
    ]


def env_dir(repo: str, version: str, python: str | None = None) -> Path:
    """Where the Python env of `repo` at `version` for `python` lives (built or not).

    `cache_dir()/swe-envs/<owner>__<name>-<version>-py<major><minor>`; `python` is the
    interpreter that runs the tests, by default the one a sandbox uses (the system one).
    """
    from tasks.cache import cache_dir

    check_instance({"repo": repo, "version": version, "instance_id": "x", "base_commit": "0" * 40})
    major, minor = _python_version(python or _system_python())
    name = f"{repo.replace('/', '__')}-{version}-py{major}{minor}"
    return cache_dir() / "swe-envs" / name


def ensure_env(
    repo: str,
    version: str,
    requirements: Path | None = None,
    *,
    python: str | None = None,
    cwd: Path | None = None,
    log: list[str] | None = None,
) -> tuple[Path, bool]:
    """The env dir of (repo, version, python), built if missing; and whether it was built now.

    Its `site/` holds the `requirements` file's packages (`pip install --target`, run in
    `cwd`; the file is one `safe_requirements` checked: names only) and pytest's. Built in a temp
    dir next to it and renamed into place under a file lock, so parallel graders (threads or
    processes) build it once and never see half of it. Raises `EnvBuildError` (one line) when
    pip fails; nothing is cached then.
    """
    python = python or _system_python()
    target = env_dir(repo, version, python)
    if (target / "site").is_dir():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (target / "site").is_dir():  # another grader built it while we waited
                return target, False
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
            try:
                _build_env(tmp, requirements, python, cwd or tmp, log if log is not None else [])
                try:
                    os.rename(tmp, target)  # atomic; fails if a lock-less builder won
                except OSError:
                    if not (target / "site").is_dir():
                        raise
                    return target, False
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # gone after a successful rename
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target, True


class EnvBuildError(RuntimeError):
    """An instance's Python env could not be built (the message is one line)."""


# ------------------------------------------------------------------------------ internals


def _checkout(src: Path, base: str, work: Path) -> None:
    """A checkout of `base` with its `.git`, for an agent: `base` and its history only, so
    later commits (where fixes live) never reach it. `base` is a checked commit id."""
    work.mkdir()
    git(work, "init", "-q")
    git(work, "fetch", "-q", "--no-tags", "--", str(src.resolve()), base)
    git(work, "checkout", "-q", "--detach", base, "--")


def _apply(work: _Checkout, patch_file: Path, log: list[str]) -> bool:
    """The model patch by the official ways in turn; `patch` runs by its full path with an
    empty environment (no `PATH`: it can start no `ed`, `get` or `co` from a patch)."""
    for argv in APPLY_CMDS:
        if argv[0] == "git":
            proc = work.run(*argv[1:], "--", str(patch_file))
        else:
            exe = shutil.which(argv[0])
            if exe is None:
                log.append(f"$ {' '.join(argv)} model.patch  (not installed)")
                continue
            proc = subprocess.run(
                [exe, *argv[1:], str(patch_file)],
                cwd=work.tree, env={"PATH": "/nonexistent", "LC_ALL": "C"},
                capture_output=True, text=True, errors="replace", timeout=120,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        log.append(
            f"$ {' '.join(argv)} model.patch  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"
        )
        if proc.returncode == 0:
            return True
        work.reset()
    return False


def _system_python() -> str:
    return next((p for p in SYSTEM_PYTHONS if os.access(p, os.X_OK)), sys.executable)


def _sandbox_python(sandbox: Sandbox | None) -> str:
    """The interpreter that runs the tests: the system one where `$HOME` is hidden (bwrap)
    or the sandbox runs as its own uid; else the current one (the tests see the host as we
    do)."""
    if sandbox is None or (sandbox.backend == "fallback" and sandbox.uid is None):
        return sys.executable
    return _system_python()


def _expected_python(sandboxed: bool) -> str:
    """`_sandbox_python` of the sandbox `_run_tests` will make, before it exists (the
    sandbox hands the work dir to its uid, which must wait until the git work is done)."""
    bwrap = os.environ.get(BACKEND_ENV, "auto") != "fallback" and bwrap_available()
    if sandboxed and (bwrap or os.geteuid() == 0):
        return _system_python()
    return sys.executable


@functools.cache
def _python_version(python: str) -> tuple[int, int]:
    if python == sys.executable:
        return sys.version_info.major, sys.version_info.minor
    code = "import sys; print(*sys.version_info[:2])"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        major, minor = out.stdout.split()
        return int(major), int(minor)
    except (OSError, subprocess.SubprocessError, ValueError):
        return sys.version_info.major, sys.version_info.minor  # it will fail visibly later


@functools.cache
def _has_pip(python: str) -> bool:
    argv = [python, "-m", "pip", "--version"]
    return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0


MAX_REQUIREMENTS_BYTES = 1 << 20


def _requirements(instance: dict[str, Any], work: Path, root: Path) -> Path | None:
    """The instance's `requirements` list, else the checkout's `requirements.txt` (a regular
    file), checked by `safe_requirements` and written to `root` (pip reads only our copy);
    None when there is neither. EnvBuildError (one line) for a refused line."""
    listed = instance.get("requirements")
    what = "the instance's requirements"
    if isinstance(listed, str):
        listed = listed.splitlines()
    if not listed:
        path, what = work / "requirements.txt", "requirements.txt"
        if path.is_symlink():
            raise EnvBuildError("requirements.txt is a symlink; a regular file is expected")
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            listed = f.read(MAX_REQUIREMENTS_BYTES).decode("utf-8", "replace").splitlines()
    try:
        lines = safe_requirements([str(line) for line in listed], what)
    except ValueError as e:
        raise EnvBuildError(str(e)) from None
    out = root / "requirements.txt"
    out.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return out


def _prepare_env(
    instance: dict[str, Any],
    work: _Checkout,
    root: Path,
    result: GradeResult,
    log: list[str],
    sandboxed: bool,
) -> Path | None:
    """Step 4's prelude: the instance's cached Python env, built from the requirements of
    the clean checkout at `base_commit` if missing (so a model patch never changes what
    lands in the cache); None with `result.error` set when it cannot be built. pip runs in
    `root`, never in the checkout: nothing of the repository is built."""
    repo, version = str(instance["repo"]), str(instance.get("version") or "none")
    start = time.monotonic()
    try:
        env, built = ensure_env(
            repo,
            version,
            _requirements(instance, work.tree, root),
            python=_expected_python(sandboxed),
            cwd=root,
            log=log,
        )
    except EnvBuildError as e:
        log.append(f"python env: failed: {e}")
        result.error = f"the Python env of {repo} {version} could not be built: {e}"
        return None
    result.python_env = "built" if built else "cached"
    took = f" in {time.monotonic() - start:.1f} s" if built else ""
    log.append(f"python env: {result.python_env} {env}{took}")
    return env


def _build_env(
    dest: Path, requirements: Path | None, python: str, cwd: Path, log: list[str]
) -> None:
    """Fill `dest/site`: the requirements (pip), then pytest's packages where pip left none."""
    site = dest / "site"
    site.mkdir()
    if requirements is not None:
        _pip_install(site, requirements, python, cwd, log)
    for name in PYTEST_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            if not (site / name).exists():
                shutil.copytree(origin.parent, site / name)
        elif not (site / origin.name).exists():
            shutil.copy2(origin, site / origin.name)
    for dist in PYTEST_DISTRIBUTIONS:
        if next(site.glob(f"{dist}-*.dist-info"), None) is not None:
            continue  # the requirements brought their own
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = importlib.metadata.version(dist)
            info = site / f"{dist}-{version}.dist-info"
            info.mkdir()
            meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
            (info / "METADATA").write_text(meta)
    # readable by everyone (sandbox uids read it through hard links), writable by us alone
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode & 0o7755
            path.chmod(mode | (0o555 if path.is_dir() else 0o444))


def _pip_install(site: Path, requirements: Path, python: str, cwd: Path, log: list[str]) -> None:
    """`pip install --target site -r requirements` for `python`'s version; EnvBuildError if
    it fails. Uses `python`'s pip, else the current interpreter's (binary wheels only when
    the versions differ)."""
    pip_python = python if _has_pip(python) else sys.executable
    argv = [pip_python, "-m", "pip", "install", "--target", str(site), "-r", str(requirements)]
    argv += ["--no-input", "--disable-pip-version-check", "--no-warn-script-location"]
    index = os.environ.get(PIP_INDEX_ENV)
    argv += ["--index-url", index] if index else ["--no-index"]
    wheels = os.environ.get(PIP_FIND_LINKS_ENV)
    argv += ["--find-links", wheels] if wheels else []
    argv += ["--only-binary=:all:"]  # a wheel installs by unpacking; an sdist runs its build
    if _python_version(pip_python) != _python_version(python):
        argv += ["--python-version", "{}.{}".format(*_python_version(python))]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise EnvBuildError(f"pip install timed out after {PIP_TIMEOUT_S:g} s") from e
    except OSError as e:
        raise EnvBuildError(f"pip could not be started: {e}") from e
    out = f"{proc.stdout}{proc.stderr}"
    log.append(f"$ {' '.join(argv)}  (exit {proc.returncode})\n{out[-4000:]}")
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:")]
        reason = (errors or lines or ["no output"])[-1][:300]
        raise EnvBuildError(
            f"pip install -r {requirements.name} failed (exit {proc.returncode}): {reason}"
        )


def _give_site(env_site: Path, dest: Path, link: bool) -> None:
    """Copy the cached `site/` to `dest`: hard links (same inodes, ours and read-only to
    the sandbox uid) when `link`, else (or across filesystems) real copies."""

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(
        env_site, dest, symlinks=True, copy_function=link_or_copy if link else shutil.copy2
    )


def _run_tests(
    root: Path, test_files: list[str], timeout_s: float, sandboxed: bool, site: Path
) -> tuple[str, str | None]:
    """Run pytest on the test files with the env's `site` (the cached one) importable;
    return (output, the error that stopped it or None)."""
    env = dict(TEST_ENV)
    if not sandboxed:
        output, code = run_tests_plain(
            str(root / "repo"), test_files, timeout_s, pythonpath=str(site)
        )
        return output, (
            f"the tests timed out after {timeout_s:g} s" if code is None else _crash(code)
        )
    limits = Limits(
        cpu_seconds=int(timeout_s) + 1,
        memory_mb=4096,
        output_bytes=4_000_000,
        timeout_s=timeout_s,
    )
    sandbox = Sandbox(limits=limits, workdir=root)
    try:
        python = _sandbox_python(sandbox)
        # after Sandbox() handed the work dir to its uid: the links stay ours, read-only
        _give_site(site, root / "site", link=sandbox.uid is not None)
        env["PYTHONPATH"] = f"{sandbox.inner_workdir}/site"
        res = sandbox.run(pytest_argv(test_files, python), cwd="repo", env=env, timeout=timeout_s)
    finally:
        sandbox.close()
    output = (
        f"$ pytest -rA {' '.join(test_files)}  (exit {res.returncode})\n{res.stdout}{res.stderr}"
    )
    if res.timed_out:
        return output, f"the tests timed out after {timeout_s:g} s"
    if res.truncated:
        return output, f"the test output passed {limits.output_bytes} bytes"
    return output, _crash(res.returncode)


def _crash(returncode: int | None) -> str | None:
    """An error for a pytest run that broke down (not one whose tests merely failed)."""
    if returncode is not None and returncode < 0:
        return f"the test run was killed by signal {-returncode}"
    if returncode in (3, 4):  # pytest's INTERNALERROR and usage error
        return f"pytest crashed (exit {returncode}); see the log"
    if returncode in (126, 127):  # from `env`: the interpreter could not be started
        return f"the test interpreter could not be started (exit {returncode}); see the log"
    return None
