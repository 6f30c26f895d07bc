"""Grade real SWE-bench rows as the official harness does, without Docker: the official
environment of the row's (repository, version), the repository installed, the official
test command, directives and log parser.

    from environments.swe_official import BuildOptions
    grade(row, patch, repos_dir=..., build=BuildOptions(network=True))   # swe_harness.grade

`environments.swe_harness.grade` takes this path for every row `tasks.swe.official.spec_for`
knows (the swebench table, or the row's own `spec`). One grading:

1. **Python.** The specification's version, from the host (`/usr/bin/python3.9`, ...) or a
   Debian root file system whose `python3` is that version (`environments.rootfs`:
   bullseye for 3.9, bookworm 3.11, trixie 3.13), built once with the network allowed.
   Neither: the host's Python runs and the result says `python_mismatch`.
2. **Environment** (cached per repository, version, `environment_setup_commit`, Python and
   specification, under `cache_dir()/swe-envs/official/`): in a build sandbox, a `/usr/local`
   of its own that stands in for the official conda env: `python` there, and every package
   installed into it (`PYTHONUSERBASE=/usr/local`, pip's user scheme). Not a venv: a venv's
   packages are lost to a symlink of its interpreter made elsewhere, and tox-current-env
   (Sphinx's test command) runs the tests through such a symlink; a conda env, like this,
   is a real interpreter prefix. pip is upgraded as a new conda env has it, then the
   specification's `packages` (`requirements.txt` read from the repository at
   `environment_setup_commit`; a conda list through pip) and `pip_packages`; sdists build
   there, inside the sandbox. pip reads none of the machine's configuration
   (`PIP_CONFIG_FILE=/dev/null`); it reaches the package index only when the build network
   is allowed (`--build-network`), else `--no-index` with the user's wheel folder. The
   build tools an editable install needs offline are kept in `/usr/local/.skyrl-wheels`.
3. **Instance set-up**, in a copy of that `/usr/local`: the checkout at `base_commit` is
   `/testbed`;
   `MAP_REPO_TO_INSTALL`, `pre_install` (apt-get lines are skipped: the root file system
   has the build tools) and `install` run there, as the official instance image does.
4. **Evaluation**: the model patch is applied on the host (`swe_harness`), the test files
   reset and the test patch applied; then `eval_commands` and `test_cmd` + the official
   directives run in `/testbed`, network off unless `--test-network`. The official log
   parser reads the statuses. The eval script's second `install` is not run: the editable
   install of step 3 already points at the patched tree (for a compiled extension it
   would rebuild; no such row is in the measured set).
5. **Outcome**: resolved when every FAIL_TO_PASS and PASS_TO_PASS test passes (official
   rules). When no test status could be read at all, the tests run once more without the
   model patch: if they run there, the model patch broke collection (unresolved, as
   upstream); if not, the environment is at fault (`error`, with its cause).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.rootfs import RootfsError, RootfsSpec, ensure_rootfs, python_release
from environments.sandbox import BACKEND_ENV, Limits, Sandbox, bwrap_available
from environments.swe_pyenv import PIP_FIND_LINKS_ENV, PIP_INDEX_ENV  # one pair for both paths
from tasks.swe.build import run_git
from tasks.swe.official import Spec, conda_packages, requirements

ROOTFS_PACKAGES = ("python3", "python3-pip", "python3-dev", "build-essential",
                   "git", "patch", "ca-certificates", "locales")  # fmt: skip # a package list
"""What a root file system for SWE-bench rows holds (the official images' build tools)."""
BUILD_TOOLS = ("setuptools", "wheel", "setuptools_scm[toml]")
"""Kept as wheels in every env, for an editable install without the network."""
WHEELS = ".skyrl-wheels"
RESOLVE_BEFORE = "2025-01-01T00:00:00Z"
"""Default of `BuildOptions.resolve_before` (the swebench 4.x images were built in 2024)."""
BUILD_TIMEOUT_S = 3600.0
LAYOUT = 3
"""Bumped when what an env dir holds changes (2: a `/usr/local`, not a venv; 3: pip of today)."""
SETUP_TIMEOUT_S = 1200.0
NETWORK_ERRORS = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Network is unreachable"
    r"|Failed to establish a new connection|Max retries exceeded|nodename nor servname"
)
"""What a test that reached for the network prints when it has none."""


@dataclass(frozen=True)
class BuildOptions:
    """What an official grading may use beyond the sandbox."""

    network: bool = False
    """Environment builds (pip, the Debian mirror) may use the network."""
    test_network: bool = False
    """The tests may use the network (the official images have it)."""
    index_url: str | None = None
    """The package index of builds (default PyPI's); implies `network`."""
    find_links: str | None = None
    """A folder of the user's wheels/sdists builds may install from."""
    resolve_before: str | None = RESOLVE_BEFORE
    """pip considers only what PyPI had before this date (`--uploaded-prior-to`), as when
    the official images were built: later releases drop a Python or a module the old code
    imports (docutils 0.22 dropped `roman`, which Sphinx 3 needs). Not applied to a custom
    index (its pages may lack upload times); None: today's PyPI."""

    @classmethod
    def from_env(cls, **kw: Any) -> BuildOptions:
        """Defaults from `$SKYRL_SWE_PIP_INDEX` / `$SKYRL_SWE_PIP_FIND_LINKS`, then `kw`."""
        base: dict[str, Any] = {
            "index_url": os.environ.get(PIP_INDEX_ENV) or None,
            "find_links": os.environ.get(PIP_FIND_LINKS_ENV) or None,
        }
        base.update({k: v for k, v in kw.items() if v is not None})
        base["network"] = bool(base.get("network") or base["index_url"])
        return cls(**base)


@dataclass(frozen=True)
class Runtime:
    """The interpreter an environment is made with."""

    python: str
    """Its path as sandboxed commands see it."""
    version: str
    """"3.9"."""
    root: Path | None
    """The root file system it lives in (None: the host's)."""
    mismatch: str | None = None
    """Set when it is not the specified version: "3.9 specified, 3.11 used (why)"."""

    def key(self) -> str:
        return f"py{self.version.replace('.', '')}-" + (self.root.name if self.root else "host")


class SetupError(RuntimeError):
    """An environment or an instance set-up failed (the message is one sentence)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


# ------------------------------------------------------------------------------ Python


def _host_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip # one call
    return out.stdout.strip()


def runtime_for(version: str, build: BuildOptions, log: list[str]) -> Runtime:
    """The interpreter for `version`: the host's, else a Debian root file system's, else
    the host's default with `mismatch` saying why."""
    for path in (f"/usr/bin/python{version}",):  # /usr/local is the env's own in a sandbox
        if os.access(path, os.X_OK):
            return Runtime(path, version, None)
    why = f"no Debian release has Python {version}"
    release = python_release(version)
    if release is not None:
        if os.environ.get(BACKEND_ENV) == "fallback" or not bwrap_available():
            why = "a root file system needs the bwrap sandbox"
        else:
            try:
                root = ensure_rootfs(
                    RootfsSpec(release, ROOTFS_PACKAGES), network=build.network, log=log
                )
                return Runtime(f"/usr/bin/python{version}", version, root)
            except RootfsError as e:
                why = str(e)
    host = "/usr/bin/python3"
    used = _host_version(host)
    log.append(f"python: {version} specified, {used} used: {why}")
    return Runtime(host, used, None, mismatch=f"{version} specified, {used} used ({why})")


# ------------------------------------------------------------------------------ sandboxes


def _sandbox(box: Path, runtime: Runtime, *, network: bool, timeout: float) -> Sandbox:
    limits = Limits(cpu_seconds=int(timeout) + 1, memory_mb=6144, processes=512,
                    file_size_mb=1024, disk_mb=2048, output_bytes=8_000_000, timeout_s=timeout)  # fmt: skip # limits read as one table
    sandbox = Sandbox(limits=limits, workdir=box)
    sandbox.system_root = runtime.root
    sandbox.network = network
    sandbox.view = ["--bind", str(box / "local"), "/usr/local"]
    if (box / "repo").is_dir():
        sandbox.view += ["--bind", str(box / "repo"), "/testbed"]
    return sandbox


def _pip_env(build: BuildOptions, network: bool) -> dict[str, str]:
    """pip's settings in a sandbox: none of the machine's configuration files, the user's
    index or wheel folder, the env's own build-tool wheels."""
    env = {"PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1", "PIP_ROOT_USER_ACTION": "ignore",
           "PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
           "PYTHONUSERBASE": "/usr/local", "PIP_USER": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1"}  # fmt: skip # one mapping
    links = [f"/usr/local/{WHEELS}"] + (["/find-links"] if build.find_links else [])
    env["PIP_FIND_LINKS"] = " ".join(links)
    if not network:
        env["PIP_NO_INDEX"] = "1"
    elif build.index_url:
        env["PIP_INDEX_URL"] = build.index_url
    elif build.resolve_before:
        env["PIP_UPLOADED_PRIOR_TO"] = build.resolve_before
    if os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
        env["PIP_CERT"] = env["SSL_CERT_FILE"] = "/etc/ssl/certs/ca-certificates.crt"
    return env


def _run(sandbox: Sandbox, script: str, env: dict[str, str], timeout: float, build: BuildOptions, log: list[str], what: str) -> str:  # fmt: skip # one signature
    """Run a bash script in the sandbox; its output; SetupError naming `what` if it fails."""
    view = ["--ro-bind", build.find_links, "/find-links"] if build.find_links else []
    res = sandbox.run(["bash", "-c", script], env=env, timeout=timeout, cwd="", view=view)
    out = res.stdout + res.stderr
    log.append(f"$ {what}  (exit {res.returncode})\n{out[-6000:]}")
    if res.timed_out:
        raise SetupError(f"{what} timed out after {timeout:g} s")
    if res.returncode != 0:
        errors = [x.strip() for x in out.splitlines() if x.strip().startswith("ERROR")]
        lines = errors or [x.strip() for x in out.splitlines() if x.strip()] or ["no output"]
        raise SetupError(f"{what} failed (exit {res.returncode}): {lines[-1][:240]}", out)
    return out


# ------------------------------------------------------------------------------ the env


def env_key(instance: dict[str, Any], spec: Spec, runtime: Runtime, build: BuildOptions) -> str:
    commit = str(instance.get("environment_setup_commit") or instance["base_commit"])
    text = json.dumps([LAYOUT, spec.packages, spec.pip_packages, spec.python, build.resolve_before])
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    name = str(instance["repo"]).replace("/", "__")
    return f"{name}-{instance.get('version')}-{commit[:12]}-{runtime.key()}-{digest}"


def _read_at(src: Path, commit: str, path: str) -> str | None:
    proc = run_git(src, "show", f"{commit}:{path}", git_dir=src if (src / "HEAD").exists() and not (src / ".git").exists() else None, timeout=120)  # fmt: skip # one call
    return proc.stdout if proc.returncode == 0 else None


def _build_requires(src: Path, commit: str) -> list[str]:
    text = _read_at(src, commit, "pyproject.toml")
    try:
        requires = tomllib.loads(text or "").get("build-system", {}).get("requires", [])
    except tomllib.TOMLDecodeError:
        return []
    return [str(r) for r in requires if isinstance(r, str)]


def ensure_env(
    instance: dict[str, Any], spec: Spec, src: Path, runtime: Runtime, build: BuildOptions,
    log: list[str],
) -> tuple[Path, bool]:  # fmt: skip # one signature
    """The cached env dir (its `local/`), built now if missing; and whether it was built.
    SetupError (one sentence) when it cannot be."""
    import fcntl

    from tasks.cache import cache_dir

    target = cache_dir() / "swe-envs" / "official" / env_key(instance, spec, runtime, build)
    if (target / "local" / "bin").is_dir():
        return target, False
    if not os.access(runtime.python, os.X_OK) and runtime.root is None:
        raise SetupError(f"no {runtime.python} here to make the environment with")
    if spec.packages == "environment.yml":
        raise SetupError(
            f"the environment of {instance['repo']} {instance.get('version')} is a conda "
            "environment.yml, which needs conda (not here); --backend docker runs it"
        )
    commit = str(instance.get("environment_setup_commit") or instance["base_commit"])
    reqs = ""
    if spec.packages == "requirements.txt":
        try:
            reqs = requirements(spec, lambda p: _read_at(src, commit, p))
        except ValueError as e:
            raise SetupError(f"the requirements could not be read: {e}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "local" / "bin").is_dir():
            return target, False
        box = Path(tempfile.mkdtemp(prefix="skyrl-swe-env-"))  # sandbox uids reach /tmp
        box.chmod(0o711)
        (box / "local").mkdir()
        (box / "requirements.txt").write_text(reqs, encoding="utf-8")
        lines = ["set -eux", f"mkdir -p /usr/local/bin /usr/local/{WHEELS}",
                 f"ln -s {runtime.python} /usr/local/bin/python",
                 f"ln -s {runtime.python} /usr/local/bin/python3", "python -m pip --version"]  # fmt: skip # the script, line by line
        pip = "python -m pip install"
        if build.network:  # pip first, to today's: older ones lack --uploaded-prior-to
            lines.append(f"env -u PIP_UPLOADED_PRIOR_TO {pip} --upgrade pip || true")
            lines.append(f"{pip} --upgrade setuptools wheel || {pip} --upgrade setuptools || true")
        if reqs.strip():
            lines.append(f"{pip} -r requirements.txt")
        if spec.packages and spec.packages not in ("requirements.txt", "environment.yml"):
            lines.append(f"{pip} {' '.join(shlex.quote(p) for p in conda_packages(spec.packages))}")
        if spec.pip_packages:
            lines.append(f"{pip} {' '.join(shlex.quote(p) for p in spec.pip_packages)}")
        if build.network:
            tools = [*BUILD_TOOLS, *_build_requires(src, commit)]
            for tool in tools:  # best effort: an index may lack one
                q = shlex.quote(tool)
                lines.append(f"python -m pip download -q -d /usr/local/{WHEELS} {q} || true")
        start = time.monotonic()
        sandbox = _sandbox(box, runtime, network=build.network, timeout=BUILD_TIMEOUT_S)
        try:
            _run(sandbox, "\n".join(lines), _pip_env(build, build.network), BUILD_TIMEOUT_S, build, log,
                 f"building the environment of {instance['repo']} {instance.get('version')}")  # fmt: skip # one call
        except SetupError:
            shutil.rmtree(box, ignore_errors=True)
            raise
        finally:
            sandbox.close()
        log.append(f"environment built in {time.monotonic() - start:.1f} s: {target}")
        for path in [box, *box.rglob("*")]:  # ours, readable by every sandbox uid
            os.lchown(path, os.getuid(), os.getgid())
        (box / "requirements.txt").unlink()
        (box / "build.log").write_text("\n".join(log), encoding="utf-8")
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        shutil.move(str(box / "local"), staging / "local")  # a copy when /tmp is another fs
        shutil.move(str(box / "build.log"), staging / "build.log")
        shutil.rmtree(box, ignore_errors=True)
        os.rename(staging, target)
    return target, True


def scm_version(src: Path, commit: str) -> str | None:
    """The version setuptools-scm would compute at `commit` in a clone with its tags (the
    official image's `/testbed` is one; ours has no `.git`): `git describe`'s last tag,
    its last number bumped and `.devN+gSHA` added when `commit` is past it. None: no tag."""
    git_dir = src if (src / "HEAD").exists() and not (src / ".git").exists() else None
    proc = run_git(src, "describe", "--tags", "--long", "--abbrev=7", commit, git_dir=git_dir, timeout=120)  # fmt: skip # one call
    m = re.fullmatch(r"v?(\d[\w.]*)-(\d+)-g([0-9a-f]+)", proc.stdout.strip())
    if proc.returncode != 0 or m is None:
        return "0.1.dev0"  # setuptools-scm's own answer where no tag is reachable
    tag, distance, sha = m.group(1), int(m.group(2)), m.group(3)
    if distance == 0:
        return tag
    dev = re.fullmatch(r"(.+?)\.?dev\d*", tag)
    if dev:  # 7.0.0.dev0 -> 7.0.0.devN
        return f"{dev.group(1)}.dev{distance}+g{sha}"
    if re.fullmatch(r"\d+(\.\d+)*", tag):
        parts = tag.split(".")
        parts[-1] = str(int(parts[-1]) + 1)
        return f"{'.'.join(parts)}.dev{distance}+g{sha}"
    return f"{tag}.dev{distance}+g{sha}"  # 7.0.0rc1 -> 7.0.0rc1.devN (a pre-release's)


def copy_env(env: Path, box: Path) -> None:
    """A private copy of the env's `/usr/local` in `box/local` (an instance installs there)."""
    subprocess.run(
        ["cp", "-a", "--reflink=auto", str(env / "local"), str(box / "local")], check=True
    )


def setup_instance(box: Path, spec: Spec, runtime: Runtime, build: BuildOptions, log: list[str], version: str | None = None) -> None:  # fmt: skip # one signature
    """Step 3: `repo_install`, `pre_install` and `install` in `/testbed` (the checkout);
    `version` is what setuptools-scm reports there (`scm_version`)."""
    pre = []
    for c in (spec.repo_install, *spec.pre_install):
        if re.match(r"\s*(sudo\s+)?apt(-get)?\s", c):
            log.append(f"skipped (the root file system has the build tools): {c}")
        elif c.strip():
            pre.append(c)
    env = _pip_env(build, build.network)
    if version:
        env["SETUPTOOLS_SCM_PRETEND_VERSION"] = version
    sandbox = _sandbox(box, runtime, network=build.network, timeout=SETUP_TIMEOUT_S)
    try:
        if pre:
            script = "\n".join(["set -eux", "cd /testbed", *pre])
            _run(sandbox, script, env, SETUP_TIMEOUT_S, build, log, "the pre-install steps")
        if not spec.install.strip():
            return
        install = "\n".join(["set -eux", "cd /testbed", spec.install])
        if not (box / "repo" / "pyproject.toml").exists() and "pip install" in install:
            # no pyproject.toml: the images' pip (24) ran `setup.py develop` (the folder on
            # sys.path); today's builds a PEP 660 editable, whose import hook pylint's
            # checker loading does not survive. setuptools' `compat` mode is the former.
            log.append(
                "no pyproject.toml: the editable install in setup.py develop's (compat) mode"
            )
            compat = "pip install --config-settings editable_mode=compat"
            install = install.replace("pip install", compat, 1)
        try:
            _run(sandbox, install, env, SETUP_TIMEOUT_S, build, log, "installing the repository")
        except SetupError as e:
            if "build_editable" not in e.output or "pip install" not in spec.install:
                raise
            # a backend without PEP 660 (setuptools < 64, pinned by the project): the
            # images' pip fell back to `setup.py develop`, today's refuses. The env's own
            # setuptools (>= 64) builds it instead, in its `compat` mode: the project's
            # folder on sys.path, as `setup.py develop` left it (pylint finds its checkers
            # by path and breaks under the default mode's import hook)
            log.append(
                "the build backend has no editable hook; once more as `setup.py develop` would"
            )
            flags = "--no-build-isolation --config-settings editable_mode=compat"
            install = install.replace("pip install", f"pip install {flags}", 1)
            _run(sandbox, install, env, SETUP_TIMEOUT_S, build, log, "installing the repository")
    finally:
        sandbox.close()


def run_tests(box: Path, spec: Spec, directives: list[str], runtime: Runtime, build: BuildOptions, timeout: float) -> tuple[str, str | None]:  # fmt: skip # one signature
    """Step 4's test run: (its output, an error that stopped it or None)."""
    test = " ".join([spec.test_cmd, *(shlex.quote(d) for d in directives)])
    script = "\n".join(["cd /testbed", *spec.eval_commands, "cd /testbed",
                        ": '>>>>> Start Test Output'", test, ": '>>>>> End Test Output'"])  # fmt: skip # the script, line by line
    env = _pip_env(build, network=False)
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1", "HOME": "/tmp", "LANG": "C.UTF-8"})
    sandbox = _sandbox(box, runtime, network=build.test_network, timeout=timeout)
    try:
        res = sandbox.run(["bash", "-c", script], env=env, timeout=timeout, cwd="")
    finally:
        sandbox.close()
    output = f"$ {test}  (exit {res.returncode})\n{res.stdout}{res.stderr}"
    if res.timed_out:
        return output, f"the tests timed out after {timeout:g} s"
    if res.truncated:
        return output, "the test output passed 8 MB"
    return output, None


def needs_network(log: str) -> bool:
    return bool(NETWORK_ERRORS.search(log))


def crash_cause(log: str) -> str:
    """The line that says why a test run read no statuses (an import error, a missing command)."""
    lines = [x.strip() for x in log.splitlines() if x.strip()]
    for pattern in (r"(ModuleNotFoundError|ImportError|SyntaxError|command not found|No such file)",
                    r"(Error|error)"):  # fmt: skip # two patterns, most telling first
        hits = [x for x in lines if re.search(pattern, x)]
        if hits:
            return hits[-1][:240]
    return (lines or ["no output"])[-1][:240]
