"""`skyrl envs`, and every built-in environment trained for 2 steps by the real command."""

from __future__ import annotations

import json

import pytest

from tests.conftest import NO_TRACKING, skyrl

BUILTINS = {
    "sql": "skyrl/SQL-v0",
    "math": "skyrl/Math-v0",
    "search": "skyrl/Search-v0",
    "python": "skyrl/Python-v0",
    "shell": "skyrl/Shell-v0",
}


def test_envs_lists_builtins_and_project_plugins(tmp_path):
    skyrl("init", "proj", cwd=tmp_path)
    rows = [
        json.loads(ln) for ln in skyrl("envs", "--json", cwd=tmp_path / "proj").stdout.splitlines()
    ]
    by_name = {r["name"]: r for r in rows}
    for name, gym_id in BUILTINS.items():
        assert by_name[name]["kind"] == "built-in" and by_name[name]["id"] == gym_id
        assert "<" in by_name[name]["grammar"]  # the action tags are shown
    plugin = by_name["my_env"]
    assert plugin["kind"] == "plugin" and plugin["id"] == "my_env.py:UnitsEnv"
    assert "Convert a quantity" in plugin["grammar"]
    table = skyrl("envs", cwd=tmp_path / "proj").stdout
    assert "skyrl/Shell-v0" in table and "my_env" in table


@pytest.mark.parametrize("env", ["search", "python", "shell"])
def test_builtin_trains_two_steps_with_tiny(tmp_path, ray_address, env):
    # sql and math are trained by test_train_cli.py and test_algorithms_cli.py; search
    # also warms up on its multi-turn demonstrations (search, then answer)
    warmup = ("--set", "warmup.sft_steps=2", "--set", "warmup.batch_size=2")
    done = skyrl(
        "train",
        *("--env", env, "--model", "tiny", "--max-steps", "2", "--run-name", env),
        *("--set", "rollout.batch_size=2", "--set", "rollout.group_size=2"),
        *("--set", "rollout.max_new_tokens=16", "--set", "env.max_turns=2"),
        *("--set", "eval.limit=0", "--ray-address", ray_address, *NO_TRACKING),
        *(warmup if env == "search" else ()),
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob(f"{env}-*")
    if env == "search":  # two turns hold one search and the answer: the 312 one-hop questions
        assert "warm-up: 2 supervised steps of 2 on 312 reference answers" in done.stderr
        losses = (run / "warmup" / "metrics.jsonl").read_text().splitlines()
        assert len(losses) == 2, losses
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["episodes"] == 4 and m["episodes/failed"] == 0 for m in metrics), metrics
    rollouts = [
        json.loads(ln) for ln in (run / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    ]
    # the environment answered: each episode has the task prompt and at least one model turn
    assert all(
        r["num_turns"] >= 1 and r["turns"][0]["role"] in ("system", "user") for r in rollouts
    )


@pytest.mark.parametrize("command", ["train", "eval", "init"])
def test_env_help_lists_the_registry_table(tmp_path, command):
    """Each `--env` help names every row of the table, read when the help is shown."""
    import re

    from environments.registry import BUILTINS

    text = skyrl(command, "--help", cwd=tmp_path, env={"COLUMNS": "300", "NO_COLOR": "1"}).stdout
    (line,) = [ln for ln in text.splitlines() if "│ --env " in ln]
    assert f"Built-ins: {', '.join(BUILTINS)}." in re.sub(r"\s+", " ", line), line


def test_starting_skyrl_imports_no_environment():
    """The table is read when help is shown: starting `skyrl` imports neither the registry
    nor gymnasium (nor numpy behind it)."""
    import subprocess
    import sys

    code = (
        "import sys; import skyrl_cli.main\n"
        "print([m for m in ('environments', 'gymnasium', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out
