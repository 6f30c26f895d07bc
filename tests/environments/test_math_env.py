"""MathEnv and the math task generator: grading, grammar, Gymnasium API, suites."""

from __future__ import annotations

import re
import time
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import environments.registry  # noqa: F401  (registers the skyrl/* ids)
from environments.math import MathEnv, numeric_match, parse_answer
from tasks import math as math_tasks
from tasks.task import Task


def task(answer, question: str = "What is 6 * 7?") -> Task:
    return Task(id="m1", env="math", prompt=question, answer=answer)


# ---------------------------------------------------------------------------- grading


@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        ("42", 42),
        (" 42 ", 42),
        ("42.0", 42),
        ("42.", 42),
        ("+42", 42),
        ("-7", -7),
        ("\u22127", -7),
        ("1,000", 1000),
        ("1,234,567.5", 1234567.5),
        ("3/4", 0.75),
        ("-3/4", -0.75),
        ("0.75", "3/4"),
        ("1e3", 1000),
        ("$7", 7),
        ("7.5", 7.5),
        ("0.3333333", 1 / 3),
        (".5", 0.5),
    ],
)
def test_numeric_match_accepts(pred, gold):
    assert numeric_match(pred, gold)


@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        ("43", 42),
        ("0.33", 1 / 3),
        ("", 0),
        ("seven", 7),
        ("1,00", 100),
        ("1/0", 0),
        ("nan", float("nan")),
        ("inf", float("inf")),
        ("42 apples", 42),
        ("4 2", 42),
        ("1e999999999", 1),
        ("9" * 5000, 1),
        ("1", True),
        ("1", None),
        ("1", "one"),
    ],
)
def test_numeric_match_rejects(pred, gold):
    start = time.monotonic()
    assert not numeric_match(pred, gold)
    assert time.monotonic() - start < 0.1


def test_parse_answer_takes_the_first_tag():
    assert parse_answer("So 6*7 = 42. <answer> 42 </answer> <answer>41</answer>") == "42"
    for bad in ["42", "<answer>42", "<answer></answer>", "<answer><answer>4</answer></answer>"]:
        with pytest.raises(ValueError):
            parse_answer(bad)


# ---------------------------------------------------------------------------- generator


def test_generate_is_deterministic_and_levelled():
    a = math_tasks.generate(50, seed=7, levels=(1, 2))
    assert a == math_tasks.generate(50, seed=7, levels=(1, 2))
    assert a != math_tasks.generate(50, seed=8, levels=(1, 2))
    assert {t.metadata["difficulty"] for t in a} == {1, 2}
    assert all(t.env == "math" and t.id.startswith("math-s7-") for t in a)
    assert len({t.prompt for t in a}) == 50


def test_generated_answers_are_right():
    """Levels 1-3 are checked against Python's own arithmetic, level 4 by template."""
    for t in math_tasks.generate(400, seed=1):
        level = t.metadata["difficulty"]
        if level <= 3:
            expr = re.fullmatch(r"What is (.+)\?", t.prompt).group(1)
            assert re.fullmatch(r"[\d+\-* ()]+", expr)
            assert eval(expr) == t.answer, t  # a digits-and-operators string from our generator
            if level == 1:
                assert re.fullmatch(r"\d [+-] \d", expr)
            if level == 2:
                assert re.fullmatch(r"\d\d [+\-*] \d\d", expr)
        else:
            nums = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", t.prompt)]
            expected = {
                "buys": lambda a, b, *_: a + b,
                "gives": lambda a, b, *_: a - b,
                "A box holds": lambda a, b, *_: a * b,
                "shares": lambda a, b, *_: a / b,
                "reads": lambda a, b, c: a * b + c,
                "notebook": lambda a, b, *_: a * b,
            }
            (rule,) = [f for key, f in expected.items() if key in t.prompt]
            assert t.answer == rule(*nums), t
            assert isinstance(t.answer, int | float)


def test_generate_refuses_impossible_requests():
    with pytest.raises(ValueError, match="distinct"):
        math_tasks.generate(500, seed=0, levels=(1,))
    with pytest.raises(ValueError, match="unknown math level"):
        math_tasks.generate(5, seed=0, levels=(9,))


def test_suites_are_fixed_sized_and_disjoint():
    suites = {split: math_tasks.load_suite(split) for split in ("train", "dev", "test")}
    assert {k: len(v) for k, v in suites.items()} == {"train": 2000, "dev": 200, "test": 200}
    assert suites["train"][12].id == "math-train-00012"
    assert all(t.split == "train" for t in suites["train"])
    prompts = {k: {t.prompt for t in v} for k, v in suites.items()}
    assert len(prompts["train"]) == 2000  # no repeats within a split
    assert not prompts["train"] & prompts["dev"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["dev"] & prompts["test"]
    for split in ("dev", "test"):
        assert {t.metadata["difficulty"] for t in suites[split]} == {1, 2, 3, 4}
    # the suite does not depend on the process: regenerate from scratch and compare
    assert math_tasks.generate(200, 3003, split="test") == suites["test"]
    with pytest.raises(ValueError, match="unknown split"):
        math_tasks.load_suite("validation")


# ---------------------------------------------------------------------------- episodes


def test_correct_and_wrong_answers():
    env = MathEnv()
    obs, info = env.reset(options={"task": task(42)})
    assert obs == "What is 6 * 7?\nAnswer with <answer>NUMBER</answer>."
    assert info["turns_left"] == 1
    obs, reward, terminated, truncated, info = env.step("6*7 is 42 <answer>42</answer>")
    assert (obs, reward, terminated, truncated) == ("Correct.", 1.0, True, False)
    assert info == {"turns_left": 0, "error": None, "correct": True}
    env.reset(options={"task": task(42)})
    obs, reward, terminated, truncated, info = env.step("<answer>41</answer>")
    assert (obs, reward, terminated, info["correct"]) == ("Incorrect.", 0.0, True, False)


def test_missing_tag_on_the_last_turn_is_penalised():
    env = MathEnv(format_penalty=0.2)
    env.reset(options={"task": task(42)})
    obs, reward, terminated, truncated, info = env.step("The answer is 42")
    assert (reward, terminated, truncated) == (-0.2, True, False)
    assert info["correct"] is False and "no <answer> tag" in info["error"]
    assert obs == "Error: no <answer> tag found. No turns left."


def test_extra_turns_give_a_second_chance():
    env = MathEnv(max_turns=2)
    env.reset(options={"task": task(42)})
    obs, reward, terminated, truncated, info = env.step("<answer>42")
    assert obs == (
        "Error: <answer> is not closed with </answer>. "
        "Answer with <answer>NUMBER</answer>.\nTurns left: 1"
    )
    assert (reward, terminated, truncated, info["turns_left"]) == (0.0, False, False, 1)
    _, reward, terminated, *_ = env.step("<answer>42</answer>")
    assert (reward, terminated) == (1.0, True)
    obs, reward, terminated, *_ = env.step("<answer>42</answer>")
    assert terminated and reward == 0.0 and "reset()" in obs


@pytest.mark.parametrize(
    "action",
    [
        "<answer>4\ud8002</answer>",
        b"<answer>\xff\xfe</answer>",
        "<answer>" + "9" * 1_000_000 + "</answer>",
        "<answer><answer>42</answer></answer>",
        "<answer>   </answer>",
        "",
        None,
        3.5,
    ],
)
def test_garbage_actions_are_observations(action):
    env = MathEnv(max_turns=2)
    env.reset(options={"task": task(42)})
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and reward <= 0.0 and not truncated
    obs.encode("utf-8")
    assert "correct" not in info or info["correct"] is False


def test_gym_make_and_check_env():
    env = gym.make("skyrl/Math-v0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert not [w for w in caught if "observation space" in str(w.message)]
    obs_a, _ = env.reset(seed=11)
    obs_b, _ = env.reset(seed=11)
    assert obs_a == obs_b and obs_a.endswith("Answer with <answer>NUMBER</answer>.")
    suite = {t.prompt for t in math_tasks.load_suite("train")}
    assert obs_a.split("\n")[0] in suite
    env.close()
