"""Tinker's REST API (`/api/v1/...`) as the `tinker` package (0.38) speaks it.

Every training or sampling call answers at once with a request id; the client then polls
`retrieve_future`, which waits up to `POLL_S` and answers 408 ("try again", which the client
retries quietly) until the result is ready. Results are JSON, except `forward_backward` and
`sample`, which 0.38 reads as protobuf (`server/tinker_wire.py` parses and writes it with
size checks; nothing a client sends is evaluated or unpickled). A call the server cannot do
(an unknown loss, image inputs, per-token clip thresholds, top-k, the dimuon optimizer...)
fails with a `RequestFailedError` naming it. Model ids follow the client's own rule
(`<session>:train:<n>`); `tinker://<model>/weights/<name>` and `.../sampler_weights/<name>`
resolve through the SQLite store, so they outlive a restart.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from agents.engine import GenRequest
from server.app import APIError, ServeConfig, read_json
from server.pool import SamplerPool
from server.store import Store
from server.tinker_wire import (
    UserError,
    data_of,
    fb_proto,
    loss_config,
    sample_prompt,
    sample_proto,
    stop_strings,
)
from server.training import ModelSpec, TrainModel, adam_params
from trainers.client import Datum

POLL_S = 20.0
"""How long one retrieve_future waits before answering "try again"."""
MAX_SAMPLES = 64
MAX_RANK = 256
MAX_MODELS = 16
"""Training models held in memory at once (each is a full copy of the base model)."""
KEEP_EPHEMERAL = 4
"""Sampler snapshots of `save_weights_and_get_sampling_client` kept per model."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Futures:
    """Pending and finished calls by request id (finished ones are dropped oldest first)."""

    def __init__(self, keep: int = 10_000) -> None:
        self._items: OrderedDict[str, Future[Any]] = OrderedDict()
        self._keep = keep

    def add(self, future: Future[Any]) -> str:
        rid = uuid.uuid4().hex
        self._items[rid] = future
        while len(self._items) > self._keep:
            oldest = next(iter(self._items))
            if not self._items[oldest].done():
                break
            del self._items[oldest]
        return rid

    def get(self, rid: str) -> Future[Any] | None:
        return self._items.get(rid)


def _parse(model: Any, body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        raise APIError(400, f"invalid '{where}': {err['msg']}") from None


def _name(raw: str | None, default: str) -> str:
    name = raw if raw is not None else default
    if not _NAME.fullmatch(name):
        raise APIError(400, f"checkpoint name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-'")  # fmt: skip
    return name


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

    def check_base(self, name: str | None) -> None:
        if name is not None and name not in (self.config.model_name, self.base, *self.config.aliases):  # fmt: skip
            raise UserError(f"base model {name!r} is not served here; this server serves {self.config.model_name!r}")  # fmt: skip

    def model(self, model_id: str) -> TrainModel:
        if model_id in self.models:
            return self.models[model_id]
        if self.store.model(model_id) is None:
            raise UserError(f"no model {model_id!r} on this server")
        saved = [p for p, kind, _ in self.store.checkpoints(model_id) if kind == "training"]
        hint = f" (its latest checkpoint: {saved[-1]})" if saved else ""
        raise UserError(f"model {model_id!r} was in memory when the server stopped and its unsaved weights are gone; load a checkpoint into it with load_state{hint}")  # fmt: skip

    def checkpoint_dir(self, model_id: str, kind: str, name: str) -> tuple[str, Path]:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", model_id)
        segment = "weights" if kind == "training" else "sampler_weights"
        return f"tinker://{model_id}/{segment}/{name}", self.config.state_dir / "checkpoints" / safe / segment / name  # fmt: skip

    def resolve(self, path: str, kind: str) -> tuple[str, Path]:
        found = self.store.checkpoint(path)
        if found is None:
            raise UserError(f"no checkpoint {path[:200]!r} on this server")
        model_id, got, directory = found
        if got != kind:
            want = "save_state" if kind == "training" else "save_weights_for_sampler"
            raise UserError(f"{path} is a {got} checkpoint; this call needs one written by {want}")  # fmt: skip
        if not directory.is_dir():
            raise UserError(f"checkpoint {path} is recorded but its folder is gone")
        return model_id, directory

    def prune_ephemeral(self, model_id: str) -> None:
        """Delete all but the KEEP_EPHEMERAL newest snapshot folders of
        `save_weights_and_get_sampling_client` (their samplers then answer 410)."""
        snaps = [p for p, kind, _ in self.store.checkpoints(model_id) if kind == "sampler" and "/sampler_weights/ephemeral-" in p]  # fmt: skip
        for path in snaps[:-KEEP_EPHEMERAL]:
            found = self.store.checkpoint(path)
            if found is not None and found[2].is_dir():
                shutil.rmtree(found[2], ignore_errors=True)

    # -- running calls ----------------------------------------------------------------

    def start(self, future: Future[Any], model_id: str | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
        return {"request_id": self.futures.add(future), "model_id": model_id, **extra}

    def on_model(self, model_id: str, fn: Callable[[TrainModel], Any]) -> dict[str, Any]:
        try:
            m = self.model(model_id)
        except UserError as e:
            failed: Future[Any] = Future()
            failed.set_exception(e)
            return self.start(failed, model_id)
        return self.start(m.submit(fn, m), model_id)

    def build_model(self, spec: ModelSpec, session_id: str) -> TrainModel:
        if spec.model_id not in self.models and len(self.models) >= MAX_MODELS:
            raise UserError(f"this server already holds {MAX_MODELS} training models in memory; save and restart it, or use an existing training client")  # fmt: skip
        m = TrainModel(spec, self.config.model_path, self.config.threads)
        old = self.models.pop(spec.model_id, None)
        if old is not None:
            old.close()
        self.models[spec.model_id] = m
        self.store.add_model(spec.model_id, session_id, spec.__dict__)
        return m


def _info(srv: TinkerServer, model_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "get_info",
        "model_id": model_id,
        "model_data": {"arch": "causal_lm", "model_name": srv.base, "tokenizer_id": srv.base},
        "model_name": srv.base,
        "is_lora": bool(spec["lora_rank"]),
        "lora_rank": spec["lora_rank"] or None,
    }


def _forward_backward(m: TrainModel, data: list[Datum], loss_fn: str, cfg: dict[str, Any], forward_only: bool) -> bytes:  # fmt: skip
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


# -- routes -----------------------------------------------------------------------------


def build_router(config: ServeConfig, pool: SamplerPool) -> tuple[APIRouter, TinkerServer]:
    from tinker import types

    srv = TinkerServer(config, pool)
    r = APIRouter(prefix="/api/v1")

    @r.api_route("/healthz", methods=["GET"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @r.api_route("/client/config", methods=["GET", "POST"])
    async def client_config() -> dict[str, Any]:
        return {"pjwt_auth_enabled": False, "use_pyqwest_transport": False, "proto_compress_fwdbwd": False,
                "sample_use_retrieve_futures": False, "custom_loss_server_side": False,
                "sample_join_sampling_session": False, "parallel_fwdbwd_chunks": False}  # fmt: skip

    @r.api_route("/client/dynamic_config", methods=["GET", "POST"])
    async def dynamic_config() -> dict[str, Any]:
        return {"refresh_interval_sec": 3600, "sample_cancel_enabled": False}

    @r.post("/telemetry")
    async def telemetry() -> dict[str, str]:
        return {"status": "accepted"}  # the client reports its own events; nothing is kept

    @r.get("/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        card = {"model_name": config.model_name, "max_context_length": pool.context, "trainable": True, "sampleable": True}  # fmt: skip
        return {"supported_models": [card]}

    @r.post("/create_session")
    async def create_session(request: Request) -> dict[str, Any]:
        req = _parse(types.CreateSessionRequest, await read_json(request))
        sid = uuid.uuid4().hex
        srv.store.add_session(sid, req.sdk_version, req.user_metadata or {})
        return {"type": "create_session", "session_id": sid}

    @r.post("/session_heartbeat")
    async def heartbeat(request: Request) -> dict[str, Any]:
        req = _parse(types.SessionHeartbeatRequest, await read_json(request))
        if not srv.store.heartbeat(req.session_id):
            raise APIError(410, f"session {req.session_id[:80]!r} is not known to this server")
        return {"type": "session_heartbeat"}

    @r.post("/create_model")
    async def create_model(request: Request) -> dict[str, Any]:
        req = _parse(types.CreateModelRequest, await read_json(request))
        if not srv.store.has_session(req.session_id):
            raise APIError(404, f"no session {req.session_id[:80]!r}; create one first")
        model_id = f"{req.session_id}:train:{req.model_seq_id}"

        def create() -> dict[str, Any]:
            srv.check_base(req.base_model)
            if req.optimizer_config.type != "adamw":
                raise UserError(f"optimizer {req.optimizer_config.type!r} is not supported by this server (adamw is)")  # fmt: skip
            lora = req.lora_config
            if lora is not None and lora.rank == 0:  # rank 0 (or no lora_config): full fine-tuning
                lora = None
            if lora is not None and not 1 <= lora.rank <= MAX_RANK:
                raise UserError(f"LoRA rank must be 1 to {MAX_RANK} (0 = full fine-tuning), got {lora.rank}")  # fmt: skip
            spec = ModelSpec(model_id, config.model_name, lora.rank if lora else 0,
                             lora.train_mlp if lora else True, lora.train_attn if lora else True,
                             lora.train_unembed if lora else True, (lora.seed or 0) if lora else 0)  # fmt: skip
            srv.build_model(spec, req.session_id)
            return {"model_id": model_id, "type": "create_model"}

        return srv.start(srv.work.submit(create), model_id)

    @r.post("/get_info")
    async def get_info(request: Request) -> dict[str, Any]:
        req = _parse(types.GetInfoRequest, await read_json(request))
        spec = srv.store.model(req.model_id)
        if spec is None:
            raise APIError(404, f"no model {req.model_id[:120]!r} on this server")
        return _info(srv, req.model_id, spec)

    @r.post("/unload_model")
    async def unload(request: Request) -> dict[str, Any]:
        req = _parse(types.UnloadModelRequest, await read_json(request))
        m = srv.models.pop(req.model_id, None)
        if m is not None:
            m.close()
        done: Future[Any] = Future()
        done.set_result({"model_id": req.model_id, "type": "unload_model"})
        return srv.start(done, req.model_id)

    @r.post("/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        from google.protobuf.message import DecodeError
        from tinker.proto import tinker_public_pb2 as pb

        if request.headers.get("content-encoding"):
            raise APIError(400, "compressed forward_backward bodies are not supported by this server")  # fmt: skip
        msg = pb.ForwardBackwardRequest()
        body = await request.body()
        try:  # parsing and checking up to 64 MiB is CPU work: off the event loop
            await asyncio.to_thread(msg.ParseFromString, body)
        except DecodeError:
            raise APIError(400, "the forward_backward body is not a ForwardBackwardRequest protobuf") from None  # fmt: skip
        loss_fn, forward_only = msg.loss_fn, msg.forward_only
        try:
            cfg = loss_config(msg, loss_fn, len(msg.data))
            data = await asyncio.to_thread(data_of, msg, loss_fn, pool.context, srv.vocab)
        except UserError as e:
            failed: Future[Any] = Future()
            failed.set_exception(e)
            return srv.start(failed, msg.model_id)
        return srv.on_model(msg.model_id, lambda m: ("proto", _forward_backward(m, data, loss_fn, cfg, forward_only)))  # fmt: skip

    @r.post("/optim_step")
    async def optim_step(request: Request) -> dict[str, Any]:
        body = await read_json(request)
        params = body.get("adam_params")
        if not isinstance(params, dict):
            name = (body.get("optimizer_params") or {}).get("type", "?") if isinstance(body.get("optimizer_params"), dict) else "?"  # fmt: skip
            raise APIError(400, f"optimizer params of type {name!r} are not supported by this server (adam_params are)")  # fmt: skip
        adam = _parse(types.AdamParams, params)
        model_id = str(body.get("model_id", ""))
        return srv.on_model(model_id, lambda m: {"metrics": m.optim_step(adam_params(adam.model_dump()))})  # fmt: skip

    @r.post("/save_weights")
    async def save_weights(request: Request) -> dict[str, Any]:
        req = _parse(types.SaveWeightsRequest, await read_json(request))
        n = len(srv.store.checkpoints(req.model_id)) + 1
        path, directory = srv.checkpoint_dir(req.model_id, "training", _name(req.path, f"ckpt-{n:06d}"))  # fmt: skip

        def save(m: TrainModel) -> dict[str, Any]:
            if srv.store.checkpoint(path) is not None and not req.overwrite:
                raise UserError(f"checkpoint {path} exists; pass overwrite=True or another name")
            m.save_state(directory)
            srv.store.add_checkpoint(path, req.model_id, "training", directory)
            return {"path": path, "type": "save_weights"}

        return srv.on_model(req.model_id, save)

    @r.post("/save_weights_for_sampler")
    async def save_for_sampler(request: Request) -> dict[str, Any]:
        req = _parse(types.SaveWeightsForSamplerRequest, await read_json(request))
        ephemeral = req.path is None
        if req.path is not None and req.path.startswith("ephemeral-"):
            raise APIError(400, "sampler checkpoint names starting with 'ephemeral-' are reserved")
        name = _name(req.path, f"ephemeral-{uuid.uuid4().hex[:12]}")
        path, directory = srv.checkpoint_dir(req.model_id, "sampler", name)
        session = req.model_id.split(":train:")[0]

        def save(m: TrainModel) -> dict[str, Any]:
            m.save_for_sampler(directory)
            srv.store.add_checkpoint(path, req.model_id, "sampler", directory)
            out: dict[str, Any] = {"path": path, "type": "save_weights_for_sampler"}
            if ephemeral:
                sid = f"{session}:sample:{req.sampling_session_seq_id}"
                srv.store.add_sampler(sid, srv.base, path, directory)
                out["sampling_session_id"] = sid
                srv.prune_ephemeral(req.model_id)
            return out

        return srv.on_model(req.model_id, save)

    @r.post("/load_weights")
    async def load_weights(request: Request) -> dict[str, Any]:
        req = _parse(types.LoadWeightsRequest, await read_json(request))
        if req.model_id is None and (req.session_id is None or req.model_seq_id is None):
            raise APIError(400, "load_weights needs model_id, or session_id with model_seq_id")
        model_id = req.model_id or f"{req.session_id}:train:{req.model_seq_id}"
        session_id = req.session_id or model_id.split(":train:")[0]

        def load() -> dict[str, Any]:
            srv.check_base(req.base_model)
            if req.optimizer_config is not None and req.optimizer_config.type != "adamw":
                raise UserError(f"optimizer {req.optimizer_config.type!r} is not supported by this server (adamw is)")  # fmt: skip
            source, directory = srv.resolve(req.path, "training")
            spec_raw = srv.store.model(source)
            if spec_raw is None:
                raise UserError(f"checkpoint {req.path} belongs to no known model")
            m = srv.models.get(model_id)
            if m is None:  # a new model from the checkpoint, or one the restart emptied
                known = srv.store.model(model_id)
                spec = ModelSpec(**{**(known or spec_raw), "model_id": model_id})
                m = srv.build_model(spec, session_id)
            elif m.spec.lora_rank != spec_raw["lora_rank"]:
                raise UserError(f"checkpoint {req.path} has LoRA rank {spec_raw['lora_rank']}, this model {m.spec.lora_rank}")  # fmt: skip
            m.submit(m.load_state, directory, req.optimizer).result()
            return {"path": req.path, "model_id": model_id, "type": "load_weights"}

        return srv.start(srv.work.submit(load), model_id)

    @r.post("/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict[str, Any]:
        req = _parse(types.CreateSamplingSessionRequest, await read_json(request))
        sid = f"{req.session_id}:sample:{req.sampling_session_seq_id}"
        try:
            if req.model_path:
                _, directory = srv.resolve(req.model_path, "sampler")
                srv.store.add_sampler(sid, srv.base, req.model_path, directory)
            else:
                srv.check_base(req.base_model)
                srv.store.add_sampler(sid, srv.base, None, None)
        except UserError as e:
            raise APIError(400, str(e)) from None
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @r.get("/samplers/{sid:path}")
    async def sampler(sid: str) -> dict[str, Any]:
        found = srv.store.sampler(sid)
        if found is None:
            raise APIError(404, f"no sampler {sid[:120]!r} on this server")
        return {"sampler_id": sid, "base_model": found[0], "model_path": found[1]}

    @r.post("/asample")
    async def asample(request: Request) -> dict[str, Any]:
        req = _parse(types.SampleRequest, await read_json(request))
        weights = ""
        if req.sampling_session_id:
            found = srv.store.sampler(req.sampling_session_id)
            if found is None:
                raise APIError(404, f"no sampler {req.sampling_session_id[:120]!r} on this server")
            weights = str(found[2]) if found[2] else ""
            if found[2] is not None and not found[2].is_dir():
                raise APIError(410, f"the weights of sampler {req.sampling_session_id} were dropped; save weights for a sampler again")  # fmt: skip
        elif req.model_path:
            try:
                weights = str(srv.resolve(req.model_path, "sampler")[1])
            except UserError as e:
                raise APIError(400, str(e)) from None
        prompt = sample_prompt(req, pool.context, srv.vocab)
        p = req.sampling_params
        if p.top_k not in (-1, 0):
            raise APIError(400, "top_k sampling is not supported by this server")
        if req.topk_prompt_logprobs or req.topk_sample_logprobs or req.prompt_alt_tokens_k or req.target_prompt_logprobs is not None:  # fmt: skip
            raise APIError(400, "top-k and target prompt logprobs are not supported by this server")
        if not 1 <= req.num_samples <= MAX_SAMPLES:
            raise APIError(400, f"num_samples must be 1 to {MAX_SAMPLES}")
        room = pool.context - len(prompt)
        max_tokens = p.max_tokens if p.max_tokens is not None else min(256, room)
        if not 1 <= max_tokens <= room:
            raise APIError(400, f"max_tokens must be 1 to {room} for this prompt (context {pool.context})")  # fmt: skip
        stops = stop_strings(p.stop, pool.tokenizer, srv.vocab)
        seed = p.seed if p.seed is not None else int(uuid.uuid4().int % 2**31)
        reqs = [GenRequest(prompt, max_tokens, (seed + i) % 2**63, stops) for i in range(req.num_samples)]  # fmt: skip
        sampled = pool.submit(reqs, float(p.temperature), float(p.top_p), weights)
        scored = pool.compute_logprobs([prompt], weights) if req.prompt_logprobs else None
        result: Future[Any] = Future()

        def finish(_: Any) -> None:
            if not sampled.done() or (scored is not None and not scored.done()):
                return
            if result.done():
                return
            try:
                result.set_result(("proto", sample_proto(sampled.result(), scored.result()[0] if scored else None)))  # fmt: skip
            except Exception as e:  # noqa: BLE001 - reported to the client's future
                result.set_exception(e)

        sampled.add_done_callback(finish)
        if scored is not None:
            scored.add_done_callback(finish)
        out = srv.start(result)
        out["sample_sequence_ids"] = [f"{out['request_id']}:{i}" for i in range(req.num_samples)]
        return out

    @r.post("/retrieve_future", response_model=None)
    async def retrieve_future(request: Request) -> Response:
        req = _parse(types.FutureRetrieveRequest, await read_json(request))
        future = srv.futures.get(req.request_id)
        if future is None:
            raise APIError(404, f"no request {req.request_id[:80]!r} on this server (it may predate a restart)")  # fmt: skip
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), POLL_S)
        except TimeoutError:
            return JSONResponse({"type": "try_again", "request_id": req.request_id, "queue_state": "active"}, 408)  # fmt: skip
        except Exception:  # noqa: BLE001 - read below
            pass
        error = future.exception()
        if error is not None:
            user = isinstance(error, (UserError, ValueError, APIError))
            message = error.message if isinstance(error, APIError) else str(error) or type(error).__name__  # fmt: skip
            return JSONResponse({"error": message, "category": "user" if user else "server"})
        value = future.result()
        if isinstance(value, tuple) and value[0] == "proto":
            return Response(value[1], media_type="application/x-protobuf")
        return JSONResponse(value)

    return r, srv
