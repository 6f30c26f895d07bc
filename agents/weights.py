"""Loading weights strictly: the one path for the learner, its reference and the engines.

`load_state_dict(strict=False)` let a checkpoint that lacks tensors (a Mixtral's router or
experts, say) load silently, leaving those weights as they were. Here every load fills each
tensor of the model with its shape; a tensor may be absent only when it shares storage with
one that is present (tied embeddings, which `save_pretrained` writes once). A folder is read
through transformers (`from_pretrained`, which also maps saved names to in-memory ones, e.g.
a Mixtral's per-expert tensors to its fused experts); a state dict in memory (the learner's
weights for the engines) is checked by name (`load_weights`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_LOADING = threading.Lock()
"""One `from_pretrained` at a time per process. transformers (5.x) loads inside context
managers that patch class attributes for the whole process (`no_tie_weights` swaps
`PreTrainedModel.tie_weights` for a no-op and restores what it found): two loads on two
threads interleave, the later exit restores the no-op, and from then on every load of a
model with tied embeddings lacks its `lm_head.weight` (skyrl serve's concurrent
`create_model`)."""


class WeightsError(ValueError):
    """Weights that do not fit the model, worded as one sentence."""


def check_weights(expected: dict[str, Any], loaded: dict[str, Any]) -> None:
    """Raise WeightsError unless `loaded` fills every tensor of `expected` (a model's
    state_dict) with its shape; a key may be absent only when it shares storage with one
    that is present (tied embeddings, which save_pretrained writes once)."""
    unexpected = sorted(set(loaded) - set(expected))
    if unexpected:
        raise WeightsError(f"the saved weights hold unknown tensors ({unexpected[0]}, ...)")
    present_ptrs = {expected[k].data_ptr() for k in loaded}
    missing = [
        k for k in expected if k not in loaded and expected[k].data_ptr() not in present_ptrs
    ]
    if missing:
        raise WeightsError(
            f"the saved weights lack {len(missing)} of the model's tensors ({missing[0]}, ...)"
        )
    for k, v in loaded.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise WeightsError(
                f"saved tensor {k} has shape {tuple(v.shape)}, the model {tuple(expected[k].shape)}"
            )


def load_weights(model: Any, state: dict[str, Any]) -> None:
    """Load `state` into `model` strictly but for tied weights; nothing changes on error."""
    check_weights(model.state_dict(), state)
    model.load_state_dict(state, strict=False)  # only tied keys can be missing here


def from_pretrained(path: str | Path, dtype: Any) -> Any:
    """`AutoModelForCausalLM.from_pretrained`, strictly: WeightsError when the folder lacks
    one of the model's tensors (transformers would initialise it at random and only warn),
    holds one of another shape, or holds tensors the model does not have. Tied weights
    saved once count as present. Loading through transformers also reads checkpoints whose
    saved names differ from the model's (a Mixtral's per-expert tensors, fused in memory)."""
    from transformers import AutoModelForCausalLM

    with _LOADING:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, output_loading_info=True, ignore_mismatched_sizes=True
        )
    model, info = loaded
    if missing := sorted(info["missing_keys"]):
        raise WeightsError(
            f"the saved weights lack {len(missing)} of the model's tensors ({missing[0]}, ...) "
            f"in {path}"
        )
    if mismatched := sorted(info["mismatched_keys"]):
        key, saved, wanted = mismatched[0]
        raise WeightsError(
            f"saved tensor {key} has shape {tuple(saved)}, the model {tuple(wanted)} (in {path})"
        )
    if unexpected := sorted(info["unexpected_keys"]):
        raise WeightsError(
            f"the saved weights hold unknown tensors ({unexpected[0]}, ...) in {path}"
        )
    if info["error_msgs"]:
        raise WeightsError(f"the saved weights in {path} do not load: {info['error_msgs'][0]}")
    return model


def load_folder(model: Any, folder: str | Path) -> None:
    """Load an HF folder's weights (a checkpoint) into `model` in place, strictly (see
    `from_pretrained`); nothing changes on error."""
    load_weights(model, from_pretrained(folder, model.dtype).state_dict())
