"""The official SWE-bench specification of an instance: its environment, test selection and
log parser, read from the `swebench` package on PyPI rather than written again here.

    from tasks.swe.official import spec_for, test_directives, parse_log
    spec = spec_for(row)            # None: no official specification for this repo/version
    spec.python, spec.install, spec.test_cmd
    test_directives(row)            # the official directives (non-test files dropped)
    parse_log(row, log)             # test id -> PASSED / FAILED / ...

Where a row carries the specification itself it wins: a `spec` object with the table's keys
(`python`, `packages`, `pip_packages`, `pre_install`, `install`, `test_cmd`,
`eval_commands`, `log_parser`), as rows of SWE-bench-format datasets other than the
official ones do (and as this project's test replicas do). Otherwise the row's
(`repo`, `version`) is looked up in swebench 4.1.0's `MAP_REPO_VERSION_TO_SPECS`: a new
SWE-bench release is a version bump of `SWEBENCH_VERSION`, not new code here.

Only the package's data and pure functions are used, and only when an official row is
graded: its modules `harness/constants`, `harness/log_parsers/python.py` and
`harness/test_spec/python.py` are loaded by path with stand-ins for the parts that would
pull in Docker, `datasets` or the network (`swebench/__init__.py` imports all of those).
The package comes from an installed `swebench==4.1.0` (`.ci/run` installs it with
`--no-deps`), else a copy unpacked in the cache, else `pip download` of its wheel when the
package index is reachable.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import shlex
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

SWEBENCH_VERSION = "4.1.0"
"""The `swebench` release whose specification table and log parsers are used."""
SPEC_KEYS = ("python", "packages", "pip_packages", "pre_install", "install", "test_cmd",
             "eval_commands", "log_parser")  # fmt: skip # a table of names, laid out by hand


class OfficialUnavailable(RuntimeError):
    """The swebench package is neither installed, cached nor downloadable (one sentence)."""


@dataclass(frozen=True)
class Spec:
    """How one (repository, version) is set up and tested, with the table's meaning."""

    python: str
    """The Python version the environment is made with, e.g. "3.9"."""
    packages: str = ""
    """"requirements.txt", "environment.yml", or packages to install (conda syntax)."""
    pip_packages: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    """Shell commands run in the checkout before `install`."""
    install: str = ""
    """The shell command that installs the repository itself, e.g. `pip install -e .`."""
    test_cmd: str = "pytest -rA"
    eval_commands: tuple[str, ...] = ()
    """Shell commands run before the tests (exports, locale set-up)."""
    repo_install: str = ""
    """The table's per-repository install step (`MAP_REPO_TO_INSTALL`), before `pre_install`."""
    reqs_paths: tuple[str, ...] = ("requirements.txt",)
    """Where `packages: requirements.txt` is read, first found wins."""
    log_parser: str = ""
    """The row's own parser name (`pytest`, `sympy`, ...); empty: the table's for the repo."""
    source: str = ""
    """Where it came from: `swebench 4.1.0` or `the row's spec`."""


_lock = threading.Lock()
_loaded: SimpleNamespace | None = None


def package_dir() -> Path:
    """The folder whose `swebench/` is release `SWEBENCH_VERSION`: installed, cached, or
    downloaded into the cache now. OfficialUnavailable (one sentence) when none can be had."""
    from tasks.cache import cache_dir

    try:
        dist = importlib.metadata.distribution("swebench")
        here = Path(str(dist.locate_file("swebench")))
        if dist.version == SWEBENCH_VERSION and (here / "harness/constants").is_dir():
            return here.parent
    except importlib.metadata.PackageNotFoundError:
        pass
    dest = cache_dir() / f"swebench-{SWEBENCH_VERSION}"
    if (dest / "swebench/harness/constants/python.py").is_file():
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                "--disable-pip-version-check", "-q", "-d", tmp, f"swebench=={SWEBENCH_VERSION}"]  # fmt: skip # one command line
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("swebench-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise OfficialUnavailable(
                f"the official SWE-bench specification (swebench {SWEBENCH_VERSION} from PyPI) "
                "is not installed and could not be downloaded; run `pip install --no-deps "
                f"swebench=={SWEBENCH_VERSION}` once where PyPI is reachable"
            )
        staging = Path(tempfile.mkdtemp(prefix=".swebench-", dir=dest.parent))
        with zipfile.ZipFile(wheels[0]) as whl:
            whl.extractall(staging)
        staging.rename(dest)
    return dest


def modified_files(patch: str) -> list[str]:
    """The official `get_modified_files`: the `a/` paths a patch changes (not new files)."""
    files = []
    for line in patch.splitlines():
        if line.startswith("--- "):
            path = line[4:].split("\t")[0].strip()
            if path != "/dev/null" and path.startswith("a/"):
                files.append(path[2:])
    return files


def _load() -> SimpleNamespace:
    """The package's constants, python log parsers and script module, loaded once with
    stand-ins for its heavy imports; `sys.modules` is left as it was found."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        base = package_dir() / "swebench"
        names = ("swebench", "requests")
        saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in names}
        for k in saved:
            del sys.modules[k]
        try:
            for name in ("swebench", "swebench.harness", "swebench.harness.test_spec",
                         "swebench.harness.log_parsers"):  # fmt: skip # one list of packages
                package = ModuleType(name)
                package.__path__ = [str(base.joinpath(*name.split(".")[1:]))]
                sys.modules[name] = package
            stand_in = ModuleType("swebench.harness.test_spec.test_spec")
            stand_in.TestSpec = object  # type: ignore[attr-defined]  # only an annotation there
            sys.modules[stand_in.__name__] = stand_in
            utils = ModuleType("swebench.harness.utils")
            utils.get_modified_files = modified_files  # type: ignore[attr-defined]
            utils.load_cached_environment_yml = lambda _id: None  # type: ignore[attr-defined]
            sys.modules[utils.__name__] = utils
            sys.modules["requests"] = ModuleType("requests")  # we never fetch from GitHub
            constants = importlib.import_module("swebench.harness.constants")
            parsers = importlib.import_module("swebench.harness.log_parsers.python")
            scripts = importlib.import_module("swebench.harness.test_spec.python")
        finally:
            for k in [k for k in sys.modules if k.split(".")[0] in names]:
                del sys.modules[k]
            sys.modules.update(saved)
        _loaded = SimpleNamespace(constants=constants, parsers=parsers, scripts=scripts)
        return _loaded


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def spec_for(instance: dict[str, Any]) -> Spec | None:
    """The instance's specification: its own `spec`, else the official table's entry for
    its repo and version; None when neither exists (a suite of this project's own format).
    ValueError (one sentence) for a `spec` that is not an object with a `python`."""
    own = instance.get("spec")
    if own is not None:
        if not isinstance(own, dict) or not isinstance(own.get("python"), str):
            raise ValueError("the row's spec must be an object with a python version string")
        unknown = sorted(set(own) - set(SPEC_KEYS) - {"reqs_paths"})
        if unknown:
            raise ValueError(f"the row's spec has unknown keys {', '.join(unknown)}")
        return Spec(
            python=own["python"],
            packages=str(own.get("packages") or ""),
            pip_packages=_tuple(own.get("pip_packages")),
            pre_install=_tuple(own.get("pre_install")),
            install=str(own.get("install") or ""),
            test_cmd=str(own.get("test_cmd") or "pytest -rA"),
            eval_commands=_tuple(own.get("eval_commands")),
            reqs_paths=_tuple(own.get("reqs_paths")) or ("requirements.txt",),
            log_parser=str(own.get("log_parser") or "pytest"),
            source="the row's spec",
        )
    repo, version = str(instance.get("repo")), str(instance.get("version"))
    if repo.startswith("skyrl-mini/"):
        return None  # never needs the package
    c = _load().constants
    table = c.MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    if table is None:
        return None
    return Spec(
        python=str(table["python"]),
        packages=str(table.get("packages") or ""),
        pip_packages=_tuple(table.get("pip_packages")),
        pre_install=_tuple(table.get("pre_install")),
        install=str(table.get("install") or ""),
        test_cmd=str(table["test_cmd"]),
        eval_commands=_tuple(table.get("eval_commands")),
        repo_install=str(c.MAP_REPO_TO_INSTALL.get(repo, "")),
        reqs_paths=_tuple(c.MAP_REPO_TO_REQS_PATHS.get(repo)) or ("requirements.txt",),
        source=f"swebench {SWEBENCH_VERSION}",
    )


def test_directives(instance: dict[str, Any]) -> list[str]:
    """The official `get_test_directives`: the test patch's files without non-test files
    (data, docs), in Django's and sympy's runner forms where the repo uses them."""
    return list(_load().scripts.get_test_directives(instance))


def parser(instance: dict[str, Any], spec: Spec) -> Callable[[str], dict[str, str]]:
    """The official log parser of the instance: its spec's named one, else the repo's."""
    mod = _load().parsers
    if spec.log_parser:
        fn = getattr(mod, f"parse_log_{spec.log_parser}", None)
        if fn is None:
            raise ValueError(f"the spec names an unknown log parser {spec.log_parser!r}")
    else:
        fn = mod.MAP_REPO_TO_PARSER_PY.get(str(instance["repo"]), mod.parse_log_pytest)
    return lambda log: dict(fn(log, None))


def requirements(spec: Spec, read: Callable[[str], str | None]) -> str:
    """The official `get_requirements` text of `packages: requirements.txt`, read from the
    repository at the environment commit by `read(path)` (None: no such file) instead of
    from GitHub: the first of `reqs_paths` found, its `-r` files one level deep, without
    `-e .`, comments and `.[test` lines, cleaned by the official `clean_requirements`.
    ValueError (one sentence) when no path exists."""
    for path in spec.reqs_paths:
        text = read(path)
        if text is not None:
            break
    else:
        raise ValueError(f"none of {', '.join(spec.reqs_paths)} exists at the environment commit")
    excluded = ("-e .", "#", ".[test")
    folder = "/".join(path.split("/")[:-1])
    own, extra = [], []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line.strip()[2:].strip()
            sub = read(f"{folder}/{name}" if folder else name)
            extra += [x for x in (sub or "").split("\n") if not x.strip().startswith(excluded)]
        elif not line.strip().startswith(excluded):
            own.append(line)
    extra.append("\n".join(own))
    if spec.source.startswith("swebench"):
        return str(_load().scripts.clean_requirements("\n".join(extra)))
    return "\n".join(extra)


def conda_packages(packages: str) -> list[str]:
    """A `packages` list in conda's syntax as pip requirements (`numpy=1.19` -> `==`)."""
    out = []
    for word in shlex.split(packages):
        name, sep, rest = word.partition("=")
        out.append(word if not sep or rest.startswith("=") else f"{name}=={rest}")
    return out
