"""The `--env sql` preset (issue 20): DAPO over the SQL settings, measured over 5 seeds
against GRPO from the same warm-up checkpoints (docs/learning.md). The recipes spell the
presets out, and a user who names another algorithm or the async schedule gets that, not
DAPO's settings riding along."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.config import ConfigError, build_config, read_yaml

RECIPES = Path(__file__).parents[2] / "trainers" / "recipes"


def _recipe(name: str) -> dict:
    return build_config([read_yaml(RECIPES / f"{name}.yaml")]).model_dump()


def test_the_sql_preset_is_dapo_and_sql_dapo_spells_it_out():
    cfg = build_config([], env_name="sql")
    a = cfg.algorithm
    assert a.name == "dapo" and a.dynamic_sampling and a.clip_high == pytest.approx(0.28)
    assert (a.overlong_buffer, a.overlong_penalty) == (16, pytest.approx(0.5))
    assert cfg.model_dump() == _recipe("sql_dapo")
    assert build_config([]).model_dump() == _recipe("sql_dapo")  # sql is the default env


@pytest.mark.parametrize("name", ["grpo", "ppo", "rloo", "gspo"])
def test_naming_another_algorithm_on_sql_drops_dapos_settings(name):
    """What the pinned sql_ppo metrics rest on: PPO on SQL is PPO, not PPO with DAPO's
    clip-higher, dynamic sampling and overlong penalty."""
    cfg = build_config([{"algorithm": {"name": name}}], env_name="sql")
    plain = build_config([{"algorithm": {"name": name}}], env_name="math")
    assert cfg.algorithm == plain.algorithm
    assert not cfg.algorithm.dynamic_sampling and cfg.algorithm.overlong_buffer == 0
    assert cfg.rollout == build_config([], env_name="sql").rollout  # the SQL settings stay


def test_sql_grpo_is_the_sql_settings_with_grpo():
    grpo = build_config([{"algorithm": {"name": "grpo"}}], env_name="sql").model_dump()
    assert grpo == _recipe("sql_grpo")


def test_settings_without_a_name_keep_the_presets_algorithm():
    cfg = build_config([{"algorithm": {"kl_coef": 0.01, "overlong_buffer": 8}}], "sql")
    a = cfg.algorithm
    assert a.name == "dapo" and a.dynamic_sampling and a.kl_coef == pytest.approx(0.01)
    assert a.overlong_buffer == 8 and a.overlong_penalty == pytest.approx(0.5)
    same = build_config([{"algorithm": {"name": "dapo"}}], "sql")
    assert same.algorithm == build_config([], "sql").algorithm


def test_async_on_sql_trains_without_the_presets_dynamic_sampling():
    """Async cannot refill a step with more rounds; the preset's dynamic sampling yields to
    the schedule the user chose. Asking for both is still refused in one sentence."""
    cfg = build_config([{"trainer": {"schedule": "async"}}], env_name="sql")
    assert cfg.algorithm.name == "dapo" and not cfg.algorithm.dynamic_sampling
    assert cfg.algorithm.clip_high == pytest.approx(0.28)
    dapo = build_config([{"algorithm": {"name": "dapo"}, "trainer": {"schedule": "async"}}], "math")
    assert not dapo.algorithm.dynamic_sampling
    both = {"algorithm": {"dynamic_sampling": True}, "trainer": {"schedule": "async"}}
    with pytest.raises(ConfigError, match="does not do dynamic sampling"):
        build_config([both], env_name="sql")
