"""PPO's critic: a copy of the policy's transformer with a scalar value head.

It has its own optimizer (`algorithm.critic_lr`, `algorithm.critic_grad_clip`) and is only
built when `algorithm.name` is `ppo`. Values are read at the positions that predict a
model token, the same positions the policy's log-probs come from: V_t is the value of the
state in which token t is sampled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agents.weights import from_pretrained
from trainers.config import RunConfig


class Critic:
    """Value model + optimizer; `model` is a causal LM whose body the learner runs."""

    def __init__(self, model_path: str | Path, cfg: RunConfig, dtype: torch.dtype) -> None:
        model: Any = from_pretrained(model_path, dtype)
        self.model = model.eval()  # no dropout: values are read and trained on one network
        hidden = model.config.hidden_size
        # zero-initialised: the first values are 0, the first advantages are the returns
        self.head = torch.nn.Linear(hidden, 1, dtype=dtype)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        body = getattr(model, model.base_model_prefix)
        self.params = [*body.parameters(), *self.head.parameters()]
        a, o = cfg.algorithm, cfg.optim
        self.opt = torch.optim.AdamW(
            self.params, lr=a.critic_lr, betas=o.betas, weight_decay=o.weight_decay
        )
        self.grad_clip = a.critic_grad_clip

    def to(self, device: torch.device) -> Critic:
        self.model.to(device)
        self.head.to(device)
        return self

    def values(self, hidden_N_H: torch.Tensor) -> torch.Tensor:
        """V at each given hidden state: value_N."""
        return self.head(hidden_N_H.to(self.head.weight.dtype)).float()[:, 0]

    def step(self, lr: float) -> float:
        """Clip, set the (scheduled) learning rate, step; returns the pre-clip grad norm."""
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        for group in self.opt.param_groups:
            group["lr"] = lr
        if norm == norm and norm != float("inf"):  # skip a non-finite step
            self.opt.step()
        return norm

    def save(self, directory: Path) -> None:
        torch.save(
            {
                "model": self.model.state_dict(),
                "head": self.head.state_dict(),
                "optimizer": self.opt.state_dict(),
            },
            directory / "critic.pt",
        )

    def load(self, directory: Path, device: torch.device) -> None:
        state = torch.load(directory / "critic.pt", map_location=device, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.head.load_state_dict(state["head"])
        self.opt.load_state_dict(state["optimizer"])
