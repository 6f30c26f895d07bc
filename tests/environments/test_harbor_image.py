"""Harbor tasks as Harbor runs them: the Dockerfile built into a cached layer, Harbor's paths,
the offline verifier preamble, reward.json over reward.txt, the oracle agent; and attacks
from a task folder (COPY out of the context, symlinks) and from the agent (forged rewards)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from environments import harbor
from environments.container import RUNTIMES, runtime_problem
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import load_harbor_task

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="Harbor's paths need bubblewrap")

COOKBOOK = Path(
    os.environ.get("SKYRL_HARBOR_COOKBOOK", "/work/.mirror/harbor-framework+harbor-cookbook/repo")
)
RECIPES = ("simple-task", "multi-reward", "dns-blacklisting")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One image and kit cache for the module (builds and uv/pytest downloads happen once)."""
    # in the temp dir itself: the sandbox's uid must reach the kit (pytest's dirs are 0700)
    root = Path(tempfile.mkdtemp(prefix="skyrl-harbor-test-"))
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


@pytest.fixture(scope="module")
def cookbook(tmp_path_factory, cache):
    """The three harbor-cookbook recipes, unmodified, from a git snapshot of the repository
    (Apache-2.0; not committed here: set SKYRL_HARBOR_COOKBOOK to a checkout)."""
    if not (COOKBOOK / "HEAD").exists() and not (COOKBOOK / ".git").exists():
        pytest.skip(f"no harbor-cookbook checkout at {COOKBOOK} (set SKYRL_HARBOR_COOKBOOK)")
    out = tmp_path_factory.mktemp("cookbook")
    for name in RECIPES:
        (out / name).mkdir()
        archive = subprocess.run(
            ["git", "-C", str(COOKBOOK), "archive", "HEAD", f"harbor_cookbook/recipes/{name}"],
            capture_output=True, check=True,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        subprocess.run(
            ["tar", "-x", "-C", str(out / name), "--strip-components=3"],
            input=archive.stdout, check=True,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    return out


def skyrl_eval(agent: str, tasks: Path, cache: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "skyrl_cli.main", "eval", "--env", "shell", "--agent", agent]
    env = {**os.environ, "SKYRL_HARBOR_CACHE": str(cache)}
    return subprocess.run(
        [*cmd, "--tasks", str(tasks)], capture_output=True, text=True, env=env, timeout=600
    )


def test_cookbook_oracle_scores_one_and_noop_zero(cookbook, cache):
    done = skyrl_eval("oracle", cookbook, cache)
    lines = done.stdout.splitlines()
    assert "simple-task: reward 1 [reward=1]" in lines
    assert "multi-reward: reward 1 [correctness=1, performance=1]" in lines
    if os.geteuid() == 0:  # dns-blacklisting's gateway binds port 80 in the episode's network
        assert done.returncode == 0 and "dns-blacklisting: reward 1 [reward=1]" in lines, lines
    else:  # no sandbox uid may bind it, so it is named up front
        assert done.returncode == 1 and "1 of 3 tasks did not run" in done.stderr, done.stderr
        assert lines[0] == (
            "pre-flight: dns-blacklisting: cannot run as Harbor would: ENTRYPOINT "
            '["/entrypoint.sh"]: fails here: PermissionError: [Errno 13] Permission denied (at '
            '/usr/local/bin/block-server.py line 89: HTTPServer(("127.0.0.1", 80), '
            "BlockHandler).serve_forever())"
        )
    noop = skyrl_eval("noop", cookbook, cache)
    zeros = [ln for ln in noop.stdout.splitlines() if ": reward " in ln]
    assert all(" reward 0 [" in ln for ln in zeros) and len(zeros) >= 2, zeros
    assert any(
        ln.startswith("multi-reward: reward 0 [correctness=0, performance=0] (") for ln in zeros
    )
    assert any(ln.startswith("simple-task: reward 0 [reward=0] (verifier: ") for ln in zeros)


@pytest.mark.parametrize("name", ["simple-task", "multi-reward"])
def test_cookbook_solution_as_bash_actions(cookbook, name):
    task = load_harbor_task(cookbook / name)
    env = ShellEnv(timeout_s=30, reward_key="performance" if name == "multi-reward" else None)
    try:
        obs, _ = env.reset(options={"task": task})
        assert "bash shell in /app," in obs
        solve = (cookbook / name / "solution" / "solve.sh").read_text()
        assert env.step(f"<bash>{solve}</bash>")[0].startswith("[exit code: 0]")
        _, reward, terminated, _, info = env.step("<submit/>")
        assert (reward, terminated, info["reward_error"]) == (1.0, True, None), info
        if name == "multi-reward":
            assert info["rewards"] == {"correctness": 1.0, "performance": 1.0}
    finally:
        env.close()


# ---------------------------------------------------------------------------- the image


def make_task(root: Path, dockerfile: str, test_sh: str, files: dict[str, str] | None = None):
    (root / "environment").mkdir(parents=True, exist_ok=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {}).items():
        (root / "environment" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "environment" / name).write_text(text)
    (root / "instruction.md").write_text("Do it.")
    (root / "task.toml").write_text(
        'version = "1.0"\n[verifier]\ntimeout_sec = 20.0\n[verifier.env]\nWANT = "${NOPE:-7}"\n'
    )
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\necho $WANT > /app/out\n")
    return load_harbor_task(root)


DOCKERFILE = """FROM debian:bookworm-slim
ARG NAME=conf
ENV GREETING="hi there" \\
    MODE=fast
WORKDIR /srv/app
COPY data/ ./data/
COPY ${NAME}.txt /etc/skyrl-test-${NAME}.txt
RUN echo "$MODE" > built.txt && ls /etc/skyrl-test-conf.txt >> built.txt
"""
TEST_SH = """#!/bin/bash
ok=1
[ "$(pwd)" = /srv/app ] || ok=0
[ "$WANT" = 7 ] || ok=0
[ "$(cat /srv/app/out 2>/dev/null)" = "$GREETING" ] || ok=0
[ -f /tests/test.sh ] && [ -d /logs/agent ] || ok=0
echo '{"reward": '$ok', "extra": 1}' > /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt
"""


def test_dockerfile_steps_workdir_env_copy_run_and_the_cache(tmp_path, cache):
    task = make_task(tmp_path / "t", DOCKERFILE, TEST_SH, {"data/a.txt": "A", "conf.txt": "C"})
    image = harbor.image(tmp_path / "t")
    assert image.problems == [] and image.workdir == "/srv/app"
    assert image.env == {"GREETING": "hi there", "MODE": "fast"}
    again = harbor.image(tmp_path / "t")
    assert again.layer == image.layer  # built once, cached by digest
    env = ShellEnv(timeout_s=20)
    try:
        obs, _ = env.reset(options={"task": task})
        assert "bash shell in /srv/app," in obs
        got = env.step("<bash>cat built.txt data/a.txt /etc/skyrl-test-conf.txt</bash>")[0]
        assert got.startswith("fast\n/etc/skyrl-test-conf.txt\nAC\n[exit code: 0]"), got
        env.step("<bash>echo $GREETING > out</bash>")
        _, reward, _, _, info = env.step("<submit/>")  # reward.json wins over reward.txt
        assert (reward, info["rewards"]) == (1.0, {"reward": 1.0, "extra": 1.0}), info
    finally:
        env.close()


def test_unhonourable_steps_are_one_line_before_any_episode(tmp_path, cache):
    dockerfile = (
        "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y curl no-such-pkg-xyz\n"
        "ADD https://example.com/x.tgz /app/\nCOPY --from=builder /a /b\n"
    )
    task = make_task(tmp_path / "bad", dockerfile, TEST_SH)
    line = harbor.preflight_line("bad", harbor.image(tmp_path / "bad"))
    assert line is not None and "\n" not in line
    assert "no-such-pkg-xyz (skyrl: offline, and the host lacks it)" in line
    assert "fetches https://example.com/x.tgz from the network" in line
    assert "--from" in line
    with pytest.raises(ValueError, match="bad: cannot run as Harbor would"):
        ShellEnv().reset(options={"task": task})


def test_copy_from_an_earlier_stage(tmp_path, cache):
    """A multi-stage build (a builder stage, then `COPY --from=builder`): every stage's steps
    run in the one layer, so the builder's output is there to copy (before: refused at
    pre-flight, 'copies from another image or stage')."""
    dockerfile = (
        "FROM debian:bookworm AS builder\nWORKDIR /src\n"
        "RUN printf '#!/bin/sh\\necho built-tool\\n' > tool.sh && chmod +x tool.sh\n"
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        "COPY --from=builder /src/tool.sh /usr/local/bin/tool\n"
        "COPY --from=0 /src/tool.sh ./bin/\n"
    )
    test_sh = (
        '#!/bin/bash\n[ "$(tool)" = built-tool ] && [ "$(./bin/tool.sh)" = built-tool ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh)
    img = harbor.image(tmp_path / "t")
    assert img.problems == [], img.problems
    env = ShellEnv()
    try:
        env.reset(options={"task": task})
        _, reward, _, _, info = env.step("<submit/>")
        assert reward == 1.0, info
    finally:
        env.close()
    (tmp_path / "t" / "environment" / "Dockerfile").write_text(
        dockerfile.replace("--from=0 /src/tool.sh", "--from=builder /etc/shadow")
    )
    line = harbor.preflight_line("t", harbor.image(tmp_path / "t"))
    assert line is not None and "/etc/shadow is not in the stage" in line, line


def test_env_path_extends_the_images_path(tmp_path, cache):
    """`ENV PATH="/root/.cargo/bin:${PATH}"` (three-body-problem's Dockerfile) extends the
    image's PATH (before: `${PATH}` was empty, and every later RUN found no `mkdir`)."""
    dockerfile = (
        'FROM ubuntu:24.04\nWORKDIR /app\nENV PATH="/app/bin:${PATH}"\n'
        "RUN mkdir -p bin && printf '#!/bin/sh\\necho tool\\n' > bin/tool && chmod +x bin/tool\n"
    )
    test_sh = (
        '#!/bin/bash\n[ "$(tool)" = tool ] && ls / > /dev/null '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh)
    assert harbor.image(tmp_path / "t").problems == []
    env = ShellEnv()
    try:
        env.reset(options={"task": task})
        assert env.step("<submit/>")[1] == 1.0
    finally:
        env.close()


def test_an_image_built_without_bubblewrap_is_rebuilt_once_it_is_installed(
    tmp_path, cache, monkeypatch
):
    """A missing bubblewrap is about the host, not the task: it must not stick to the
    task's cached image once bwrap is there (a CI run once reused such an entry from /tmp)."""
    files = {"data/a.txt": "A", "conf.txt": "C", "own.txt": str(tmp_path)}  # its own digest
    make_task(tmp_path / "t", DOCKERFILE, TEST_SH, files)
    monkeypatch.setenv("SKYRL_SANDBOX_BACKEND", "fallback")
    harbor._built.cache_clear()
    before = harbor.image(tmp_path / "t")
    assert any("bubblewrap is missing" in p for p in before.problems), before.problems
    monkeypatch.delenv("SKYRL_SANDBOX_BACKEND")
    harbor._built.cache_clear()
    after = harbor.image(tmp_path / "t")
    assert after.problems == [] and (Path(after.layer) / "srv/app/built.txt").is_file()
    # an entry such a build left on disk before this fix is rebuilt too
    folder = Path(after.layer).parent
    meta = json.loads((folder / "image.json").read_text())
    meta["problems"] = [before.problems[0]]
    (folder / "image.json").write_text(json.dumps(meta))
    harbor._built.cache_clear()
    assert harbor.image(tmp_path / "t").problems == []


# ---------------------------------------------------------------------------- attacks


def test_task_folder_cannot_reach_the_host(tmp_path, cache):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    root = tmp_path / "evil"
    root.mkdir()
    (root / "environment").mkdir()
    os.symlink(secret, root / "environment" / "link.txt")  # a link out of the context
    os.symlink("/etc", root / "environment" / "etcdir")
    dockerfile = (
        "FROM x\nWORKDIR /app\nCOPY ../../../../../../etc/passwd /app/p\n"
        "COPY link.txt /app/l\nCOPY etcdir/ /app/e/\n"
        f"RUN ln -s {tmp_path} /app/escape\nCOPY ok.txt /app/escape/planted.txt\n"
    )
    with pytest.raises(ValueError, match="is a symlink to .*, outside the task folder"):
        make_task(root, dockerfile, TEST_SH, {"ok.txt": "planted"})  # refused at load
    image = harbor.image(root)  # and the build, reached without a load, holds too
    line = harbor.preflight_line("evil", image)
    assert line is not None
    assert line.count("is outside environment/") == 3, line
    assert "goes through a symlink of the image" in line
    assert not (tmp_path / "planted.txt").exists()  # nothing written through the RUN's link
    layer = Path(image.layer)
    assert not (layer / "app" / "p").exists() and not (layer / "app" / "l").exists()


def test_agent_cannot_see_tests_or_forge_the_reward(tmp_path, cache):
    test_sh = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    task = make_task(tmp_path / "t", "FROM x\nWORKDIR /app\n", test_sh)
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        seen = env.step("<bash>ls /tests /solution 2>&1 | head -2; ls /</bash>")[0]
        assert "No such file or directory" in seen and "tests" not in seen.split("\n", 2)[2]
        forged = '{"reward": 1}'
        env.step(f"<bash>echo '{forged}' > /logs/verifier/reward.json</bash>")
        assert env.step("<submit/>")[1] == 0.0  # stale reward files go, as in Harbor
        env.reset(options={"task": task})
        env.step(f"<bash>rm -rf /logs/verifier && ln -s {tmp_path} /logs/verifier</bash>")
        (tmp_path / "reward.json").write_text(forged)
        _, reward, _, _, info = env.step("<submit/>")
        assert reward == 0.0 and info["reward_error"] is None, info
        assert (tmp_path / "reward.json").read_text() == forged  # host file untouched
    finally:
        env.close()


def test_oracle_sees_the_solution_and_the_verifier_env(tmp_path, cache):
    test_sh = '#!/bin/bash\n[ "$(cat /app/out)" = 7 ] && echo 1 > /logs/verifier/reward.txt\n'
    task = make_task(tmp_path / "t", "FROM x\nWORKDIR /app\n", test_sh)
    (tmp_path / "t" / "task.toml").write_text(
        'version = "1.0"\n[verifier]\ntimeout_sec = 20.0\n[solution.env]\nWANT = "7"\n'
    )
    task = load_harbor_task(tmp_path / "t")
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        assert env.run_oracle()["returncode"] == 0
        assert env.step("<submit/>")[1] == 1.0
        assert json.loads(json.dumps(task.metadata))["solution_env"] == {"WANT": "7"}
        assert shutil.which("bash")
    finally:
        env.close()


PREAMBLE_TEST = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
source $HOME/.local/bin/env
uvx \\
  --with pytest==8.4.1 \\
  --with pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_state.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_the_verifier_preamble_runs_offline(tmp_path, cache):
    """Terminal-Bench-2's preamble (apt curl, Astral's uv installer, uvx --with pins) with
    no network: uv and the pinned wheels were fetched from PyPI ahead of time."""
    dockerfile = (
        "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y python3\nWORKDIR /app\n"
    )
    task = make_task(tmp_path / "t", dockerfile, PREAMBLE_TEST)
    (tmp_path / "t" / "tests" / "test_state.py").write_text(
        "from pathlib import Path\n\ndef test_hello():\n"
        "    assert Path('/app/out').read_text().strip() == '7'\n"
    )
    env = ShellEnv(timeout_s=20)
    try:
        for done, want in ((True, 1.0), (False, 0.0)):
            env.reset(options={"task": task})
            if done:
                env.step("<bash>echo 7 > out</bash>")
            _, reward, _, _, info = env.step("<submit/>")
            assert (reward, info["reward_error"]) == (want, None), info["verifier"]
            assert "1 passed" in info["verifier"]["output"] or not done
    finally:
        env.close()


PIP_TEST = """#!/bin/bash
python3 -m pip install pytest==8.4.1 || true
python3 -m pytest /tests/test_state.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_a_verifier_that_pip_installs_its_tools_runs_offline(tmp_path, cache):
    """A verifier that installs pytest with pip at verify time (as many Terminal-Bench tasks
    do) gets the pinned wheel from the offline kit through pip's own configuration: the
    oracle scores 1 and noop 0, never a silent 0 from `No module named pytest`."""
    task = make_task(tmp_path / "t", "FROM python:3.12-slim\nWORKDIR /app\n", PIP_TEST)
    (tmp_path / "t" / "tests" / "test_state.py").write_text(
        "from pathlib import Path\n\ndef test_hello():\n"
        "    assert Path('/app/out').read_text().strip() == '7'\n"
    )
    env = ShellEnv(timeout_s=20)
    try:
        for done, want in ((True, 1.0), (False, 0.0)):
            env.reset(options={"task": task})
            if done:
                env.step("<bash>echo 7 > out</bash>")
            _, reward, _, _, info = env.step("<submit/>")
            output = info["verifier"]["output"]
            assert "No module named pytest" not in output, output
            assert (reward, info["reward_error"]) == (want, None), output
            assert ("1 passed" in output) == done, output
    finally:
        env.close()


def test_a_task_that_cannot_load_is_skipped_and_the_folder_still_runs(tmp_path, cache):
    """A task that cannot load (a broken task.toml) beside a plain one and a multi-step one
    (Harbor's `[[steps]]`, `steps/*/instruction.md`, the task's own tests/ for each step):
    those two run and score, the broken one is named in one sentence and counted as not run
    (before, the whole folder stopped at load, exit 2, nothing run)."""
    simple = '#!/bin/bash\n[ "$(cat /app/out)" = 7 ] && echo 1 > /logs/verifier/reward.txt\n'
    make_task(tmp_path / "tasks" / "plain", "FROM debian\nWORKDIR /app\n", simple)
    (tmp_path / "tasks" / "plain" / "solution" / "solve.sh").write_text("echo 7 > /app/out\n")
    steps = tmp_path / "tasks" / "stepped"
    make_task(steps, "FROM debian\nWORKDIR /app\n", simple)
    (steps / "solution" / "solve.sh").write_text("echo 7 > /app/out\n")
    (steps / "instruction.md").unlink()
    (steps / "task.toml").write_text('[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n')
    for name in ("one", "two"):
        (steps / "steps" / name).mkdir(parents=True)
        (steps / "steps" / name / "instruction.md").write_text(f"Do step {name}.")
    broken = tmp_path / "tasks" / "broken"
    make_task(broken, "FROM debian\nWORKDIR /app\n", simple)
    (broken / "task.toml").write_text("[verifier\n")
    done = skyrl_eval("oracle", tmp_path / "tasks", cache)
    lines = done.stdout.splitlines()
    assert any(ln.startswith("plain: reward 1 [reward=1]") for ln in lines), lines
    assert any(ln.startswith("stepped: reward 1 [reward=1]") for ln in lines), lines
    skipped = [ln for ln in lines if ln.startswith("broken: not run")]
    assert len(skipped) == 1 and "not valid TOML" in skipped[0] and skipped[0].endswith("."), lines
    assert "2 tasks run, 1 not run" in lines[-1]
    assert done.returncode == 1 and "1 of 3 tasks did not run" in done.stderr, done.stderr


def test_copy_with_a_wildcard_and_the_usual_var_log(tmp_path, cache):
    """`COPY *.py /app/` is Docker's (before: 'is not in environment/', the task blamed);
    `/var/log` exists and is writable, at build time and in the episode, as in an image."""
    dockerfile = (
        "FROM python:3.12-slim\nWORKDIR /app\nCOPY *.py /app/\nCOPY conf/*.ini ./conf/\n"
        "RUN echo built >> /var/log/build.log\n"
    )
    test_sh = (
        "#!/bin/bash\nok=1\n"
        "[ -f /app/a.py ] && [ -f /app/b.py ] && [ -f /app/conf/x.ini ] || ok=0\n"
        "[ ! -e /app/notes.txt ] && [ ! -e /app/c.txt ] || ok=0\n"
        '[ "$(cat /var/log/build.log)" = built ] || ok=0\n'
        '[ "$(cat /var/log/agent.log)" = 7 ] || ok=0\n'
        "echo $ok > /logs/verifier/reward.txt\n"
    )
    files = {"a.py": "", "b.py": "", "notes.txt": "", "conf/x.ini": "", "conf/c.txt": ""}
    task = make_task(tmp_path / "t", dockerfile, test_sh, files)
    assert harbor.image(tmp_path / "t").problems == []
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        assert env.step("<bash>echo 7 > /var/log/agent.log</bash>")[0].startswith("[exit code: 0]")
        _, reward, _, _, info = env.step("<submit/>")
        assert (reward, info["reward_error"]) == (1.0, None), info["verifier"]
    finally:
        env.close()


def test_preflight_reasons_are_whole(tmp_path, cache):
    """A failing RUN longer than 120 characters, with a long last error line: the pre-flight
    line holds the whole step and the whole error (before, both were cut short)."""
    error = "E: " + " ".join(f"word{i}" for i in range(60)) + " the real cause"
    step = "RUN " + " && ".join(f"true step{i}" for i in range(12)) + f" && echo '{error}' >&2"
    step += " && exit 3"
    make_task(tmp_path / "t", f"FROM debian\nWORKDIR /app\n{step}\n", "#!/bin/bash\n")
    line = harbor.preflight_line("t", harbor.image(tmp_path / "t"))
    assert line is not None and step in line and error in line, line


def test_a_zero_has_a_reason_and_tasks_not_run_fail_the_command(tmp_path, cache):
    """`--output OUT` keeps each task's logs (the oracle's output, the verifier's stdout and
    the reward file); a 0 shows the verifier's last error line; tasks that did not run make
    the command exit 1 and are counted."""
    tasks = tmp_path / "tasks"
    good = '#!/bin/bash\n[ "$(cat /app/out)" = 7 ] && echo 1 > /logs/verifier/reward.txt\n'
    make_task(tasks / "good", "FROM debian\nWORKDIR /app\n", good)
    (tasks / "good" / "solution" / "solve.sh").write_text("echo solving; echo 7 > /app/out\n")
    failing = (
        "#!/bin/bash\necho collecting\n"
        "python3 -c 'raise AssertionError(\"wanted 7 in /app/out\")'\n"
        "echo 0 > /logs/verifier/reward.txt\necho done\n"
    )
    make_task(tasks / "zero", "FROM debian\nWORKDIR /app\n", failing)
    make_task(tasks / "broken", "FROM debian\nWORKDIR /app\nRUN exit 4\n", good)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "skyrl_cli.main", "eval", "--env", "shell", "--agent", "oracle"]
    done = subprocess.run(
        [*cmd, "--tasks", str(tasks), "--output", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "SKYRL_HARBOR_CACHE": str(cache)},
    )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    lines = done.stdout.splitlines()
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "1 of 3 tasks did not run" in done.stderr, done.stderr
    assert "good: reward 1 [reward=1]" in lines, lines
    zero = next(ln for ln in lines if ln.startswith("zero: reward 0"))
    assert "AssertionError: wanted 7 in /app/out" in zero, zero
    assert (out / "good" / "verifier" / "reward.txt").read_text().strip() == "1"
    assert "solving" in (out / "good" / "agent" / "oracle.txt").read_text()
    log = (out / "zero" / "verifier" / "test-stdout.txt").read_text()
    assert "collecting" in log and "wanted 7" in log and "done" in log, log
    assert not (out / "broken").exists() or not (out / "broken" / "verifier").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops the sandbox to another uid")
def test_a_cache_the_sandbox_cannot_enter_is_named_with_the_fix(tmp_path):
    """SKYRL_HARBOR_CACHE inside a 0700 folder the sandbox's uid does not own: one sentence
    naming that folder and the fix (before: 'the sandboxed bash did not start')."""
    private = Path(tempfile.mkdtemp(prefix="skyrl-private-"))
    private.chmod(0o700)
    task = make_task(tmp_path / "t", "FROM debian\nWORKDIR /app\n", "#!/bin/bash\n")
    old = os.environ.get("SKYRL_HARBOR_CACHE")
    os.environ["SKYRL_HARBOR_CACHE"] = str(private / "cache")
    harbor._built.cache_clear()
    env = ShellEnv(timeout_s=20)
    try:
        with pytest.raises(ValueError) as caught:
            env.reset(options={"task": task})
        message = str(caught.value)
        assert str(private) in message and "SKYRL_HARBOR_CACHE" in message, message
        assert "chmod" in message and "\n" not in message, message
    finally:
        env.close()
        if old is None:
            os.environ.pop("SKYRL_HARBOR_CACHE", None)
        else:
            os.environ["SKYRL_HARBOR_CACHE"] = old
        harbor._built.cache_clear()
        shutil.rmtree(private, ignore_errors=True)


def test_entrypoint_starts_before_the_agent_and_the_verifier_sees_it(tmp_path, cache):
    """Harbor starts the ENTRYPOINT once, with the container: the verifier runs in that live
    container. Here it starts with the episode's shell, and the verifier joins that shell
    (as root); where it cannot, the ENTRYPOINT is started again for the verifier."""
    entry = '#!/bin/bash\necho "$(date +%s%N)" >> /logs/started\nexec "$@"\n'
    dockerfile = (
        'FROM x\nCOPY entry.sh /entry.sh\nRUN chmod +x /entry.sh\nENTRYPOINT ["/entry.sh"]\n'
    )
    test_sh = (
        '#!/bin/bash\nprintf \'{"reward": 1, "starts": %d}\' "$(wc -l < /logs/started)" '
        "> /logs/verifier/reward.json\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh, {"entry.sh": entry})
    env = ShellEnv(timeout_s=20)
    try:
        obs, _ = env.reset(options={"task": task})
        assert "bash shell in /app," in obs  # no WORKDIR: Harbor's default
        assert env.step("<bash>wc -l < /logs/started</bash>")[0].startswith("1\n")
        _, reward, _, _, info = env.step("<submit/>")
        assert info["rewards"] == {"reward": 1.0, "starts": 1.0 if os.geteuid() == 0 else 2.0}
    finally:
        env.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="an episode's own network is made as root")
def test_a_service_on_port_80_started_by_the_entrypoint_serves_the_verifier(tmp_path, cache):
    """harbor-cookbook's dns-blacklisting: the ENTRYPOINT starts a server on port 80, as root
    may in a container (before: PermissionError at pre-flight, the task not run). The
    episode has a network namespace of its own where ports below 1024 are open to its uid."""
    entry = (
        "#!/bin/bash\npython3 -m http.server 80 --bind 127.0.0.1 --directory /srv/www "
        '>/dev/null 2>&1 &\nsleep 1\nexec "$@"\n'
    )
    dockerfile = (
        "FROM ubuntu:24.04\nCOPY entry.sh /entry.sh\nRUN chmod +x /entry.sh\n"
        'COPY www/ /srv/www/\nWORKDIR /app\nENTRYPOINT ["/entry.sh"]\n'
    )
    fetch = "import urllib.request as u; print(u.urlopen('http://127.0.0.1/health').read())"
    test_sh = (
        f'#!/bin/bash\n[ "$(python3 -c "{fetch}")" = "b\'up\\\\n\'" ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh, {"entry.sh": entry, "www/health": "up\n"})
    assert harbor.image(tmp_path / "t").problems == []
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        assert "up" in env.step(f'<bash>python3 -c "{fetch}"</bash>')[0]
        _, reward, _, _, info = env.step("<submit/>")
        assert reward == 1.0, info
    finally:
        env.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="an episode's own network is made as root")
def test_the_agent_starts_once_what_the_entrypoint_started_is_asleep(tmp_path, cache):
    """dns-blacklisting's ENTRYPOINT starts its server in the background and execs the
    shell. Harbor's agent runs seconds after the container starts; here the oracle's first
    `curl` could come before the server listened, and on a loaded machine it scored 0 in 1
    of 2 runs (`example.com` missing). The episode's shell is handed over once every process
    the ENTRYPOINT left is asleep (the server waiting in accept()), for at most 10 s. The
    server here first spends about a second of CPU, so without the wait the first command
    finds nothing listening."""
    entry = (
        '#!/bin/bash\n( python3 -c "sum(range(40_000_000))"; python3 -m http.server 8080 '
        '--bind 127.0.0.1 --directory /srv/www ) >/dev/null 2>&1 &\nexec "$@"\n'
    )
    dockerfile = (
        "FROM x\nCOPY entry.sh /entry.sh\nRUN chmod +x /entry.sh\n"
        'COPY www/ /srv/www/\nWORKDIR /app\nENTRYPOINT ["/entry.sh"]\n'
    )
    fetch = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/health').read())"
    files = {"entry.sh": entry, "www/health": "up\n"}
    test_sh = (
        '#!/bin/bash\n[ "$(cat /app/out)" = "b\'up\\\\n\'" ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh, files)
    (tmp_path / "t" / "solution" / "solve.sh").write_text(
        f'#!/bin/bash\npython3 -c "{fetch}" > /app/out\n'
    )
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        seen = env.step(f'<bash>python3 -c "{fetch}"</bash>')[0]
        assert seen.startswith("b'up\\n'"), seen
        env.reset(options={"task": task})  # the oracle's own shell starts the ENTRYPOINT again
        env.run_oracle()
        _, reward, _, _, info = env.step("<submit/>")
        assert reward == 1.0, info["verifier"]["output"]
    finally:
        env.close()


def test_run_is_one_folder_for_the_whole_episode(tmp_path, cache):
    """A container's /run is one folder: a service's socket or pid file there (supervisor's
    `/var/run/supervisor.sock`) is seen by every later command, the verifier's too (before:
    a fresh /run for each command, so `supervisorctl` in the tests found no socket)."""
    test_sh = (
        '#!/bin/bash\n[ "$(cat /run/svc.pid /var/run/other.pid)" = "$(printf "1\\n2")" ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", "FROM x\nWORKDIR /app\n", test_sh)
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        env.step("<bash>echo 1 > /run/svc.pid; echo 2 > /var/run/other.pid</bash>")
        _, reward, _, _, info = env.step("<submit/>")
        assert reward == 1.0, info["verifier"]["output"]
    finally:
        env.close()


# ---------------------------------------------------------------------------- containers

WORKING_RUNTIMES = [r for r in RUNTIMES if runtime_problem(r) is None]


def test_container_backend_names_why_it_cannot_run(tmp_path, cache):
    with pytest.raises(ValueError, match="unknown backend 'lxc'; known: bwrap, docker, podman"):
        ShellEnv(backend="lxc")
    broken = [r for r in RUNTIMES if r not in WORKING_RUNTIMES]
    if not broken:
        pytest.skip("every container runtime works here")
    task = make_task(tmp_path / "t", "FROM debian:bookworm-slim\nWORKDIR /app\n", TEST_SH)
    with pytest.raises(ValueError, match=f"^backend={broken[0]}: "):
        ShellEnv(backend=broken[0]).reset(options={"task": task})


@pytest.mark.skipif(
    not WORKING_RUNTIMES,
    reason="no container runtime works here: "
    + "; ".join(str(runtime_problem(r)) for r in RUNTIMES),
)
def test_container_backend_runs_the_real_image(tmp_path):
    test_sh = '#!/bin/bash\n[ "$(cat /app/out)" = 7 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'
    task = make_task(tmp_path / "t", "FROM debian:bookworm-slim\nWORKDIR /app\n", test_sh)
    (tmp_path / "t" / "task.toml").write_text(
        'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[solution.env]\nWANT = "7"\n'
    )
    task = load_harbor_task(tmp_path / "t")
    env = ShellEnv(backend=WORKING_RUNTIMES[0], timeout_s=30)
    try:
        obs, _ = env.reset(options={"task": task})
        assert "bash shell in /app," in obs
        assert env.step("<bash>ls /tests /solution</bash>")[0].count("No such file") == 2
        env.run_oracle()
        assert env.step("<submit/>")[1] == 1.0
        env.reset(options={"task": task})
        assert env.step("<submit/>")[1] == 0.0
    finally:
        env.close()
