"""Tinker's wire formats, read and written with checks: the protobuf of `forward_backward`
and `sample` (tinker 0.38 sends and reads these as protobuf) and the sampling inputs.

Everything here is client data: sizes, dtypes, shapes and token ids are checked, and
anything the server cannot do raises `UserError` naming it. Nothing is evaluated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from server.shared import APIError
from trainers.client import Datum, ModelInput

MAX_DATA = 512
MAX_TOKENS_PER_CALL = 262_144
LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "gspo")


class UserError(ValueError):
    """A request the server understood but will not do; reported to the client's future."""


def _tensor(msg: Any, name: str) -> np.ndarray:
    from tinker.proto import tinker_public_pb2 as pb

    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
    if msg.dtype not in dtypes:
        raise UserError(f"loss_fn_inputs[{name!r}] has an unsupported dtype")
    shape = [int(s) for s in msg.shape]
    if len(shape) > 1:
        raise UserError(
            f"loss_fn_inputs[{name!r}] is {len(shape)}-D; this server takes one value per position (top-k targets are not supported)"
        )
    dt = dtypes[msg.dtype]
    if msg.HasField("sparse_csr"):
        raise UserError(f"loss_fn_inputs[{name!r}] is sparse; only 1-D dense inputs are supported")
    if len(msg.dense) % np.dtype(dt).itemsize:
        raise UserError(f"loss_fn_inputs[{name!r}] has a ragged byte buffer")
    arr = np.frombuffer(msg.dense, dtype=dt)
    if shape and shape[0] != arr.size:
        raise UserError(
            f"loss_fn_inputs[{name!r}] declares {shape[0]} values and carries {arr.size}"
        )
    return arr


def data_of(msg: Any, loss_fn: str, context: int, vocab: int) -> list[Datum]:
    """The request's data as the learner's `Datum`s; UserError naming what is unsupported."""
    if len(msg.data) > MAX_DATA:
        raise UserError(f"one forward_backward takes at most {MAX_DATA} data, got {len(msg.data)}")
    total = 0
    out = []
    needs = {
        "importance_sampling": ("advantages", "logprobs"),
        "ppo": ("advantages", "logprobs"),
        "cispo": ("advantages", "logprobs"),
        "gspo": ("advantages", "logprobs"),
    }.get(loss_fn, ())
    for i, d in enumerate(msg.data):
        tokens: list[int] = []
        for chunk in d.model_input:
            if chunk.HasField("image") or chunk.HasField("dmel"):
                raise UserError("image and audio inputs are not supported by this server")
            if len(chunk.encoded_text.tokens) % 4:
                raise UserError(f"datum {i}: a token chunk has a ragged byte buffer")
            tokens += np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()
        n = len(tokens)
        total += n
        if not n or n >= context or total > MAX_TOKENS_PER_CALL:
            raise UserError(
                f"datum {i} has {n} tokens; each must have 1 to {context - 1} and a call at most {MAX_TOKENS_PER_CALL}"
            )
        if any(not 0 <= t < vocab for t in tokens):
            raise UserError(f"datum {i} has token ids outside [0, {vocab})")
        inputs = {k: _tensor(v, k) for k, v in d.loss_fn_inputs.items()}
        unknown = sorted(set(inputs) - {"target_tokens", "weights", "advantages", "logprobs"})
        if unknown:
            raise UserError(
                f"loss_fn_inputs {unknown} are not supported by this server (it takes target_tokens, weights, advantages, logprobs)"
            )
        for key in ("target_tokens", *needs):
            if key not in inputs:
                raise UserError(f"datum {i} lacks loss_fn_inputs[{key!r}], which {loss_fn} needs")
        for key, arr in inputs.items():
            if arr.size != n:
                raise UserError(
                    f"datum {i}: loss_fn_inputs[{key!r}] has {arr.size} values for {n} tokens"
                )
        targets = inputs["target_tokens"].astype(np.int64).tolist()
        if targets[:-1] != tokens[1:] or not 0 <= targets[-1] < vocab:
            raise UserError(
                f"datum {i}: target_tokens must be the input tokens shifted by one (other targets are not supported)"
            )
        weights = inputs.get("weights", np.ones(n, np.float32)).astype(np.float64)
        if not np.isin(weights, (0.0, 1.0)).all():
            raise UserError(
                f"datum {i}: weights must be 0 or 1 (fractional weights are not supported)"
            )
        loss_inputs = {"target_tokens": [float(t) for t in targets], "weights": weights.tolist()}
        for key in needs:
            vals = inputs[key].astype(np.float64)
            if not np.isfinite(vals).all():
                raise UserError(f"datum {i}: loss_fn_inputs[{key!r}] holds a non-finite value")
            loss_inputs[key] = vals.tolist()
        out.append(Datum(ModelInput(tokens), loss_inputs))
    return out


def loss_config(msg: Any, loss_fn: str, n_data: int) -> dict[str, Any]:
    if loss_fn not in LOSSES:
        raise UserError(
            f"loss {loss_fn!r} is not supported by this server (supported: {', '.join(LOSSES)})"
        )
    raw: dict[str, Any] = {k: v.number for k, v in msg.loss_fn_config_v2.items()} or dict(
        msg.loss_fn_config
    )
    allowed = (
        {"clip_low_threshold", "clip_high_threshold"}
        if loss_fn in ("ppo", "cispo", "gspo")
        else set()
    )
    if unknown := sorted(set(raw) - allowed):
        raise UserError(f"loss_fn_config {unknown} is not supported for {loss_fn}")
    # Tinker's losses are sums over tokens: the learner's seq-mean-token-sum-norm with 1/B
    c: dict[str, Any] = {
        "loss_agg": "seq-mean-token-sum-norm",
        "loss_agg_constant": 1.0 / max(1, n_data),
    }
    if "clip_low_threshold" in raw:
        c["clip_low"] = 1.0 - float(raw["clip_low_threshold"])
    if "clip_high_threshold" in raw:
        c["clip_high"] = float(raw["clip_high_threshold"]) - 1.0
    return c


def fb_proto(per_datum: list[list[float]], metrics: dict[str, float]) -> bytes:
    from tinker.proto import tinker_public_pb2 as pb

    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    rec = msg.loss_fn_outputs.add()
    rec.num_datums = len(per_datum)
    field = rec.fields["logprobs"]
    field.dtype = pb.DTYPE_FLOAT32
    field.data = (
        np.concatenate([np.asarray(x, np.float32) for x in per_datum]).tobytes()
        if per_datum
        else b""
    )
    field.offsets = np.cumsum([0] + [4 * len(x) for x in per_datum]).astype(np.int64).tobytes()
    for k, v in metrics.items():  # Tinker names every metric `name:reduction`
        msg.metrics[k if ":" in k else f"{k}:sum"] = float(v)
    return msg.SerializeToString()


def sample_prompt(req: Any, context: int, vocab: int) -> list[int]:
    from tinker import types

    tokens: list[int] = []
    for chunk in req.prompt.chunks:
        if not isinstance(chunk, types.EncodedTextChunk):
            raise APIError(400, f"{type(chunk).__name__} inputs are not supported by this server")
        tokens += chunk.tokens
    if not 1 <= len(tokens) < context:
        raise APIError(400, f"the prompt has {len(tokens)} tokens; it must have 1 to {context - 1}")
    if any(not 0 <= t < vocab for t in tokens):
        raise APIError(400, f"prompt token ids must lie in [0, {vocab})")
    return tokens


def stop_strings(stop: Any, tokenizer: Any, vocab: int) -> tuple[str, ...]:
    items = [stop] if isinstance(stop, (str, int)) else list(stop or [])
    if len(items) > 16:
        raise APIError(400, "at most 16 stop sequences")
    out = []
    for s in items:
        if isinstance(s, int):  # a stop token: its text, as the engine checks decoded text
            if not 0 <= s < vocab:
                raise APIError(400, f"stop token {s} is outside the vocabulary")
            s = tokenizer.decode([s], skip_special_tokens=False)
        if not isinstance(s, str) or not s or len(s) > 256:
            raise APIError(
                400, "stop sequences must be non-empty strings (<= 256 characters) or token ids"
            )
        out.append(s)
    return tuple(out)


def sample_proto(results: list[Any], prompt_lps: list[float] | None) -> bytes:
    from tinker.proto import tinker_public_pb2 as pb

    msg = pb.SampleResponse()
    for res in results:
        seq = msg.sequences.add()
        seq.stop_reason = (
            pb.STOP_REASON_LENGTH if res.finish_reason == "length" else pb.STOP_REASON_STOP
        )
        seq.tokens = np.asarray(res.token_ids, np.int32).tobytes()
        seq.logprobs = np.asarray(res.logprobs, np.float32).tobytes()
    if prompt_lps is not None:
        msg.prompt_logprobs = np.asarray([np.nan, *prompt_lps[1:]], np.float32).tobytes()
    return msg.SerializeToString()
