"""Every algorithm as one table entry: advantage estimator, loss, preset defaults.

A new algorithm is one entry here plus its pure functions: an estimator in
`trainers/estimators.py` and, if none of Tinker's fits, a loss in `trainers/losses.py`.
The preset is applied under the user's own settings (`build_config`), so
`--set algorithm.name=dapo` alone gives DAPO's clip-higher. This module imports nothing
heavy: the CLI reads the presets at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Algorithm:
    estimator: str
    """Advantage estimator: a key of `trainers.estimators.ESTIMATORS`."""
    loss: str
    """Policy loss, by Tinker's name (`ppo`, `gspo`, `importance_sampling`, `cispo`)."""
    preset: Mapping[str, Any] = field(default_factory=dict)
    """`algorithm.*` defaults this algorithm implies."""
    critic: bool = False
    """A second training client learns values (the `value` loss) for the estimator."""
    token_level: bool = False
    """The estimator builds per-token advantages from the step's KL and values, so the KL
    may go into the reward (`kl_in_reward`)."""


ALGORITHMS: dict[str, Algorithm] = {
    "grpo": Algorithm("grpo", "ppo"),
    # no std division, no length normalisation (Liu et al. 2025)
    "dr_grpo": Algorithm(
        "dr_grpo", "ppo", {"normalize_std": False, "loss_agg": "seq-mean-token-sum-norm"}
    ),
    # clip-higher and dynamic sampling (Yu et al. 2025); overlong shaping is sized per recipe
    "dapo": Algorithm(
        "grpo", "ppo", {"clip_high": 0.28, "dynamic_sampling": True, "loss_agg": "token-mean"}
    ),
    "rloo": Algorithm("rloo", "ppo"),
    # KL to the reference in the token rewards, k1 as in the paper (Hu 2025)
    "reinforce_pp": Algorithm(
        "reinforce_pp",
        "ppo",
        {"kl_coef": 0.01, "kl_in_reward": True, "kl_estimator": "k1"},
        token_level=True,
    ),
    "ppo": Algorithm("gae", "ppo", critic=True, token_level=True),
    # the ratio is a per-token geometric mean, so the paper's clip range is tiny (Zheng et al. 2025)
    "gspo": Algorithm(
        "grpo", "gspo", {"clip_low": 3e-4, "clip_high": 4e-4, "loss_agg": "seq-mean-token-mean"}
    ),
}
