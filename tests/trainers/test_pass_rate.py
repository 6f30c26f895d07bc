"""The pass-rate filter's pure parts and its config checks (the run itself:
tests/e2e/test_pass_rate_filter.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.task import Task
from trainers import pass_rate
from trainers.config import ConfigError, build_config


def test_only_rates_strictly_between_0_and_1_stay():
    tasks = [Task(id=i, env="x", prompt="p", answer=None) for i in "abcd"]
    rates = {"a": 0.0, "b": 0.5, "c": 1.0, "d": 1 / 6}
    assert [t.id for t in pass_rate.keep(tasks, rates)] == ["b", "d"]
    line = pass_rate.summary(2, rates, 6)
    assert line.startswith("pass-rate filter: kept 2 of 4 train tasks")
    assert "1 always right, 1 never" in line
    assert "training on all 4" in pass_rate.summary(0, {"a": 0.0, "b": 0.0, "c": 1.0, "d": 1.0}, 6)


def test_the_cache_key_follows_the_weights_the_tasks_g_and_the_seed(tmp_path: Path):
    (tmp_path / "model.safetensors").write_bytes(b"w1")
    d1 = pass_rate.checkpoint_digest(tmp_path)
    key = pass_rate.cache_key(d1, ["a", "b"], 4, 0)
    assert key == pass_rate.cache_key(pass_rate.checkpoint_digest(tmp_path), ["a", "b"], 4, 0)
    (tmp_path / "model.safetensors").write_bytes(b"w2")
    assert pass_rate.checkpoint_digest(tmp_path) != d1
    others = {
        pass_rate.cache_key("other", ["a", "b"], 4, 0),
        pass_rate.cache_key(d1, ["a"], 4, 0),
        pass_rate.cache_key(d1, ["a", "b"], 8, 0),
        pass_rate.cache_key(d1, ["a", "b"], 4, 1),
    }
    assert key not in others and len(others) == 4


def _config(**warmup):
    return build_config([{"warmup": warmup}], "sql")


def test_the_config_key_is_off_by_default_and_checked_in_one_sentence():
    assert _config().warmup.pass_rate_samples == 0
    assert _config(pass_rate_samples=4).warmup.pass_rate_samples == 4  # the sql preset warms up
    with pytest.raises(ConfigError, match="pass_rate_samples=1 gives every task"):
        _config(pass_rate_samples=1)
    with pytest.raises(ConfigError, match="set warmup.sft_steps too"):
        _config(pass_rate_samples=4, sft_steps=0)
