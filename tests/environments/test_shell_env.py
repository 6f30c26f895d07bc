"""ShellEnv: action grammar, the persistent shell, output caps, timeouts, grading, Gymnasium API."""

from __future__ import annotations

import statistics
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from environments import shell as shell_env
from environments.sandbox import Limits, pids_of_uid
from environments.shell import ActionError, ShellEnv, parse_action, quote_command
from tasks.harbor import load_harbor_task
from tasks.task import Task

SLACK = 2.0  # two shared cores: leave room for a busy machine


def live_pids(uid: int) -> list[int]:
    """Processes of `uid` that are not zombies (a dead orphan waits for pid 1 to reap it)."""
    alive = []
    for pid in pids_of_uid(uid):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(pid)
        except (OSError, IndexError):
            continue
    return alive


# The verifier of the toy task: reward 1 when answer.txt says 42; REWARD_MODE picks the file.
TEST_SH = """#!/bin/bash
case "$(cat "$TESTS_DIR/mode")" in
  json) echo '{"exists": 1, "right": 0}' >"$LOGS_DIR/reward.json" ;;
  none) echo "no reward file today" ;;
  bad) echo "lots" >"$LOGS_DIR/reward.txt" ;;
  slow) sleep 30 ;;
  *) if [ "$(cat answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi >"$LOGS_DIR/reward.txt" ;;
esac
"""


def make_task(root: Path, mode: str = "txt", setup: str | None = None) -> Task:
    """A Harbor folder: a starting file, optional setup.sh, a verifier in the given mode."""
    (root / "environment" / "files" / "sub").mkdir(parents=True)
    (root / "environment" / "files" / "sub" / "hello.txt").write_text("hello\n")
    if setup is not None:
        (root / "environment" / "setup.sh").write_text(setup)
    (root / "instruction.md").write_text("Write 42 into answer.txt.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 2.0\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "tests" / "mode").write_text(mode)
    return load_harbor_task(root)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return make_task(tmp_path / "answer-42")


@pytest.fixture
def env():
    env = ShellEnv(timeout_s=1.0, max_turns=30)
    yield env
    env.close()


def run(env: ShellEnv, command: str) -> str:
    obs, reward, terminated, truncated, _ = env.step(f"<bash>{command}</bash>")
    assert (reward, terminated, truncated) == (0.0, False, False), obs
    return obs


# ---------------------------------------------------------------------------- grammar


def test_parse_action():
    assert parse_action("I will look. <bash> ls -la </bash> then <submit/>") == " ls -la "
    assert parse_action("All done <submit/> <bash>rm -rf /</bash>") is None
    for text, message in [
        ("ls", "no <bash>"),
        ("<bash>ls", "not closed"),
        ("<bash><bash>ls</bash></bash>", "nested"),
        ("<bash>echo <submit/></bash>", "nested"),
        ("<bash>  \n</bash>", "empty"),
        ("<bash>echo \x00</bash>", "NUL"),
        ("<BASH>ls</BASH>", "no <bash>"),
        ("<submit />", "no <bash>"),
    ]:
        with pytest.raises(ActionError, match=message):
            parse_action(text)


@pytest.mark.parametrize(
    "command",
    ["echo 'a' \"b\" \\ $HOME `x` !x", "é ✓ \t\r\x01\x1b[31m\x7f", "line1\nline2\n\n", "x" * 7000],
)
def test_quote_command_round_trips_through_bash(command):
    lines = quote_command(command)
    assert all(len(line) < 4000 and line.isascii() and line.isprintable() for line in lines)
    script = "\n".join([*lines, 'printf %s "$__skyrl_cmd"'])
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out == command.encode()


# ---------------------------------------------------------------------------- the shell


def test_reset_copies_files_and_explains_the_grammar(env, task):
    obs, info = env.reset(options={"task": task})
    assert obs.startswith("Write 42 into answer.txt.")
    assert "<bash>command</bash>" in obs and "<submit/>" in obs and "1 s" in obs
    assert obs.endswith("Turns left: 30")
    assert info == {"turns_left": 30, "error": None, "task_id": "answer-42"}
    assert (env.files / "sub" / "hello.txt").read_text() == "hello\n"


def test_state_persists_and_exit_codes_show(env, task):
    env.reset(options={"task": task})
    assert run(env, "cat sub/hello.txt").startswith("hello\n[exit code: 0]")
    run(env, 'cd sub && export X=7 && f() { echo "f$1"; }')
    obs = run(env, "pwd; echo $X; f 1; ls /nope")
    assert obs.startswith(f"{env.sandbox.inner_workdir}/sub\n7\nf1\nls: cannot access")
    assert "[exit code: 2]" in obs
    obs = run(env, "cat <<'EOF'\nmulti\nline $X\nEOF\necho 'unclosed")
    assert "multi\nline $X\n" in obs and "unexpected EOF" in obs
    assert run(env, "cat; read -r x; echo $?").startswith("1\n")  # stdin is /dev/null
    assert run(env, "printf 'no newline'") == "no newline\n[exit code: 0]\nTurns left: 24"
    assert run(env, "true") == "[exit code: 0]\nTurns left: 23"


def test_long_commands_arrive_intact(env, task):
    """Commands far over the pty's 4095-byte line limit, ASCII or not, reach bash byte for byte."""
    env.reset(options={"task": task})
    for text in ["ab'c\\" * 19_000, "é✓\t\x01 " * 8_000]:
        command = f"cat > big.txt <<'EOF'\n{text}\nEOF\nwc -c < big.txt"
        assert len(command) < shell_env.MAX_ACTION_CHARS
        assert run(env, command).startswith(f"{len(text.encode()) + 1}\n[exit code: 0]")
        assert (env.files / "big.txt").read_text() == text + "\n"


def test_long_output_keeps_head_and_tail(task):
    env = ShellEnv(limits=Limits(output_bytes=1000))
    env.reset(options={"task": task})
    obs = run(env, "seq 1 100000")
    assert obs.startswith("1\n2\n3\n") and "99999\n100000\n[exit code: 0]" in obs
    assert "bytes of output omitted ...]" in obs and len(obs) < 1200
    env.close()


def test_timeout_kills_the_command_and_its_children_but_keeps_the_shell(env, task):
    env.reset(options={"task": task})
    run(env, "cd sub; Y=kept")
    start = time.monotonic()
    obs = run(env, "sleep 300 & sleep 200")
    assert time.monotonic() - start < 1.0 + SLACK
    assert "stopped at the 1 s time limit; it and every process it started were killed" in obs
    assert run(env, "echo $Y; pwd; pgrep -c -u $(id -u) sleep").startswith(
        f"kept\n{env.sandbox.inner_workdir}/sub\n0\n"
    )


@pytest.mark.parametrize(
    "command, message",
    [
        ("exit 3", "the shell exited; a new shell was started"),
        ("while :; do :; done", "the shell was restarted"),
        ("exec >/dev/null", "the shell was restarted"),
        ("set -e; false", "the shell exited"),
    ],
)
def test_a_broken_shell_is_replaced(env, task, command, message):
    env.reset(options={"task": task})
    run(env, "cd sub")
    assert message in run(env, command)
    assert run(env, "pwd").startswith(f"{env.sandbox.inner_workdir}\n[exit code: 0]")


def test_echo_round_trip_is_fast(env, task):
    env.reset(options={"task": task})
    times = []
    for _ in range(25):
        start = time.perf_counter()
        run(env, "echo hi")
        times.append(time.perf_counter() - start)
    assert statistics.median(times) < 0.05, times


# ---------------------------------------------------------------------------- grading


def test_submit_grades_with_the_hidden_tests(env, task):
    env.reset(options={"task": task})
    run(env, "echo 42 > answer.txt; ls -a")
    obs, reward, terminated, truncated, info = env.step("<submit/>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert obs == "Submitted. The tests gave reward 1."
    assert info["correct"] and info["rewards"] == {"reward": 1.0} and info["submitted"]
    assert info["verifier"]["returncode"] == 0 and not info["verifier"]["timed_out"]
    obs, reward, terminated, _, info = env.step("<bash>ls</bash>")
    assert terminated and reward == 0.0 and "reset()" in obs


def test_the_agent_cannot_outlive_its_episode(env, task):
    """What the agent leaves running runs on while the verifier runs (Harbor verifies in the
    same live container), and is killed with the grading: nothing of it is left after."""
    env.reset(options={"task": task})
    uid = env.sandbox.uid
    run(env, "echo 42 > answer.txt; (sleep 600) >/dev/null 2>&1 & disown")
    _, reward, *_ = env.step("<submit/>")
    assert reward == 1.0
    if uid is not None:
        assert live_pids(uid) == []


@pytest.mark.parametrize(
    "mode, reward, error",
    [
        ("json", 0.5, None),
        ("none", 0.0, "the verifier wrote neither reward.json nor reward.txt"),
        ("bad", 0.0, "reward.txt holds 'lots', not a number"),
        ("slow", 0.0, "test.sh did not finish within its 2 s limit"),
    ],
)
def test_reward_files_and_their_failures(env, tmp_path, mode, reward, error):
    env.reset(options={"task": make_task(tmp_path / mode, mode)})
    obs, got, terminated, _, info = env.step("<submit/>")
    assert (got, terminated, info["reward_error"]) == (reward, True, error)
    if error:
        assert f"The tests gave no reward ({error}): reward 0." in obs


def test_running_out_of_turns_grades_and_truncates(task):
    env = ShellEnv(max_turns=2, format_penalty=0.25)
    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step("no tags")
    assert obs.startswith("Error: no <bash> or <submit/> tag found.")
    assert obs.endswith("Turns left: 1 (the work is graded after it)")
    assert info == {"turns_left": 1, "error": "no <bash> or <submit/> tag found"}
    obs, reward, terminated, truncated, info = env.step("<bash>echo 42 > answer.txt</bash>")
    assert (reward, terminated, truncated) == (0.75, False, True)
    assert "The episode ended without <submit/>; the work was graded." in obs
    assert info["correct"] and not info["submitted"]
    env.close()


def test_setup_script_and_task_dir_override(tmp_path, task):
    folder = Path(make_task(tmp_path / "setup", setup="echo 41 > start.txt\n").metadata["task_dir"])
    env = ShellEnv(task_dir=folder)
    obs, info = env.reset(options={"task": task})  # task_dir wins over the task passed in
    assert info["task_id"] == "setup"
    assert run(env, "cat start.txt").startswith("41\n")
    env.close()
    (folder / "environment" / "setup.sh").write_text("exit 4\n")
    with pytest.raises(
        ValueError, match=r"setup: cannot run as Harbor would: RUN bash /tmp/setup.sh .*exit 4"
    ):
        env.reset()
    with pytest.raises(ValueError, match="names no Harbor folder"):
        ShellEnv().reset(options={"task": Task(id="x", env="shell", prompt="p")})


def test_close_kills_everything_and_removes_the_work_dir(task):
    env = ShellEnv()
    env.reset(options={"task": task})
    run(env, "sleep 100 & setsid sleep 100 & disown -a")
    sandbox = env.sandbox
    env.close()
    assert sandbox.uid is None or live_pids(sandbox.uid) == []
    assert not sandbox.workdir.exists() and env.sandbox is None
    env.close()  # idempotent


def test_gymnasium_check_env(monkeypatch, task):
    monkeypatch.setattr(shell_env.text_env, "train_suite", lambda env: [task])
    env = ShellEnv()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    assert not [w for w in caught if "not within the observation space" in str(w.message)]
    monkeypatch.undo()  # and the real bundled suite, drawn by seed
    first = env.reset(seed=3)[0].replace(env.sandbox.inner_workdir, "WORK")
    assert env.reset(seed=3)[0].replace(env.sandbox.inner_workdir, "WORK") == first
    env.close()
