"""The official SWE-bench specification is read from the swebench package, not rewritten:
its table, directives, log parsers and eval script, loaded without its heavy imports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from environments.swe_docker import commands, docker_missing, eval_script, grade_docker, image_name
from tasks.swe.official import (
    conda_packages,
    modified_files,
    parser,
    requirements,
    spec_for,
)
from tasks.swe.official import (
    test_directives as directives_of,
)

ROW = {"repo": "pallets/flask", "version": "2.0", "instance_id": "pallets__flask-4045",
       "base_commit": "d8c37f43724cd9fb0870f77877b7c4c7e38a19e0"}  # fmt: skip # one row
PATCH = (
    "diff --git a/tests/static/config.toml b/tests/static/config.toml\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/tests/static/config.toml\n@@ -0,0 +1 @@\n+x = 1\n"
    "diff --git a/tests/test_config.py b/tests/test_config.py\n"
    "--- a/tests/test_config.py\n+++ b/tests/test_config.py\n@@ -1 +1 @@\n-a\n+b\n"
)


def test_the_table_is_swebench_410s_and_loading_it_leaves_sys_modules_alone() -> None:
    spec = spec_for(ROW)
    assert spec is not None and spec.source == "swebench 4.1.0"
    assert spec.python == "3.9" and spec.install == "python -m pip install -e ."
    assert spec.packages == "requirements.txt" and spec.reqs_paths == ("requirements/dev.txt",)
    assert "Werkzeug==2.3.7" in spec.pip_packages
    assert spec_for({**ROW, "version": "0.0"}) is None  # a version the table lacks
    assert not [m for m in sys.modules if m == "swebench" or m.startswith("swebench.")]
    assert spec_for({**ROW, "repo": "skyrl-mini/ledger"}) is None


def test_a_rows_own_spec_wins_and_bad_ones_are_one_sentence() -> None:
    spec = spec_for({**ROW, "spec": {"python": "3.11", "install": "make", "log_parser": "sympy"}})
    assert spec is not None and spec.python == "3.11" and spec.source == "the row's spec"
    with pytest.raises(ValueError, match="python version"):
        spec_for({**ROW, "spec": {"install": "x"}})
    with pytest.raises(ValueError, match="unknown keys bogus"):
        spec_for({**ROW, "spec": {"python": "3.9", "bogus": 1}})


def test_directives_drop_non_test_files_and_use_djangos_module_form() -> None:
    assert directives_of({**ROW, "test_patch": PATCH}) == ["tests/test_config.py"]
    django = PATCH.replace("tests/test_config.py", "tests/admin_views/tests.py")
    assert directives_of({"repo": "django/django", "test_patch": django}) == ["admin_views.tests"]
    assert modified_files(PATCH) == ["tests/test_config.py"]  # new files are not reset


def test_log_parsers_are_the_repositories_own() -> None:
    sympy = spec_for({"repo": "sympy/sympy", "version": "1.1"})
    assert sympy is not None
    log = "test_lambdify_inspect ok\ntest_issue_1 F\ntest_issue_2 E\n"
    assert parser({"repo": "sympy/sympy"}, sympy)(log) == {
        "test_lambdify_inspect": "PASSED", "test_issue_1": "FAILED", "test_issue_2": "ERROR",
    }  # fmt: skip # one mapping
    flask = spec_for(ROW)
    assert flask is not None
    got = parser(ROW, flask)(
        "PASSED tests/test_a.py::test_x\nFAILED tests/test_a.py::test_y - boom\n"
    )
    assert got == {"tests/test_a.py::test_x": "PASSED", "tests/test_a.py::test_y": "FAILED"}


def test_requirements_follow_r_files_and_drop_editable_lines() -> None:
    spec = spec_for(ROW)
    assert spec is not None
    files = {"requirements/dev.txt": "-r tests.txt\n-e .\n# c\nsphinx==4\n", "requirements/tests.txt": "pytest==7\n.[test]\n"}  # fmt: skip # one mapping
    text = requirements(spec, files.get)
    assert text.split("\n") == ["pytest==7", "", "sphinx==4", ""]
    with pytest.raises(ValueError, match="requirements/dev.txt exists"):
        requirements(spec, lambda p: None)
    assert conda_packages("'numpy==1.19.2' scipy=1.5 pytest") == [
        "numpy==1.19.2",
        "scipy==1.5",
        "pytest",
    ]


def test_docker_backend_builds_the_official_commands(tmp_path: Path) -> None:
    row = {**ROW, "instance_id": "psf__requests-2317", "repo": "psf/requests", "version": "2.4",
           "test_patch": PATCH.replace("tests/test_config.py", "test_requests.py")}  # fmt: skip # one row
    assert image_name(row) == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    script = eval_script(row)
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
    assert "git checkout d8c37f43724cd9fb0870f77877b7c4c7e38a19e0 test_requests.py" in script
    assert "pytest -rA test_requests.py" in script and "git apply -v -" in script
    argv = commands(row, "c1", tmp_path / "p.diff", tmp_path / "eval.sh")
    assert argv[0] == ["docker", "pull", image_name(row)]
    assert argv[2] == ["docker", "cp", str(tmp_path / "p.diff"), "c1:/tmp/patch.diff"]
    assert [a[-1] for a in argv[3:6]] == [
        "git apply --verbose /tmp/patch.diff",
        "git apply --verbose --reject /tmp/patch.diff",
        "patch --batch --fuzz=5 -p1 -i /tmp/patch.diff",
    ]
    assert argv[-2] == ["docker", "exec", "c1", "bash", "/eval.sh"] and argv[-1][:3] == [
        "docker",
        "rm",
        "-f",
    ]


@pytest.mark.skipif(docker_missing() is None, reason="Docker runs here")
def test_docker_backend_without_docker_is_one_sentence() -> None:
    assert docker_missing() is not None and "Docker" in docker_missing()  # type: ignore[operator]
    result = grade_docker({**ROW, "test_patch": PATCH}, "diff --git a/x b/x\n")
    assert result.error is not None and result.error.startswith("--backend docker needs Docker")


@pytest.mark.skip(
    reason="needs Docker and the official images (not on these machines); see docs/eval.md"
)
def test_docker_backend_end_to_end() -> None:
    """`skyrl eval --suite lite.jsonl --agent gold --backend docker` on real rows."""
