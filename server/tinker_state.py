"""The state behind Tinker's routes: the SQLite store, the trained models held in memory,
and the calls in flight (by request id). `server/tinker_api.py` holds the routes.

Everything belongs to the client that created it (`server.shared.client_of`): a session
records its client, a model id is `<session>:train:<n>` and a sampler id
`<session>:sample:<n>` of one of that client's sessions, a checkpoint belongs to its model,
a pending call to the client that started it. Another client's id answers exactly as an
unknown one does, so ids are neither usable nor confirmed to exist.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from server.pool import SamplerPool
from server.shared import ServeConfig
from server.store import Store
from server.tinker_wire import UserError, fb_proto
from server.training import ModelSpec, TrainModel
from trainers.client import Datum

POLL_S = 20.0
"""How long one retrieve_future waits before answering "try again"."""
MAX_SAMPLES = 64
MAX_RANK = 256
MAX_MODELS = 16
"""Training models held in memory at once (each is a full copy of the base model)."""
KEEP_EPHEMERAL = 4
"""Sampler snapshots of `save_weights_and_get_sampling_client` kept per model."""
_MODEL_ID = re.compile(r"([0-9a-f]{32}):train:([0-9]{1,9})")
_SAMPLER_ID = re.compile(r"([0-9a-f]{32}):sample:([0-9]{1,9})")


def folder_name(text: str) -> str:
    """`text` as one folder name, injectively: letters, digits and '-' stay, every other
    character becomes '_' and its 6 hex digits ('A:train:0' -> 'A_00003atrain_00003a0', while
    'A_train_0' -> 'A_00005ftrain_00005f0'), so two ids never share a folder."""
    out = "".join(
        c if c.isascii() and (c.isalnum() or c == "-") else f"_{ord(c):06x}" for c in text
    )
    return out or "_"


class Futures:
    """Pending and finished calls by request id (finished ones are dropped oldest first)."""

    def __init__(self, keep: int = 10_000) -> None:
        self._items: OrderedDict[str, tuple[str, Future[Any]]] = OrderedDict()
        self._keep = keep

    def add(self, client: str, future: Future[Any]) -> str:
        rid = uuid.uuid4().hex
        self._items[rid] = (client, future)
        while len(self._items) > self._keep:
            oldest = next(iter(self._items))
            if not self._items[oldest][1].done():
                break
            del self._items[oldest]
        return rid

    def get(self, client: str, rid: str) -> Future[Any] | None:
        """The call `rid` if `client` started it."""
        owner, future = self._items.get(rid, ("", None))
        return future if owner == client else None


class TinkerServer:
    """The state behind the routes: store, trained models, futures."""

    def __init__(self, config: ServeConfig, pool: SamplerPool) -> None:
        self.config = config
        self.pool = pool
        self.store = Store(config.state_dir / "serve.db")
        self.models: dict[str, TrainModel] = {}
        self.futures = Futures()
        self.work = ThreadPoolExecutor(2, thread_name_prefix="tinker")
        self.base = str(config.model_path)
        self.vocab = len(pool.tokenizer)

    # -- names ----------------------------------------------------------------------

    def tokenizer_id(self) -> str:
        """What Tinker's client loads its tokenizer from (`get_tokenizer`): the model's hub id
        when it was served by one, else its folder, the one host path a response names (the
        client reads it; no other way to hand over a local model's tokenizer exists in 0.38)."""
        name = self.config.model_name
        if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not Path(name).exists():
            return name
        return self.base

    def check_base(self, name: str | None) -> None:
        if name is not None and name not in (
            self.config.model_name,
            self.base,
            *self.config.aliases,
        ):
            raise UserError(
                f"base model {name!r} is not served here; this server serves {self.config.model_name!r}"
            )

    def own_session(self, client: str, sid: str, what: str = "session") -> None:
        """UserError unless `client` created session `sid` (`what` names the id asked for)."""
        if not sid or self.store.session_owner(sid) != client:
            raise UserError(f"no {what} on this server")

    def own_model_id(self, client: str, model_id: str) -> str:
        """The session of `model_id`; UserError unless it is `<session>:train:<n>` of one of
        `client`'s sessions."""
        found = _MODEL_ID.fullmatch(model_id)
        what = f"model {model_id[:120]!r}"
        if found is None:
            raise UserError(f"no {what} on this server")
        self.own_session(client, found[1], what)
        return found[1]

    def own_sampler(self, client: str, sid: str) -> None:
        found = _SAMPLER_ID.fullmatch(sid)
        what = f"sampler {sid[:120]!r}"
        if found is None:
            raise UserError(f"no {what} on this server")
        self.own_session(client, found[1], what)

    def model(self, client: str, model_id: str) -> TrainModel:
        self.own_model_id(client, model_id)
        if model_id in self.models:
            return self.models[model_id]
        if self.store.model(model_id) is None:
            raise UserError(f"no model {model_id!r} on this server")
        saved = [p for p, kind, _ in self.store.checkpoints(model_id) if kind == "training"]
        hint = f" (its latest checkpoint: {saved[-1]})" if saved else ""
        raise UserError(
            f"model {model_id!r} was in memory when the server stopped and its unsaved weights are gone; load a checkpoint into it with load_state{hint}"
        )

    def checkpoint_dir(self, model_id: str, kind: str, name: str) -> tuple[str, Path]:
        safe = folder_name(model_id)
        segment = "weights" if kind == "training" else "sampler_weights"
        return (
            f"tinker://{model_id}/{segment}/{name}",
            self.config.state_dir / "checkpoints" / safe / segment / name,
        )

    def resolve(self, client: str, path: str, kind: str) -> tuple[str, Path]:
        found = self.store.checkpoint(path)
        if found is None:
            raise UserError(f"no checkpoint {path[:200]!r} on this server")
        model_id, got, directory = found
        try:
            self.own_model_id(client, model_id)
        except UserError:
            raise UserError(f"no checkpoint {path[:200]!r} on this server") from None
        if got != kind:
            want = "save_state" if kind == "training" else "save_weights_for_sampler"
            raise UserError(f"{path} is a {got} checkpoint; this call needs one written by {want}")
        if not directory.is_dir():
            raise UserError(f"checkpoint {path} is recorded but its folder is gone")
        return model_id, directory

    def prune_ephemeral(self, model_id: str) -> None:
        """Delete all but the KEEP_EPHEMERAL newest snapshot folders of
        `save_weights_and_get_sampling_client` (their samplers then answer 410)."""
        snaps = [
            p
            for p, kind, _ in self.store.checkpoints(model_id)
            if kind == "sampler" and "/sampler_weights/ephemeral-" in p
        ]
        for path in snaps[:-KEEP_EPHEMERAL]:
            found = self.store.checkpoint(path)
            if found is not None and found[2].is_dir():
                shutil.rmtree(found[2], ignore_errors=True)

    # -- running calls ----------------------------------------------------------------

    def start(
        self, client: str, future: Future[Any], model_id: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        return {"request_id": self.futures.add(client, future), "model_id": model_id, **extra}

    def failed(self, client: str, error: Exception, model_id: str | None = None) -> dict[str, Any]:
        """A call answered with a request id whose future holds `error`."""
        future: Future[Any] = Future()
        future.set_exception(error)
        return self.start(client, future, model_id)

    def on_model(
        self, client: str, model_id: str, fn: Callable[[TrainModel], Any]
    ) -> dict[str, Any]:
        try:
            m = self.model(client, model_id)
        except UserError as e:
            return self.failed(client, e, model_id)
        return self.start(client, m.submit(fn, m), model_id)

    def build_model(self, spec: ModelSpec, session_id: str) -> TrainModel:
        if spec.model_id not in self.models and len(self.models) >= MAX_MODELS:
            raise UserError(
                f"this server already holds {MAX_MODELS} training models in memory; save and restart it, or use an existing training client"
            )
        m = TrainModel(spec, self.config.model_path, self.config.threads)
        old = self.models.pop(spec.model_id, None)
        if old is not None:
            old.close()
        self.models[spec.model_id] = m
        self.store.add_model(spec.model_id, session_id, spec.__dict__)
        return m


def model_info(srv: TinkerServer, model_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "get_info",
        "model_id": model_id,
        "model_data": {
            "arch": "causal_lm",
            "model_name": srv.config.model_name,
            "tokenizer_id": srv.tokenizer_id(),
        },
        "model_name": srv.config.model_name,
        "is_lora": bool(spec["lora_rank"]),
        "lora_rank": spec["lora_rank"] or None,
    }


def forward_backward_proto(
    m: TrainModel, data: list[Datum], loss_fn: str, cfg: dict[str, Any], forward_only: bool
) -> bytes:
    live = [i for i, d in enumerate(data) if forward_only or d.n_loss]
    per_datum = [[0.0] * len(d.model_input.tokens) for d in data]
    metrics: dict[str, float] = {"loss:sum": 0.0}
    if live:
        out = m.forward_backward([data[i] for i in live], loss_fn, cfg, forward_only)
        metrics.update(out.metrics)
        for i, o in zip(live, out.loss_fn_outputs, strict=True):
            lps = o["logprobs"]
            if forward_only:
                per_datum[i] = list(lps)
                continue
            w = data[i].loss_fn_inputs["weights"]
            it = iter(lps)
            per_datum[i] = [next(it) if x else 0.0 for x in w]
    return fb_proto(per_datum, metrics)
