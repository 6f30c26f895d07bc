"""Official-format rows graded as the official harness grades them: the environment from the
row's specification, the repository installed, official test selection and outcome buckets.

Each replica in `swe_replicas` stands for a failure seen on real SWE-bench Lite rows
(docs/eval.md has the real table). The environments are built by pip in the build sandbox
from a local index on 127.0.0.1 (wheels of this interpreter's own pytest and setuptools, and
an sdist-only requirement): no test reaches PyPI or the Debian mirror. They run through the
real `skyrl eval` command, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from environments.sandbox import bwrap_available
from tests.environments.swe_replicas import LocalIndex, write_replicas

HOST_PIP = subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True).returncode == 0  # fmt: skip # one probe
pytestmark = [
    pytest.mark.skipif(
        not bwrap_available(), reason="official environments are built and run under bwrap"
    ),
    pytest.mark.skipif(
        not HOST_PIP, reason="the replicas' environments use /usr/bin/python3's pip (python3-pip)"
    ),
]
SKYRL = str(Path(sys.executable).with_name("skyrl"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("swe-official")
    index = LocalIndex.start(root / "index")
    rows = write_replicas(root / "repos")
    suite = root / "rows.jsonl"
    suite.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    try:
        yield {"root": root, "index": index.url, "suite": suite, "rows": rows}
    finally:
        index.stop()


def _eval(setup: dict[str, Any], out: str, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:  # fmt: skip # one signature
    root = setup["root"]
    env = {**os.environ, "SKYRL_CACHE_DIR": str(root / "cache"), "HOME": str(root),
           "SKYRL_SWE_PIP_INDEX": setup["index"]}  # fmt: skip # one mapping
    argv = [SKYRL, "eval", "--suite", str(setup["suite"]), "--repos", str(root / "repos"),
            "--output", str(root / out), "--workers", "2", "--no-tracking", *args]  # fmt: skip # one command line
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
    results = {}
    for path in (root / out / "logs").glob("*/result.json"):
        rec = json.loads(path.read_text())
        results[rec["instance_id"]] = rec
    return proc, results


@pytest.fixture(scope="module")
def gold(setup: dict[str, Any]) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    return _eval(setup, "gold", "--agent", "gold")


def test_src_layout_sdist_dependency_and_data_file_resolve(gold: Any) -> None:
    proc, results = gold
    one = results["replica__srcpkg-1"]
    assert one["resolved"] and one["error"] is None, (one, proc.stdout[-3000:], proc.stderr[-3000:])
    assert one["python_used"] == "3.11" and one["python_mismatch"] is None


def test_each_instance_folder_explains_its_outcome(gold: Any, setup: dict[str, Any]) -> None:
    folder = setup["root"] / "gold" / "logs" / "replica__srcpkg-1"
    build = (folder / "env_build.txt").read_text()
    assert "building the environment" in build or "environment: cached" in build
    assert "installing the repository" in build and "onlysdist" in (
        build + (folder / "test_output.txt").read_text()
    )
    tests = (folder / "test_output.txt").read_text()
    command = next(x for x in tests.splitlines() if x.startswith("$ pytest"))
    assert "tests/test_greet.py" in command and "greeting.toml" not in command
    assert (folder / "patch.diff").read_text().startswith("diff --git")


def test_a_patch_that_breaks_the_package_is_unresolved_not_error(gold: Any) -> None:
    _, results = gold
    two = results["replica__srcpkg-2"]
    assert two["error"] is None and not two["resolved"] and two["patch_applied"]


def test_tests_that_cannot_run_at_all_are_an_error_with_the_cause(gold: Any) -> None:
    proc, results = gold
    three = results["replica__srcpkg-3"]
    assert three["error"] is not None and "notinstalled" in three["error"], three
    assert "do not run even without the model patch" in three["error"]
    assert proc.returncode == 1 and "could not be graded" in proc.stderr


def test_tests_wanting_the_network_say_so(gold: Any) -> None:
    _, results = gold
    four = results["replica__srcpkg-4"]
    assert not four["resolved"] and "network" in (four["note"] or ""), four


def test_a_python_this_machine_lacks_is_marked_python_mismatch(
    gold: Any, setup: dict[str, Any]
) -> None:
    proc, results = gold
    five = results["replica__srcpkg-5"]
    assert five["python_specified"] == "3.4" and five["python_used"] == "3.11"
    assert five["python_mismatch"].startswith("3.4 specified, 3.11 used")
    assert five["resolved"]
    assert "python_mismatch" in proc.stdout and "replica__srcpkg-5" in proc.stdout
    report = json.loads((setup["root"] / "gold" / "report.json").read_text())
    assert report["python_mismatch_ids"] == ["replica__srcpkg-5"]


def test_a_repository_that_is_its_own_test_runner_runs_its_own(
    gold: Any, setup: dict[str, Any]
) -> None:
    _, results = gold
    own = results["replica__minitest-1"]
    assert own["resolved"], own
    log = (setup["root"] / "gold" / "logs" / "replica__minitest-1" / "test_output.txt").read_text()
    assert "minitest runner 1.0" in log


def test_empty_patches_resolve_nothing(setup: dict[str, Any]) -> None:
    proc, results = _eval(setup, "empty", "--agent", "empty")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert results and not any(r["resolved"] for r in results.values())
    assert all(r["empty_patch"] for r in results.values())
