"""PythonEnv: grammar, graders, the persistent REPL, restarts, Gymnasium API, bundled tasks."""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from environments import python as python_env
from environments.python import ActionError, PythonEnv, PythonRepl, grade, parse_action
from environments.sandbox import Limits, Sandbox, pids_of_uid
from tasks.python_tasks import GENERATORS, load_suite, split_of
from tasks.task import Task

SLACK = 2.0  # two shared cores


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


def make_task(answer: object = 42, grader: str = "numeric") -> Task:
    return Task(
        id="t1", env="python", prompt="What is 6 * 7?", answer=answer, metadata={"grader": grader}
    )


@pytest.fixture
def env():
    environment = PythonEnv(timeout_s=2.0, max_turns=20)
    environment.reset(options={"task": make_task()})
    yield environment
    environment.close()


def run(env: PythonEnv, code: str) -> str:
    obs, reward, terminated, truncated, _ = env.step(f"<python>{code}</python>")
    assert (reward, terminated, truncated) == (0.0, False, False), obs
    return obs.rsplit("\nTurns left:", 1)[0]


# ---------------------------------------------------------------------------- grammar, graders


def test_parse_action():
    assert parse_action("think <python>\n  x = 1\n  x\n</python> <answer>2</answer>") == (
        "python",
        "x = 1\nx",
    )
    assert parse_action("<python>```python\nprint(1)\n```</python>") == ("python", "print(1)")
    assert parse_action("<answer> 42 </answer><python>1</python>") == ("answer", "42")
    for bad in [
        "print(1)",
        "<python>1",
        "<python><answer>1</answer></python>",
        "<answer> </answer>",
    ]:
        with pytest.raises(ActionError):
            parse_action(bad)


def test_graders():
    assert grade("42", make_task()) and grade("42.0", make_task()) and not grade("41", make_task())
    assert not grade("forty-two", make_task())
    weekday = make_task("Tuesday", "exact")
    assert grade("  tuesday ", weekday) and not grade("Tue", weekday)
    assert grade("a  b c", make_task("A b C", "exact"))
    assert grade("7", make_task([6, 7])) and not grade("8", make_task([6, 7]))
    with pytest.raises(ValueError, match="known: numeric, exact"):
        grade("1", make_task(1, "fuzzy"))


# ---------------------------------------------------------------------------- episodes


def test_first_observation():
    obs, info = PythonEnv().reset(options={"task": make_task()})
    assert obs.startswith("What is 6 * 7?\n") and obs.endswith("Turns left: 5")
    assert "<python>" in obs and "<answer>42</answer>" in obs
    assert info == {"turns_left": 5, "error": None, "task_id": "t1"}
    assert PythonEnv.stop_strings == ("</python>", "</answer>")


def test_state_persists_and_cells_read_like_a_notebook(env: PythonEnv):
    assert run(env, "x = 6\ny = 7") == "(no output)"
    assert run(env, "print('product:', x * y)\nx * y") == "product: 42\nOut: 42"
    assert run(env, "import os\nos.system('echo from a subprocess')\nNone") == "from a subprocess"
    obs = run(env, "def f():\n    return 1 / 0\nf()")
    assert obs.startswith("Traceback") and obs.endswith("ZeroDivisionError: division by zero")
    assert 'File "<cell 4>", line 2, in f' in obs and "return 1 / 0" in obs
    assert run(env, "_ + 1") == "Out: 43"  # `_` is the last value, as in a notebook
    obs, reward, terminated, truncated, info = env.step("<answer>42</answer>")
    assert (obs, reward, terminated, truncated) == ("Correct.", 1.0, True, False)
    assert info["correct"] is True


def test_wrong_answer_and_step_after_the_end(env: PythonEnv):
    obs, reward, terminated, _, info = env.step("<answer>41</answer>")
    assert (obs, reward, terminated, info["correct"]) == ("Incorrect.", 0.0, True, False)
    obs, reward, terminated, _, _ = env.step("<answer>42</answer>")
    assert terminated and reward == 0.0 and "reset()" in obs


def test_turn_budget_truncates_with_penalty():
    env = PythonEnv(max_turns=2, format_penalty=0.25)
    env.reset(options={"task": make_task()})
    obs, reward, terminated, truncated, info = env.step("no tags")
    assert obs.startswith("Error: no <python> or <answer> tag found")
    assert obs.endswith("Turns left: 1 (use it for <answer>)") and info["error"]
    obs, reward, terminated, truncated, info = env.step("<python>print('hi')</python>")
    assert (reward, terminated, truncated) == (-0.25, False, True)
    assert obs == "hi\nTurns left: 0. The episode ended without an <answer>."
    assert env.sandbox is None  # the episode's REPL is gone
    env.close()


def test_timeout_restarts_the_repl(env: PythonEnv):
    run(env, "kept = 1")
    start = time.monotonic()
    obs = run(env, "print('before')\nwhile True: pass")
    assert time.monotonic() - start < 2.0 + SLACK
    assert obs.startswith("before\nError: the code ran past the 2 s time limit")
    assert "variables and imports from earlier turns are lost" in obs
    assert run(env, "'kept' in globals()") == "Out: False"


def test_crash_restarts_the_repl(env: PythonEnv):
    obs = run(env, "import os; os._exit(3)")
    assert obs.startswith("Error: the Python process died (exit status 3)")
    assert run(env, "import ctypes; ctypes.string_at(0)").startswith(
        "Error: the Python process died (killed by signal 11)"
    )
    assert run(env, "sys_exit = 1\nraise SystemExit(2)").endswith("SystemExit: 2")
    assert run(env, "sys_exit") == "Out: 1"  # SystemExit is an error of the cell, not the end


def test_long_output_is_clipped_with_a_marker():
    env = PythonEnv(max_obs_chars=500)
    env.reset(options={"task": make_task()})
    obs = run(env, "for i in range(10000): print(i)\n1/0")
    assert "\n... (output truncated)\n" in obs and obs.endswith(
        "ZeroDivisionError: division by zero"
    )
    assert len(obs) < 700
    assert run(env, "'x' * 10000").endswith("characters clipped) ...")
    env.close()
    roomy = PythonEnv(max_obs_chars=20_000, limits=Limits(output_bytes=12_000))
    roomy.reset(options={"task": make_task()})
    obs = run(roomy, "import os\nos.system('head -c 9000 /dev/zero | tr \"\\\\0\" a'); None")
    assert obs == "a" * 9000  # under the cap: all of it, no marker
    obs = run(roomy, "os.system('head -c 20000 /dev/zero | tr \"\\\\0\" b'); print('c' * 10)")
    assert obs == "b" * 12_000 + "\n... (output truncated)"
    roomy.close()


def test_reset_gives_a_fresh_repl_and_close_kills_it(env: PythonEnv):
    run(env, "x = 1\nopen('f.txt', 'w').write('hi')")
    box = env.sandbox
    assert box is not None and (box.workdir / "f.txt").exists()
    env.reset(options={"task": make_task()})
    assert box.closed and not box.workdir.exists()
    assert run(env, "import os; 'x' in globals(), os.listdir('.')") == "Out: (False, [])"
    box = env.sandbox
    assert box is not None
    env.close()
    if box.uid is not None:
        assert pids_of_uid(box.uid) == []


def test_gymnasium_check_env():
    env = PythonEnv()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    assert not [w for w in caught if "not within the observation space" in str(w.message)]
    assert env.reset(seed=3)[0] == env.reset(seed=3)[0]
    env.close()


def test_round_trip_is_milliseconds():
    """The median `print(1)` round trip and `env.step` over 1,000 calls (printed with -s)."""
    with Sandbox(Limits()) as box:
        repl = PythonRepl(box, python_env.default_python(), 16_384)
        start = time.perf_counter()
        repl.start()
        started = time.perf_counter() - start
        trips = []
        for _ in range(1000):
            start = time.perf_counter()
            reply = repl.execute("print(1)", 5.0)
            trips.append(time.perf_counter() - start)
            assert reply.output == "1\n"
        repl.stop()
    env = PythonEnv(max_turns=10**6)
    env.reset(options={"task": make_task()})
    env.step("<python>1</python>")
    steps = []
    for _ in range(1000):
        start = time.perf_counter()
        env.step("<python>print(1)</python>")
        steps.append(time.perf_counter() - start)
    env.close()
    trip, step = statistics.median(trips) * 1000, statistics.median(steps) * 1000
    print(
        f"\nREPL start {started * 1000:.1f} ms; median print(1) round trip {trip:.3f} ms; "
        f"median env.step {step:.3f} ms"
    )
    assert trip < 20 and step < 20


# ---------------------------------------------------------------------------- bundled tasks


def test_bundled_suites_are_fixed_disjoint_and_complete():
    suites = {s: load_suite(s) for s in ("train", "dev", "test")}
    assert [len(v) for v in suites.values()] == [1000, 100, 100]
    for split, tasks in suites.items():
        assert all(t.split == split and split_of(str(t.prompt)) == split for t in tasks)
        assert all(
            t.env == "python" and t.metadata["grader"] in ("numeric", "exact") for t in tasks
        )
    assert {t.metadata["kind"] for t in suites["train"]} == set(GENERATORS)
    assert load_suite("train")[7] == suites["train"][7]
    with pytest.raises(ValueError, match="known: train, dev, test"):
        load_suite("val")
    for task in suites["dev"]:
        assert grade(str(task.answer), task), task
        assert not grade(str(task.answer) + "1", task), task


def test_bundled_tasks_are_solvable_by_computing():
    by_kind = {t.metadata["kind"]: t for t in load_suite("dev")}
    programs = {
        "primes_sum": "n = {n}\ns = bytearray([1]) * n\ns[:2] = b'\\x00\\x00'\n"
        "for i in range(2, int(n ** 0.5) + 1):\n    if s[i]: s[i*i::i] = bytes(len(range(i*i, n, i)))\n"
        "sum(i for i in range(n) if s[i])",
        "weekday": "import datetime\ndatetime.date.fromisoformat('{d}').strftime('%A')",
    }
    env = PythonEnv()
    for kind, template in programs.items():
        task = by_kind[kind]
        words = str(task.prompt).rstrip("?").replace("? ", " ").split()
        value = words[-1] if kind == "primes_sum" else words[6]
        env.reset(options={"task": task})
        obs = run(env, template.format(n=value, d=value))
        answer = obs.removeprefix("Out: ").strip("'")
        assert env.step(f"<answer>{answer}</answer>")[1] == 1.0, (task, obs)
    env.close()
