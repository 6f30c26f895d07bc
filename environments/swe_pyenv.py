"""The Python environment of a SWE-bench-format instance of this project's own suites
(`environments.swe_harness`), and which interpreter runs its tests.

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
from pathlib import Path
from typing import Any

from environments.sandbox import BACKEND_ENV, Sandbox, bwrap_available
from tasks.swe.checks import check_instance, safe_requirements

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


def env_dir(repo: str, version: str, python: str | None = None) -> Path:
    """Where the Python env of `repo` at `version` for `python` lives (built or not).

    `cache_dir()/swe-envs/<owner>__<name>-<version>-py<major><minor>`; `python` is the
    interpreter that runs the tests, by default the one a sandbox uses (the system one).
    """
    from tasks.cache import cache_dir

    check_instance({"repo": repo, "version": version, "instance_id": "x", "base_commit": "0" * 40})
    major, minor = python_version(python or system_python())
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
    python = python or system_python()
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


def system_python() -> str:
    return next((p for p in SYSTEM_PYTHONS if os.access(p, os.X_OK)), sys.executable)


def sandbox_python(sandbox: Sandbox | None) -> str:
    """The interpreter that runs the tests: the system one where `$HOME` is hidden (bwrap)
    or the sandbox runs as its own uid; else the current one (the tests see the host as we
    do)."""
    if sandbox is None or (sandbox.backend == "fallback" and sandbox.uid is None):
        return sys.executable
    return system_python()


def expected_python(sandboxed: bool) -> str:
    """`sandbox_python` of the sandbox `_run_tests` will make, before it exists (the
    sandbox hands the work dir to its uid, which must wait until the git work is done)."""
    bwrap = os.environ.get(BACKEND_ENV, "auto") != "fallback" and bwrap_available()
    if sandboxed and (bwrap or os.geteuid() == 0):
        return system_python()
    return sys.executable


@functools.cache
def python_version(python: str) -> tuple[int, int]:
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


def requirements_file(instance: dict[str, Any], work: Path, root: Path) -> Path | None:
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
    if python_version(pip_python) != python_version(python):
        argv += ["--python-version", "{}.{}".format(*python_version(python))]
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


def give_site(env_site: Path, dest: Path, link: bool) -> None:
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
