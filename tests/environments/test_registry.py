"""Every built-in is a Gymnasium environment made by id; plugins come from entry points too."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from environments import registry


@pytest.mark.parametrize("name", sorted(registry.BUILTINS))
def test_builtin_is_made_by_gym_id_and_passes_check_env(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # shells may write history files
    spec = registry.BUILTINS[name]
    assert spec.gym_id is not None
    env = gym.make(spec.gym_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # check_env's advice on seeding etc. is not a failure
            check_env(env.unwrapped)
        obs, info = env.reset(seed=1)  # no task given: one is drawn from the bundled suite
        assert isinstance(obs, str) and obs
        obs2, _ = env.reset(seed=1)
        assert obs2 == obs  # the draw is seeded
        obs, reward, terminated, truncated, info = env.step("not an action at all")
        assert isinstance(obs, str) and isinstance(reward, float)
    finally:
        env.close()


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="known: .*math.*python.*search.*shell.*sql"):
        registry.resolve("nope")


PLUGIN = '''
import gymnasium as gym
from environments.spaces import TextSpace


class EchoEnv(gym.Env):
    """Echo: repeat the word; one turn."""

    grammar = "<echo>word</echo> repeats a word"

    def __init__(self, max_turns=1, **kwargs):
        self.observation_space = TextSpace(1000)
        self.action_space = TextSpace(1000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say hi", {}

    def step(self, action):
        return "", float("hi" in action), True, False, {}
'''


def test_entry_point_plugins_are_found_and_listed(tmp_path):
    """A real installed-distribution layout (dist-info + entry_points.txt) on sys.path."""
    (tmp_path / "echo_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "echo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[skyrl.environments]\necho = echo_plugin:EchoEnv\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from environments import registry\n"
        "spec = registry.resolve('echo')\n"
        "env = registry.make_env(spec)\n"
        "print(spec.entry, env.reset()[0], env.step('hi')[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout
    assert out.split() == ["echo_plugin:EchoEnv", "say", "hi", "1.0"]
    env_var = {"PYTHONPATH": str(tmp_path)}
    from tests.conftest import skyrl

    listing = skyrl("envs", cwd=tmp_path, env=env_var).stdout
    assert "echo" in listing and "repeats a word" in listing


# ------------------------------------------------------------------ the row owns the environment


@pytest.mark.parametrize("name", sorted(registry.BUILTINS))
def test_a_builtin_row_owns_its_preset_and_reads_its_grammar_from_the_class(name):
    from trainers.config import build_config

    spec = registry.BUILTINS[name]
    cls = spec.load()
    assert spec.grammar() == cls.grammar and "<" in cls.grammar  # the class says it, once
    cfg = build_config([], env_name=name).model_dump(mode="json")
    for section, values in spec.preset.items():  # the trainer starts from the row's preset
        for key, value in values.items():
            assert cfg[section][key] == value, (section, key)


def test_a_plugin_grammar_is_its_attribute_else_its_docstring(tmp_path):
    (tmp_path / "echo_env.py").write_text(PLUGIN)
    bare = PLUGIN.replace('grammar = "<echo>word</echo> repeats a word"', "")
    (tmp_path / "bare_env.py").write_text(bare)
    declared = {"echo": "echo_env.py:EchoEnv", "bare": "bare_env.py:EchoEnv"}
    assert (
        registry.resolve("echo", declared).grammar(tmp_path) == "<echo>word</echo> repeats a word"
    )
    assert (
        registry.resolve("bare", declared).grammar(tmp_path) == "Echo: repeat the word; one turn."
    )


def test_kwargs_are_checked_against_the_constructor_by_the_row():
    spec = registry.BUILTINS["math"]
    assert spec.check({"format_penalty": 0.2}) is spec.load()
    with pytest.raises(ValueError, match=r"env.kwargs.nope is no parameter of environments.math"):
        spec.check({"nope": 1})  # MathEnv's catch-all **kwargs would have swallowed it
    with pytest.raises(ValueError, match="set env.max_turns, not env.kwargs.max_turns"):
        spec.check({"max_turns": 3})
    env = spec.build(2, {"format_penalty": 0.2})
    assert env.format_penalty == 0.2
    env.close()


def _imports(folder: str) -> set[str]:
    """Every module imported by the .py files under `folder` (top level and in functions)."""
    import ast
    from pathlib import Path

    found: set[str] = set()
    for path in (Path(__file__).parents[2] / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
    return found


def test_arrows_point_one_way_tasks_import_no_environment_environments_no_trainer():
    assert not {m for m in _imports("tasks") if m.split(".")[0] == "environments"}
    assert not {m for m in _imports("environments") if m.split(".")[0] == "trainers"}
