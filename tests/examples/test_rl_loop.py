"""examples/rl_loop.py, the Tinker-shaped GRPO loop, runs as written: three steps on `tiny`
through the training and sampling clients (no CLI), each a real update."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "rl_loop.py"


def test_the_example_trains_three_steps_through_the_two_clients():
    assert len(EXAMPLE.read_text().splitlines()) <= 120  # an example one reads in a sitting
    spec = importlib.util.spec_from_file_location("rl_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    history = module.main()
    assert [h["step"] for h in history] == [1, 2, 3]
    for h in history:
        assert h["datums"] > 0 and h["grad_norm"] > 0 and math.isfinite(h["pg_loss"]), h
