"""Harbor's semantics that real tasks need beyond one command: multi-step tasks (`[[steps]]`,
`steps/<name>/`, each step's verifier, `min_reward`, `multi_step_reward_strategy`) and a
service the solution starts, still running when the verifier checks it (Harbor verifies in
the same live container). The tasks are written here as replicas of real ones
(harbor-cookbook's `multi-step`, service tasks of Terminal-Bench collections)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from environments import harbor
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import load_harbor_task

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="Harbor's paths need bubblewrap")
root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="joining the shell's network namespace needs root"
)


@pytest.fixture(scope="module", autouse=True)
def cache():
    """An image cache the sandbox's uid can reach (pytest's temp dirs are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="skyrl-harbor-steps-"))
    old = os.environ.get("SKYRL_HARBOR_CACHE")
    os.environ["SKYRL_HARBOR_CACHE"] = str(root)
    harbor._built.cache_clear()
    yield root
    if old is None:
        os.environ.pop("SKYRL_HARBOR_CACHE", None)
    else:
        os.environ["SKYRL_HARBOR_CACHE"] = old
    harbor._built.cache_clear()
    shutil.rmtree(root, ignore_errors=True)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


HELPERS = (
    "pass() { echo 1 > /logs/verifier/reward.txt; exit 0; }\n"
    "fail() { echo 0 > /logs/verifier/reward.txt; exit 0; }\n"
)
STEPS_TOML = """schema_version = "1.1"
{strategy}
[verifier.env]
SHARED = "from-the-task"

[[steps]]
name = "scaffold"
min_reward = 1.0

[[steps]]
name = "implement"
[steps.verifier]
timeout_sec = 20.0
[steps.verifier.env]
EXPECTED = "Hello, Harbor!"
[steps.healthcheck]
command = "test -x /app/greet.sh"
interval_sec = 0
retries = 1
"""


def steps_task(root: Path, strategy: str = "") -> Path:
    """Two steps: write greet.sh printing hello; then read the name from config.txt (put in
    the WORKDIR by the step's workdir/, normalised by its setup.sh)."""
    return write(
        root,
        {
            "task.toml": STEPS_TOML.format(strategy=strategy),
            "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
            "tests/helpers.sh": HELPERS,
            "steps/scaffold/instruction.md": "Write /app/greet.sh that prints hello.",
            "steps/scaffold/tests/test.sh": "#!/bin/bash\nsource /tests/helpers.sh\n"
            '[ "$(/app/greet.sh)" = hello ] && [ "$SHARED" = from-the-task ] && pass\nfail\n',
            "steps/scaffold/solution/solve.sh": "#!/bin/bash\n"
            "printf '#!/bin/bash\\necho hello\\n' > /app/greet.sh; chmod +x /app/greet.sh\n",
            "steps/implement/instruction.md": "Make greet.sh greet the name in config.txt.",
            "steps/implement/workdir/config.txt": "  Harbor \n",
            "steps/implement/workdir/setup.sh": "tr -d '[:space:]' < config.txt > c && "
            'mv c config.txt && rm -- "$0"\n',
            "steps/implement/tests/expected.txt": "Hello, Harbor!\n",
            "steps/implement/tests/test.sh": "#!/bin/bash\nsource /tests/helpers.sh\n"
            'got=$(/app/greet.sh)\n[ "$got" = "$EXPECTED" ] && '
            '[ "$got" = "$(cat /tests/expected.txt)" ] && pass\nfail\n',
            "steps/implement/solution/solve.sh": "#!/bin/bash\n"
            "printf '#!/bin/bash\\necho \"Hello, $(cat /app/config.txt)!\"\\n' > /app/greet.sh\n",
        },
    )


def skyrl_eval(agent: str, tasks: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "skyrl_cli.main", "eval", "--env", "shell", "--agent", agent]
    return subprocess.run(
        [*cmd, "--tasks", str(tasks)], capture_output=True, text=True, timeout=300
    )


def test_a_multi_step_task_runs_beside_one_that_cannot_load(tmp_path):
    """Before: the multi-step task was refused at load ('skyrl does not run yet')."""
    steps_task(tmp_path / "tasks" / "greeter")
    write(tmp_path / "tasks" / "broken", {"task.toml": "[verifier\n", "instruction.md": "x"})
    done = skyrl_eval("oracle", tmp_path / "tasks")
    assert done.returncode == 1 and "1 of 2 tasks did not run" in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert any(ln.startswith("greeter: reward 1 [reward=1]") for ln in lines), lines
    assert any(ln.startswith("broken: not run (") for ln in lines), lines
    noop = skyrl_eval("noop", tmp_path / "tasks" / "greeter")
    assert noop.returncode == 0, noop.stderr
    assert noop.stdout.startswith("greeter: reward 0 [reward=0]"), noop.stdout


def play(task, *steps: str) -> tuple[list[str], float, dict]:
    """Each command as the agent's one action of a step, then submit: the observations of the
    submits, the final reward and info."""
    env = ShellEnv(timeout_s=20, max_turns=4)
    seen = []
    try:
        env.reset(options={"task": task})
        for command in steps:
            assert "[exit code: 0]" in env.step(f"<bash>{command}</bash>")[0]
            obs, reward, terminated, truncated, info = env.step("<submit/>")
            seen.append(obs)
            if terminated or truncated:
                return seen, reward, info
        raise AssertionError(f"the task went on after {len(steps)} steps: {seen}")
    finally:
        env.close()


GOOD_1 = "printf '#!/bin/bash\\necho hello\\n' > greet.sh; chmod +x greet.sh"
GOOD_2 = "printf '#!/bin/bash\\necho \"Hello, $(cat config.txt)!\"\\n' > greet.sh; ls"
BAD_2 = "echo 'echo nope' >> greet.sh"


def test_each_step_is_graded_and_the_mean_is_the_reward(tmp_path):
    task = load_harbor_task(steps_task(tmp_path / "t"))
    assert task.prompt == "Write /app/greet.sh that prints hello."
    seen, reward, info = play(task, GOOD_1, BAD_2)
    assert "The tests of step scaffold gave reward 1." in seen[0]
    assert "Step 2 of 2 (implement):\nMake greet.sh greet the name in config.txt." in seen[0]
    assert (reward, info["rewards"]) == (0.5, {"reward": 0.5}), info
    _, reward, info = play(load_harbor_task(tmp_path / "t"), GOOD_1, GOOD_2)
    assert reward == 1.0, info


def test_the_final_strategy_and_min_reward_end_the_task(tmp_path):
    task = load_harbor_task(steps_task(tmp_path / "t", 'multi_step_reward_strategy = "final"'))
    _, reward, info = play(task, GOOD_1, BAD_2)
    assert (reward, info["rewards"]) == (0.0, {"reward": 0.0}), info
    # scaffold's min_reward is 1: a wrong first step ends the task there
    seen, reward, _ = play(load_harbor_task(tmp_path / "t"), "echo 'echo hi' > greet.sh")
    assert reward == 0.0 and "implement" not in seen[0], seen


def test_a_broken_steps_table_is_one_sentence(tmp_path):
    folder = steps_task(tmp_path / "t")
    (folder / "task.toml").write_text('[[steps]]\nname = "../up"\n')
    with pytest.raises(ValueError, match=r"step 1 needs a name of its own"):
        load_harbor_task(folder)
    (folder / "task.toml").write_text('[[steps]]\nname = "scaffold"\nmin_reward = "high"\n')
    with pytest.raises(ValueError, match="min_reward must be a number or a table"):
        load_harbor_task(folder)


# ---------------------------------------------------------------------------- a live service

SERVICE = {
    "task.toml": 'version = "1.0"\n[verifier]\ntimeout_sec = 30.0\n',
    "instruction.md": "Serve /app/www on 127.0.0.1:8765 over HTTP and leave it running.",
    "environment/Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\nRUN mkdir www\n",
    "environment/index.html": "unused\n",
    "solution/solve.sh": "#!/bin/bash\necho up > /app/www/health\n"
    "nohup python3 -m http.server 8765 --bind 127.0.0.1 --directory /app/www "
    ">/tmp/server.log 2>&1 &\nsleep 1\n",
    "tests/test.sh": "#!/bin/bash\n"
    'if python3 -c "import urllib.request as u; '
    "assert u.urlopen('http://127.0.0.1:8765/health', timeout=5).read() == b'up\\n'\"; "
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
}


@root_only
def test_a_service_the_oracle_started_is_up_for_the_verifier(tmp_path):
    """Before: solve.sh's sandbox ended with it, and the verifier found nothing listening."""
    write(tmp_path / "tasks" / "serve", SERVICE)
    done = skyrl_eval("oracle", tmp_path / "tasks")
    assert done.returncode == 0 and done.stdout.startswith("serve: reward 1 [reward=1]"), (
        done.stdout + done.stderr
    )
    noop = skyrl_eval("noop", tmp_path / "tasks")
    assert noop.stdout.startswith("serve: reward 0 [reward=0]"), noop.stdout


@root_only
def test_a_service_the_agent_started_is_up_for_the_verifier(tmp_path):
    task = load_harbor_task(write(tmp_path / "serve", SERVICE))
    start = SERVICE["solution/solve.sh"].removeprefix("#!/bin/bash\n")
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        assert "[exit code: 0]" in env.step(f"<bash>{start}</bash>")[0]
        _, reward, _, _, info = env.step("<submit/>")
        assert reward == 1.0, info
    finally:
        env.close()
