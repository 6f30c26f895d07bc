"""`skyrl eval --suite ... --backend docker`: grade each instance in the official prebuilt
evaluation image, as the official harness does, for machines that have Docker.

    from environments.swe_docker import image_name, eval_script, commands, grade_docker
    image_name(row)        # swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest
    grade_docker(row, patch)

The image name follows the `swebench` package's scheme (`TestSpec.instance_image_key` with
the `swebench` namespace); the eval script is the package's own
`make_eval_script_list_py` (its `#!/bin/bash` + `set -uxo pipefail` header); the model
patch is copied to `/tmp/patch.diff` and applied in `/testbed` with the official three
commands in turn; the test output between the script's start and end markers is read by
the official log parser. Docker is not installed on the machines this project is tested
on: the commands are tested, the end-to-end run is not (see docs/eval.md).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ARCH = "x86_64"
NAMESPACE = "swebench"
APPLY = (
    "git apply --verbose /tmp/patch.diff",
    "git apply --verbose --reject /tmp/patch.diff",
    "patch --batch --fuzz=5 -p1 -i /tmp/patch.diff",
)
"""The official harness's ways to apply the model patch in the container, in order."""


def docker_missing() -> str | None:
    """Why `--backend docker` cannot run here (one sentence), or None."""
    if shutil.which("docker") is None:
        return "--backend docker needs Docker, which is not installed here; use --backend local"
    try:
        proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip # one call
    except (OSError, subprocess.TimeoutExpired) as e:
        return (
            f"--backend docker needs Docker, whose command failed here ({e}); use --backend local"
        )
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no answer"])[-1][:200]
        return f"--backend docker needs Docker, whose daemon does not answer here ({why}); use --backend local"
    return None


def image_name(instance: dict[str, Any], namespace: str = NAMESPACE, arch: str = ARCH) -> str:
    """The official prebuilt evaluation image of the instance."""
    key = f"sweb.eval.{arch}.{str(instance['instance_id']).lower()}:latest"
    return f"{namespace}/{key}".replace("__", "_1776_")


def eval_script(instance: dict[str, Any]) -> str:
    """The official eval script of the instance (test files reset, test patch applied,
    the spec's test command on the official directives, between the output markers)."""
    from tasks.swe.official import _load

    mod = _load()
    specs = mod.constants.MAP_REPO_VERSION_TO_SPECS[instance["repo"]][instance["version"]]
    lines = mod.scripts.make_eval_script_list_py(
        instance, specs, "testbed", "/testbed", instance["base_commit"], instance["test_patch"]
    )
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def commands(instance: dict[str, Any], container: str, patch: Path, script: Path) -> list[list[str]]:  # fmt: skip # one signature
    """The docker command lines of one grading, in order (each apply line is tried until
    one succeeds; the last line always runs)."""
    image = image_name(instance)
    run = ["docker", "run", "-d", "--name", container, "--entrypoint", "tail", image, "-f", "/dev/null"]  # fmt: skip # one command line
    return [
        ["docker", "pull", image],
        run,
        ["docker", "cp", str(patch), f"{container}:/tmp/patch.diff"],
        *(["docker", "exec", "-w", "/testbed", container, "bash", "-c", a] for a in APPLY),
        ["docker", "cp", str(script), f"{container}:/eval.sh"],
        ["docker", "exec", container, "bash", "/eval.sh"],
        ["docker", "rm", "-f", container],
    ]


def test_output(log: str) -> str:
    """The part of the eval log between the official start and end markers."""
    start, end = ">>>>> Start Test Output", ">>>>> End Test Output"
    if start not in log:
        return ""
    return log.split(start, 1)[1].split(end, 1)[0]


def grade_docker(instance: dict[str, Any], patch: str, timeout_s: float = 1800.0) -> Any:
    """Grade `patch` in the instance's official image; a `GradeResult`."""
    from environments.swe_harness import GradeResult, tests_status
    from tasks.swe.official import parser, spec_for

    iid = str(instance["instance_id"])
    result = GradeResult(iid, patch)
    if not patch.strip():
        result.empty_patch = True
        return result
    why = docker_missing()
    if why:
        result.error = why
        return result
    spec = spec_for(instance)
    if spec is None:
        result.error = f"no official image for {instance['repo']} {instance.get('version')}"
        return result
    start = time.monotonic()
    log: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        patch_file, script = Path(tmp) / "patch.diff", Path(tmp) / "eval.sh"
        patch_file.write_text(patch, encoding="utf-8")
        script.write_text(eval_script(instance), encoding="utf-8")
        container = f"skyrl-swe-{iid.lower()}-{int(time.time())}"
        lines = commands(instance, container, patch_file, script)
        applied = False
        try:
            for argv in lines[:-1]:
                is_apply = argv[:2] == ["docker", "exec"] and argv[-1] in APPLY
                if is_apply and applied:
                    continue
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
                log.append(
                    f"$ {' '.join(argv)}  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"
                )
                if is_apply:
                    applied = proc.returncode == 0
                    continue
                if argv[-1] == "/eval.sh":
                    output = proc.stdout + proc.stderr
                elif proc.returncode != 0:
                    result.error = f"`{' '.join(argv[:3])}` failed: {proc.stderr.strip()[-200:]}"
                    return result
                if argv[1] == "cp" and argv[-1].endswith(":/eval.sh") and not applied:
                    result.error = (
                        "the model patch does not apply (git apply and patch --fuzz=5 failed)"
                    )
                    return result
        finally:
            subprocess.run(lines[-1], capture_output=True, timeout=120)
            result.log = "\n".join(log)
            result.duration_s = time.monotonic() - start
    result.patch_applied = True
    result.test_results = parser(instance, spec)(test_output(output))
    result.tests_status = tests_status(instance, result.test_results)
    result.resolved = all(
        not result.tests_status[key]["failure"] for key in ("FAIL_TO_PASS", "PASS_TO_PASS")
    )
    return result
