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
