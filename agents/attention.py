"""Grouped-query attention without a copy of the key/value cache in every decode step.

transformers' `sdpa` attention repeats each key/value head for the query heads that share
it (`repeat_kv`, a full copy of the layer's cache) whenever a mask is passed, and the hf
engine's left-padded batches always pass one. torch's `scaled_dot_product_attention(
enable_gqa=True)` reads the shared heads in place. Its output is bit for bit the repeated
one's on CPU (tests/agents/test_attention.py); its gradient sums the shared heads in another
order, so wherever a gradient is taken the repeat stays and training's numbers do not move.

SmolLM2-135M shares each of its 3 key/value heads among 3 query heads in 30 layers: with a
420-token SQL prompt and 16 rows the repeats were about a third of a decode step
(docs/benchmarks.md). A cache that grows in place instead of `torch.cat` was tried as well
and bought nothing on top (attention then reads a strided view).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

NAME = "skyrl_sdpa"
"""The attention implementation `use_shared_heads` switches a model to."""


def _shared_heads_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except that a masked grouped-query call without a
    gradient reads the shared key/value heads in place instead of repeating them. (With a
    mask, transformers' own path passes `is_causal=False` too.)"""
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    needs_grad = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad
    )
    plain = kwargs.get("cache") is None and kwargs.get("position_bias") is None
    if grouped and attention_mask is not None and not needs_grad and plain:
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
            enable_gqa=True,
        )  # fmt: skip # keyword pairs, as torch documents them
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
    )


AttentionInterface.register(NAME, _shared_heads_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_shared_heads(model: Any) -> None:
    """Switch a model that runs transformers' `sdpa` attention to `_shared_heads_sdpa`
    (others, eager or flash, are left as they are)."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(NAME)
