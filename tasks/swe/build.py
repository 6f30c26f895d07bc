"""Materialise swe-bench-mini: one git repository per mini repo, and `instances.jsonl`.

Every commit gets fixed author/committer names, emails and dates and a clean git config, so
its hash (an instance's `base_commit`) is the same on every machine. The gold `patch` and
the `test_patch` are `git diff`s of the edited checkout against `base_commit`;
FAIL_TO_PASS and PASS_TO_PASS come from actually running the instance's test files before
and after the gold patch, as the official dataset was made.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tasks.swe.source import OWNER, InstanceSource, RepoSource, apply_edits
from tasks.swe.testrun import directives, parse_log_pytest, passed, run_tests_plain

TEST_TIMEOUT_S = 120.0
"""Wall-clock limit of one build-time test run."""


GIT_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.autocrlf=false",
    "core.symlinks=true",
    "core.untrackedCache=false",
    "commit.gpgsign=false",
    "submodule.recurse=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.https.allow=always",
    "gc.auto=0",
    "maintenance.auto=false",
)
"""Settings of every host git call. Command-line settings win over every config file, so
even a repository's own config cannot turn on a command (fsmonitor, hooks, a global
attributes file) or a transport other than local paths and https."""
_PASS_ENV = ("PATH", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy",
             "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR")  # fmt: skip # a table of values, laid out by hand


@functools.cache
def _empty_home() -> str:
    """`$HOME` for git: an empty dir of ours (no `.gitconfig`, no `.config/git/`)."""
    home = tempfile.mkdtemp(prefix="skyrl-git-home-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment in which git reads no configuration but the repository's own: none of
    the system's, the user's or `$HOME`'s, no `GIT_*` variable of ours, no askpass."""
    env = {k: v for k, v in os.environ.items() if k in _PASS_ENV}
    env.setdefault("PATH", os.defpath)
    env.update(
        {
            "HOME": _empty_home(),
            "XDG_CONFIG_HOME": _empty_home(),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
            "TZ": "UTC",
        }
    )
    env.update(extra or {})
    return env


def run_git(
    cwd: Path,
    *args: str,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 1800.0,
) -> subprocess.CompletedProcess[str]:
    """The one way skyrl runs git on the host: `GIT_CONFIG` settings, `git_env()`, and
    `git_dir`/`work_tree` when the repository lives apart from its files (a tree an episode
    wrote is never a repository to us: its `.git` is data). Callers end options with `--`."""
    argv = ["git", *(x for setting in GIT_CONFIG for x in ("-c", setting))]
    if git_dir is not None:
        argv.append(f"--git-dir={git_dir}")
    if work_tree is not None:
        argv.append(f"--work-tree={work_tree}")
    return subprocess.run(
        [*argv, *args],
        cwd=cwd,
        env=env or git_env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def git(
    cwd: Path,
    *args: str,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """`run_git`; return stdout; RuntimeError with git's message on failure."""
    proc = run_git(cwd, *args, git_dir=git_dir, work_tree=work_tree, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def build_repo(source: RepoSource, dest: Path) -> dict[str, str]:
    """Create the git repository of one mini repo at `dest`; return commit dir -> hash."""
    dest.mkdir(parents=True)
    git(dest, "init", "-q", "-b", "main")
    hashes = {}
    for commit in source.commits:
        for rel, data in source.overlay(commit).items():
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        git(dest, "add", "-A")
        who = {
            "GIT_AUTHOR_NAME": source.author,
            "GIT_AUTHOR_EMAIL": source.email,
            "GIT_AUTHOR_DATE": commit.date,
            "GIT_COMMITTER_NAME": source.author,
            "GIT_COMMITTER_EMAIL": source.email,
            "GIT_COMMITTER_DATE": commit.date,
        }
        git(dest, "commit", "-q", "--no-verify", "-m", commit.message, env=git_env(who))
        hashes[commit.dir] = git(dest, "rev-parse", "HEAD").strip()
    return hashes


DIFF_EXCLUDE = ":(exclude)*.pyc"
"""Bytecode an agent's test runs left behind is not part of a diff."""
MAX_TREE_BYTES = 2 << 30
"""The most file data `diff_tree` copies out of an episode's tree."""


def diff_against(work: Path, base: str) -> str:
    """Everything changed in a checkout of our own since `base` (new files included), as
    `git diff`. Only for trees nothing hostile wrote (the suite builder's)."""
    git(work, "add", "-A", "--", ".", DIFF_EXCLUDE)
    return git(work, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", base)


def objects_dir(repo: Path) -> Path:
    """The object store of a clone (`.git/objects`) or a bare/mirror repository."""
    for path in (repo / ".git" / "objects", repo / "objects"):
        if path.is_dir() and not path.is_symlink():
            return path.resolve()
    raise RuntimeError(f"{repo} is not a git repository (no objects dir)")


def attach_objects(git_dir: Path, source: Path) -> None:
    """A fresh repository at `git_dir` (ours) that reads `source`'s objects in place
    (alternates): no upload-pack runs, nothing of `source` but its objects is read."""
    git(git_dir.parent, "init", "-q", "--bare", "--", str(git_dir))
    (git_dir / "objects" / "info" / "alternates").write_text(f"{objects_dir(source)}\n")


def diff_tree(tree: Path, base: str, source: Path, scratch: Path) -> str:
    """Everything changed in `tree` (an episode's checkout: hostile) since `base`, as
    `git diff`, without git ever treating anything in `tree` as a repository.

    The files are copied out first (`copy_plain`: every `.git` at any depth left behind,
    symlinks copied as links, never followed, special files skipped), then diffed in a
    repository of our own under `scratch` whose objects are `source`'s (the trusted repo
    the checkout came from): the episode's config, hooks, index and objects are never read.
    """
    copy, git_dir = scratch / "tree", scratch / "git"
    copy_plain(tree, copy)
    attach_objects(git_dir, source)
    git(copy, "read-tree", base, git_dir=git_dir, work_tree=copy)
    git(copy, "add", "-A", "--", ".", DIFF_EXCLUDE, git_dir=git_dir, work_tree=copy)
    diff = ("diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", base, "--")
    return git(copy, *diff, git_dir=git_dir, work_tree=copy)


def copy_plain(src: Path, dest: Path, limit: int = MAX_TREE_BYTES) -> None:
    """Copy a hostile tree's plain content: directories, regular files (content and the
    executable bit) and symlinks (as links). Nothing named `.git` (any case), nothing else
    (fifos, sockets, devices); symlinks are never followed. RuntimeError past `limit` bytes."""
    total = 0
    dest.mkdir(parents=True)
    stack = [(src, dest)]
    while stack:
        here, there = stack.pop()
        with os.scandir(here) as entries:
            for entry in entries:
                if entry.name.lower() == ".git":
                    continue
                target = there / entry.name
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), target)
                elif entry.is_dir(follow_symlinks=False):
                    target.mkdir()
                    stack.append((Path(entry.path), target))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    if total > limit:
                        raise RuntimeError(f"the work tree holds more than {limit >> 20} MiB")
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    with os.fdopen(fd, "rb") as fin, open(target, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                    if entry.stat(follow_symlinks=False).st_mode & 0o111:
                        target.chmod(0o755)


def _reset(work: Path, base: str) -> None:
    git(work, "reset", "-q", "--hard", base, "--")
    git(work, "clean", "-q", "-ffdx")


def make_patches(
    source: RepoSource, inst: InstanceSource, repo_dir: Path, base: str, work: Path
) -> tuple[str, str]:
    """(patch, test_patch) of one instance, each a `git diff` against its base commit."""
    where = f"{source.root / 'meta.toml'} instance {inst.number}"
    git(work.parent, "clone", "-q", "--no-checkout", "--", str(repo_dir), work.name)
    git(work, "checkout", "-q", "--detach", base, "--")
    apply_edits(work, inst.tests, where)
    test_patch = diff_against(work, base)
    _reset(work, base)
    apply_edits(work, inst.fix, where)
    patch = diff_against(work, base)
    _reset(work, base)
    return patch, test_patch


def classify_tests(work: Path, base: str, patch: str, test_patch: str, where: str) -> dict:
    """Run the test files before and after the gold patch: FAIL_TO_PASS and PASS_TO_PASS.

    Raises RuntimeError when the gold patch leaves a test failing or fixes nothing, so a
    broken instance can never reach `instances.jsonl`.
    """
    files = directives(test_patch)
    test_file, gold_file = work.with_suffix(".test.patch"), work.with_suffix(".gold.patch")
    test_file.write_text(test_patch)
    gold_file.write_text(patch)
    git(work, "apply", "--", str(test_file))
    before_log, code1 = run_tests_plain(str(work), files, TEST_TIMEOUT_S)
    git(work, "apply", "--", str(gold_file))
    after_log, code2 = run_tests_plain(str(work), files, TEST_TIMEOUT_S)
    if code1 is None or code2 is None:
        raise RuntimeError(f"{where}: the tests timed out at build time")
    before, after = parse_log_pytest(before_log), parse_log_pytest(after_log)
    failing = sorted(t for t, s in after.items() if not passed(s))
    if failing or not after:
        raise RuntimeError(f"{where}: with the gold patch these tests fail: {failing}\n{after_log}")
    f2p = [t for t in after if not passed(before.get(t))]
    p2p = [t for t in after if passed(before.get(t))]
    if not f2p:
        raise RuntimeError(f"{where}: no test fails before the gold patch\n{before_log}")
    return {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p}


def build_instances(suite_dir: Path, sources: list[RepoSource], workers: int = 4) -> list[dict]:
    """Build every repository under `suite_dir/repos` and return the instance records."""
    repos = suite_dir / "repos"
    scratch = Path(tempfile.mkdtemp(prefix=".scratch-", dir=suite_dir))
    jobs: list[tuple[RepoSource, InstanceSource, Path, dict[str, str]]] = []
    for source in sources:
        repo_dir = repos / source.repo.replace("/", "__")
        hashes = build_repo(source, repo_dir)
        jobs += [(source, inst, repo_dir, hashes) for inst in source.instances]

    def one(job: tuple[RepoSource, InstanceSource, Path, dict[str, str]]) -> dict[str, Any]:
        source, inst, repo_dir, hashes = job
        base = hashes[inst.base]
        work = scratch / f"{source.name}-{inst.number}"
        patch, test_patch = make_patches(source, inst, repo_dir, base, work)
        where = f"{source.repo} instance {inst.number}"
        tests = classify_tests(work, base, patch, test_patch, where)
        version = source.commit(inst.base).version
        # the environment of a version is set up at its latest commit (as upstream does)
        setup = [hashes[c.dir] for c in source.commits if c.version == version][-1]
        return {
            "instance_id": f"{OWNER}__{source.name}-{inst.number}",
            "repo": source.repo,
            "base_commit": base,
            "patch": patch,
            "test_patch": test_patch,
            "problem_statement": inst.problem_statement,
            "hints_text": inst.hints_text,
            "created_at": inst.created_at,
            "version": version,
            "FAIL_TO_PASS": json.dumps(tests["FAIL_TO_PASS"]),
            "PASS_TO_PASS": json.dumps(tests["PASS_TO_PASS"]),
            "environment_setup_commit": setup,
        }

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, os.cpu_count() or 1))) as pool:
            return list(pool.map(one, jobs))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
