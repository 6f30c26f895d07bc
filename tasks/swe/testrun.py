"""How an instance's tests are run and read, shared by the suite builder and the harness.

Mirrors the official SWE-bench harness for pytest repositories: the test directives are
the files the `test_patch` touches, pytest runs with `-rA` so its short summary lists every
test with its status, and the log parser reads those `STATUS node_id` lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from enum import StrEnum


class TestStatus(StrEnum):
    """Per-test statuses the pytest log parser recognises (the official TestStatus)."""

    __test__ = False  # not a pytest test class

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


TEST_ENV: dict[str, str] = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    # Only pytest itself: plugins of skyrl's environment must not change a repo's tests.
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "NO_COLOR": "1",
}
"""Environment variables every test run gets (on top of a clean PATH/HOME/LANG)."""


def pytest_argv(test_files: list[str], python: str = sys.executable) -> list[str]:
    """The pytest command line of an instance's test run.

    The current interpreter runs the tests: the mini repositories need nothing beyond the
    standard library and pytest, which skyrl's own environment already has (a venv made with
    `--system-site-packages` from a venv would see the base interpreter's site-packages, not
    this one's, and so would lack pytest offline).
    """
    return [python, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *test_files]


def directives(test_patch: str) -> list[str]:
    """The test files a test patch touches, in patch order (the official directives)."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", test_patch, flags=re.MULTILINE)
    return list(dict.fromkeys(files))


def parse_log_pytest(log: str) -> dict[str, str]:
    """Map each test node id to its status from a `pytest -rA` log (as the official parser).

    Lines starting with a status word are read; on FAILED lines the ` - message` is dropped.
    """
    status_map: dict[str, str] = {}
    for line in log.split("\n"):
        if any(line.startswith(status.value) for status in TestStatus):
            if line.startswith(TestStatus.FAILED.value):
                line = line.replace(" - ", " ")
            test_case = line.split()
            if len(test_case) <= 1:
                continue
            status_map[test_case[1]] = test_case[0]
    return status_map


def passed(status: str | None) -> bool:
    """The official `test_passed`: PASSED or XFAIL; a test missing from the log did not pass."""
    return status in (TestStatus.PASSED.value, TestStatus.XFAIL.value)


def run_tests_plain(
    cwd: str,
    test_files: list[str],
    timeout: float,
    python: str = sys.executable,
    pythonpath: str | None = None,
) -> tuple[str, int | None]:
    """Run the tests in a subprocess of its own session; return (log, exit code or None
    when the timeout killed it). `pythonpath`: extra import path (an instance's site dir).

    Used for trusted code (the suite builder, the harness without a sandbox). The harness
    runs model-written code in `environments.sandbox` instead.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.update(TEST_ENV)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        proc = subprocess.run(
            pytest_argv(test_files, python),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
        return (out.decode(errors="replace") if isinstance(out, bytes) else out), None
    return proc.stdout + proc.stderr, proc.returncode
