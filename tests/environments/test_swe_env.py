"""`skyrl/SWE-v0`: bash in the checked-out repo, the diff graded by the harness."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from gymnasium.utils.env_checker import check_env

from environments.swe import SWEEnv, instance_task
from tasks.swe import load_instances


@pytest.fixture(scope="module")
def instance() -> dict[str, Any]:
    return next(
        i for i in load_instances("swe-bench-mini") if i["instance_id"] == "skyrl-mini__ledger-3"
    )


def test_gold_patch_applied_with_bash_resolves(instance: dict[str, Any]) -> None:
    env = SWEEnv(max_turns=4)
    obs, info = env.reset(options={"task": instance_task(instance)})
    assert "Money.parse" in obs and obs.endswith("Turns left: 4") and info["turns_left"] == 4
    obs, reward, done, cut, info = env.step("let me look <bash>git status --short; ls</bash>")
    assert "ledger" in obs and "[exit code: 0]" in obs and obs.endswith("Turns left: 3")
    assert (reward, done, cut) == (0.0, False, False)
    obs, *_ = env.step("<bash>oops")  # malformed: an error observation, the turn is spent
    assert obs.startswith("Error: <bash> is not closed") and obs.endswith("Turns left: 2")
    cmd = f"<bash>git apply <<'EOF'\n{instance['patch']}EOF\n</bash>"
    obs, *_ = env.step(cmd)
    assert "[exit code: 0]" in obs
    obs, reward, done, cut, info = env.step("<submit/>")
    assert (reward, done, cut) == (1.0, True, False) and info["resolved"] and info["correct"]
    assert info["model_patch"].startswith("diff --git a/ledger/money.py")
    assert "resolved" in obs and "PASSED" in info["test_output"]
    assert env.step("<submit/>")[2]  # over: terminated, never an exception


def test_out_of_turns_grades_an_empty_patch(instance: dict[str, Any]) -> None:
    env = SWEEnv(max_turns=1)
    env.reset(options={"task": instance_task(instance)})
    obs, reward, done, cut, info = env.step("<bash>echo hi</bash>")
    assert (reward, done, cut) == (0.0, False, True)
    assert info["empty_patch"] and not info["resolved"] and "without <submit/>" in obs


def test_missing_repository_fails_reset(instance: dict[str, Any], tmp_path) -> None:
    with pytest.raises(ValueError, match="no repository skyrl-mini__ledger"):
        SWEEnv(repos_dir=tmp_path).reset(options={"task": instance_task(instance)})


def test_gymnasium_check_env() -> None:
    env = SWEEnv(max_turns=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    assert not [w for w in caught if "not within the observation space" in str(w.message)]
    env.close()
