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

Which Python runs the tests, and the instance's Python env it imports from:
`environments.swe_pyenv`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.sandbox import Limits, Sandbox
from environments.swe_official import BuildOptions
from environments.swe_pyenv import (
    EnvBuildError,
    ensure_env,
    env_dir,
    expected_python,
    give_site,
    requirements_file,
    sandbox_python,
)
from tasks.swe.build import attach_objects, diff_tree, git, run_git
from tasks.swe.checks import check_instance, check_patch, check_relpath
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
            requirements_file(instance, work.tree, root),
            python=expected_python(sandboxed),
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
        python = sandbox_python(sandbox)
        # after Sandbox() handed the work dir to its uid: the links stay ours, read-only
        give_site(site, root / "site", link=sandbox.uid is not None)
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
