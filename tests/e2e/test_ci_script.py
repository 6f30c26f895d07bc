"""`.ci/run` itself: what it does when the machine is short of something.

Stop 51's CI ran on a nearly full disk: the vLLM venv's `pip install` failed, the venv was
marked built anyway (a bash function called as `f || ...` runs with errexit off), and the
failures surfaced fifteen minutes later as a missing `.venv-vllm/bin/skyrl` and pytest's
"could not create numbered dir". These run the real script (its first lines, or its
`build_vllm_venv` function with `python3` and pip replaced by shell functions that fail).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]
CI = ROOT / ".ci" / "run"


def test_a_failed_pip_install_does_not_mark_the_vllm_venv_built(tmp_path):
    body = re.search(r"^build_vllm_venv\(\) \{\n.*?^\}\n", CI.read_text(), re.M | re.S)
    assert body, "build_vllm_venv not found in .ci/run"
    # A stand-in python3 whose venv has a python that prints a folder and a pip that fails
    # as a full disk's would.
    script = f"""
set -euo pipefail
VV=.venv-vllm
python3() {{
    mkdir -p "$3/bin" "$3/site"
    printf '#!/bin/sh\\necho %s\\n' "$PWD/$3/site" > "$3/bin/python"
    printf '#!/bin/sh\\necho "OSError: [Errno 28] No space left on device" >&2; exit 1\\n' > "$3/bin/pip"
    chmod +x "$3/bin/python" "$3/bin/pip"
}}
mkdir -p .venv/bin && printf '#!/bin/sh\\n' > .venv/bin/python && chmod +x .venv/bin/python
{body.group(0)}
build_vllm_venv || {{ echo "building $VV failed"; exit 3; }}
echo "went on"
"""
    res = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert "No space left on device" in res.stderr  # the pip step did run and fail
    assert res.returncode == 3, res.stdout + res.stderr
    assert "building .venv-vllm failed" in res.stdout
    assert not (tmp_path / ".venv-vllm" / ".installed").exists()


def test_too_little_free_disk_is_one_sentence_before_setup(tmp_path):
    """An estimate above any disk's free space: the script stops at once, before `make
    setup` (which would otherwise create .venv), with one line naming what it needs."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    env = {"PATH": "/usr/bin:/bin", "SKYRL_CI_NEED_GB": "1000000", "HOME": str(tmp_path)}
    res = subprocess.run(
        ["bash", ".ci/run"], cwd=clone, capture_output=True, text=True, env=env, timeout=60
    )
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "GB free and CI needs about 1000000 GB" in lines[0]
    assert not (clone / ".venv").exists()


def test_the_type_check_keeps_its_cache_outside_the_checkout(tmp_path):
    """A fresh clone's `make typecheck` reuses the analysis of torch and transformers that an
    earlier clone's left in skyrl's cache dir (about 36 CPU-s with the clone's own venv,
    against about 73 cold; the Makefile)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def commands(**more: str) -> list[str]:
        res = subprocess.run(
            ["make", "-n", "-o", "setup", "typecheck"],
            cwd=ROOT, env={**env, **more}, capture_output=True, text=True, timeout=30,
        )  # fmt: skip # one call, laid out as typed
        assert res.returncode == 0, res.stderr
        return [line for line in res.stdout.splitlines() if "mypy" in line]

    default = commands()
    assert len(default) == 2
    assert all(f"--cache-dir {tmp_path}/.cache/skyrl/mypy" in line for line in default), default
    moved = commands(SKYRL_CACHE_DIR=str(tmp_path / "elsewhere"))
    assert all(f"--cache-dir {tmp_path}/elsewhere/mypy" in line for line in moved), moved
