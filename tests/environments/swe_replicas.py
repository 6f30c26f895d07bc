"""Project-written replicas of what broke on real SWE-bench rows, for the official-grading
tests (no fetched code or data: every repository here is written by this file).

    index = LocalIndex.start(folder)        # a PEP 503 index on 127.0.0.1 (wheels + an sdist)
    rows = write_replicas(repos_dir)        # the git repositories and their rows

The index holds pure-Python wheels rebuilt from this interpreter's own installed
distributions (pytest and its dependencies, setuptools, wheel: the tests may not reach
PyPI) and `onlysdist`, a requirement published only as an sdist.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import http.server
import importlib.metadata
import io
import json
import re
import tarfile
import threading
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tasks.swe.build import git

WHEELS = ("pip", "pytest", "pluggy", "iniconfig", "packaging", "pygments", "setuptools", "wheel")
"""Pure-Python distributions the replicas' environments install from the local index."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def wheel_from_installed(name: str, dest: Path) -> Path:
    """A wheel of the installed pure-Python distribution `name`, from its RECORD (files
    outside site-packages, such as console scripts, are left to the entry points)."""
    dist = importlib.metadata.distribution(name)
    meta_name = dist.metadata["Name"]
    tag = re.sub(r"[-.]+", "_", meta_name)
    out = dest / f"{tag}-{dist.version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as whl:
        info_dir = None
        for f in dist.files or []:
            rel = str(f)
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            top = rel.count("/") == 1 and rel.split("/")[0].endswith(".dist-info")
            if top and rel.endswith("/RECORD"):  # not a vendored package's own RECORD
                info_dir = rel.split("/")[0]
                continue
            if top and rel.endswith(("/INSTALLER", "/direct_url.json", "/REQUESTED")):
                continue
            path = Path(str(dist.locate_file(f)))
            if not path.is_file():
                continue
            data = path.read_bytes()
            whl.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append((rel, f"sha256={digest.decode()}", str(len(data))))
        assert info_dir is not None, f"{name} has no RECORD"
        if not any(r[0] == f"{info_dir}/WHEEL" for r in records):
            wheel = "Wheel-Version: 1.0\nGenerator: skyrl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            whl.writestr(f"{info_dir}/WHEEL", wheel)
            records.append((f"{info_dir}/WHEEL", "", ""))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([*records, (f"{info_dir}/RECORD", "", "")])
        whl.writestr(f"{info_dir}/RECORD", buf.getvalue())
    return out


def onlysdist(dest: Path) -> Path:
    """`onlysdist-1.0.tar.gz`: a requirement with no wheel (pip builds it, with setuptools
    from the same index)."""
    out = dest / "onlysdist-1.0.tar.gz"
    files = {
        "onlysdist-1.0/setup.py": "from setuptools import setup\nsetup(name='onlysdist', version='1.0', py_modules=['onlysdist'])\n",
        "onlysdist-1.0/onlysdist.py": "VALUE = 42\n",
        "onlysdist-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: onlysdist\nVersion: 1.0\n",
    }
    with tarfile.open(out, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1700000000
            tar.addfile(info, io.BytesIO(data))
    return out


@dataclass
class LocalIndex:
    """A PEP 503 simple index served on 127.0.0.1 from a thread."""

    url: str
    server: http.server.ThreadingHTTPServer

    @classmethod
    def start(cls, folder: Path) -> LocalIndex:
        files = folder / "files"
        files.mkdir(parents=True)
        here = [n for n in WHEELS if _installed(n)]  # `wheel` is optional for setuptools>=70.1
        artifacts = [wheel_from_installed(n, files) for n in here] + [onlysdist(files)]
        for art in artifacts:
            project = _norm(re.split(r"-\d", art.name, maxsplit=1)[0])
            page = folder / "simple" / project
            page.mkdir(parents=True, exist_ok=True)
            with open(page / "index.html", "a", encoding="utf-8") as f:
                f.write(f'<a href="../../files/{art.name}">{art.name}</a><br>\n')
        handler = partial(_Quiet, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return cls(f"http://127.0.0.1:{server.server_address[1]}/simple/", server)

    def stop(self) -> None:
        self.server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


# ---------------------------------------------------------------------- the replica repos

SETUP = """from setuptools import setup, find_packages
setup(name="srcpkg", version="0.1", package_dir={"": "src"}, packages=find_packages("src"),
      install_requires=["onlysdist"])
"""
RUNNER_SETUP = """from setuptools import setup
setup(name="minitest", version="1.0", packages=["minitest"],
      entry_points={"console_scripts": ["pytest = minitest:main"]})
"""
RUNNER = '''"""minitest: this repository's own test runner, installed as `pytest`."""
import importlib.util, sys, traceback

FORMAT = "%(levelname)s %(message)s"


def main():
    print("minitest runner 1.0")
    for path in [a for a in sys.argv[1:] if not a.startswith("-")]:
        spec = importlib.util.spec_from_file_location("t", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for name in sorted(n for n in dir(mod) if n.startswith("test_")):
            try:
                getattr(mod, name)()
                print(f"PASSED {path}::{name}")
            except Exception:
                traceback.print_exc()
                print(f"FAILED {path}::{name}")
'''


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _diff(repo: Path, base: str, files: dict[str, str]) -> str:
    """The patch that writes `files` on top of `base` (left uncommitted, then undone)."""
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    out = git(repo, "diff", "--cached", base)
    git(repo, "reset", "-q", "--hard", base)
    return out


def _row(iid: str, repo: str, base: str, patch: str, test_patch: str, f2p: list[str], p2p: list[str], spec: dict[str, Any]) -> dict[str, Any]:  # fmt: skip # one signature
    return {
        "repo": repo, "instance_id": iid, "base_commit": base, "patch": patch,
        "test_patch": test_patch, "problem_statement": iid, "hints_text": "",
        "created_at": "", "version": spec.pop("version"), "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p), "environment_setup_commit": base, "spec": spec,
    }  # fmt: skip # one row, in the dataset's column order


def write_replicas(repos: Path) -> list[dict[str, Any]]:
    """The replica repositories under `repos` and their rows (see each row's comment)."""
    src = repos / "replica__srcpkg"
    src.mkdir(parents=True)
    git(src, "init", "-q")
    base = _commit(
        src,
        {
            "setup.py": SETUP,
            "src/srcpkg/__init__.py": 'def greet(name):\n    return "hi " + name\n',
            "tests/test_basic.py": "import onlysdist\nimport srcpkg\n\n\ndef test_value():\n    assert onlysdist.VALUE == 42\n",
        },
        "base",
    )
    gold = _diff(
        src, base, {"src/srcpkg/__init__.py": 'def greet(name):\n    return f"Hello, {name}!"\n'}
    )
    broken = _diff(src, base, {"src/srcpkg/__init__.py": "def greet(name) return\n"})
    greet_test = (
        "import onlysdist\nimport srcpkg\n\n\ndef test_greet():\n"
        "    assert srcpkg.greet('Ada') == 'Hello, Ada!'\n\n\n"
        "def test_value():\n    assert onlysdist.VALUE == 42\n"
    )
    test_patch = _diff(src, base, {"tests/test_greet.py": greet_test, "tests/data/greeting.toml": "name = 'Ada'\n"})  # fmt: skip # one call
    missing = _diff(src, base, {"tests/test_greet.py": "import notinstalled\n\n\n" + greet_test})
    net = greet_test.replace(
        "def test_greet():\n",
        "def test_greet():\n    __import__('socket').getaddrinfo('pypi.org', 443)\n",
    )
    net_patch = _diff(src, base, {"tests/test_greet.py": net})
    spec = {"python": "3.11", "pip_packages": ["pytest"], "install": "python -m pip install -e .",
            "test_cmd": "pytest -rA -p no:cacheprovider"}  # fmt: skip # one mapping
    f2p, p2p = ["tests/test_greet.py::test_greet"], ["tests/test_greet.py::test_value"]
    rows = [
        # a src/ layout importable only once installed; its dependency only an sdist; the
        # test patch also adds a data file, which must not reach pytest
        _row("replica__srcpkg-1", "replica/srcpkg", base, gold, test_patch, f2p, p2p, {**spec, "version": "1.0"}),
        # a model patch that breaks the package: unresolved (the model's fault), not error
        _row("replica__srcpkg-2", "replica/srcpkg", base, broken, test_patch, f2p, p2p, {**spec, "version": "1.0"}),
        # the tests cannot run at all, with or without the patch: error, with the cause
        _row("replica__srcpkg-3", "replica/srcpkg", base, gold, missing, f2p, p2p, {**spec, "version": "1.0"}),
        # the tests want the network, which is off
        _row("replica__srcpkg-4", "replica/srcpkg", base, gold, net_patch, f2p, p2p, {**spec, "version": "1.0"}),
        # a Python this machine cannot have: run on the host's, marked python_mismatch
        _row("replica__srcpkg-5", "replica/srcpkg", base, gold, test_patch, f2p, p2p, {**spec, "python": "3.4", "version": "1.0-py34"}),
    ]  # fmt: skip # one row per line
    own = repos / "replica__minitest"
    own.mkdir()
    git(own, "init", "-q")
    base = _commit(own, {"setup.py": RUNNER_SETUP, "minitest/__init__.py": RUNNER, "tests/test_old.py": "def test_old():\n    assert True\n"}, "base")  # fmt: skip # one call
    gold = _diff(own, base, {"minitest/__init__.py": RUNNER.replace('"%(levelname)s %(message)s"', '"%(levelname)-8s %(name)s %(message)s"')})  # fmt: skip # one call
    fmt_test = "import minitest\n\n\ndef test_format():\n    assert minitest.FORMAT == '%(levelname)-8s %(name)s %(message)s'\n"  # fmt: skip # one file
    test_patch = _diff(own, base, {"tests/test_format.py": fmt_test})
    rows.append(
        # the repository is a test runner itself: its own `pytest`, not the harness's, runs
        _row(
            "replica__minitest-1",
            "replica/minitest",
            base,
            gold,
            test_patch,
            ["tests/test_format.py::test_format"],
            [],
            {
                "python": "3.11",
                "install": "python -m pip install -e .",
                "test_cmd": "pytest -rA",
                "version": "1.0",
            },
        )  # fmt: skip # one row
    )
    return rows
