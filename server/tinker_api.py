"""Tinker's REST API (`/api/v1/...`) as the `tinker` package (0.38) speaks it.

Every training or sampling call answers at once with a request id; the client then polls
`retrieve_future`, which waits up to `POLL_S` and answers 408 ("try again", which the client
retries quietly) until the result is ready. Results are JSON, except `forward_backward` and
`sample`, which 0.38 reads as protobuf (`server/tinker_wire.py` parses and writes it with
size checks; nothing a client sends is evaluated or unpickled). A call the server cannot do
(an unknown loss, image inputs, per-token clip thresholds, top-k, the dimuon optimizer...)
fails with a `RequestFailedError` naming it. Each route is a named handler below; the state
they share is a `TinkerServer` (`server/tinker_state.py`). Model ids follow the client's own rule
(`<session>:train:<n>`); `tinker://<model>/weights/<name>` and `.../sampler_weights/<name>`
resolve through the SQLite store, so they outlive a restart.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from concurrent.futures import Future
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from tinker import types

from agents.engine import GenRequest
from server.shared import APIError, check_temperature, client_of, read_json
from server.tinker_state import (
    MAX_RANK,
    MAX_SAMPLES,
    POLL_S,
    TinkerServer,
    forward_backward_proto,
    model_info,
)
from server.tinker_wire import (
    UserError,
    data_of,
    loss_config,
    sample_prompt,
    sample_proto,
    stop_strings,
)
from server.training import ModelSpec, TrainModel, adam_params

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

router = APIRouter(prefix="/api/v1")


def tinker_state(request: Request) -> TinkerServer:
    """The app's Tinker state (built once by `server.app.build_app`)."""
    return request.app.state.tinker


Srv = Annotated[TinkerServer, Depends(tinker_state)]
"""Each handler's state, passed in by FastAPI."""
Client = Annotated[str, Depends(client_of)]
"""The client a request comes from; every id it names must be its own."""


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
        raise APIError(
            400, f"checkpoint name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-'"
        )
    return name


# -- routes -----------------------------------------------------------------------------


@router.api_route("/healthz", methods=["GET"])
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.api_route("/client/config", methods=["GET", "POST"])
async def client_config() -> dict[str, Any]:
    return {
        "pjwt_auth_enabled": False,
        "use_pyqwest_transport": False,
        "proto_compress_fwdbwd": False,
        "sample_use_retrieve_futures": False,
        "custom_loss_server_side": False,
        "sample_join_sampling_session": False,
        "parallel_fwdbwd_chunks": False,
    }


@router.api_route("/client/dynamic_config", methods=["GET", "POST"])
async def dynamic_config() -> dict[str, Any]:
    return {"refresh_interval_sec": 3600, "sample_cancel_enabled": False}


@router.post("/telemetry")
async def telemetry() -> dict[str, str]:
    return {"status": "accepted"}  # the client reports its own events; nothing is kept


@router.get("/get_server_capabilities")
async def capabilities(srv: Srv) -> dict[str, Any]:
    card = {
        "model_name": srv.config.model_name,
        "max_context_length": srv.pool.context,
        "trainable": True,
        "sampleable": True,
    }
    return {"supported_models": [card]}


@router.post("/create_session")
async def create_session(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.CreateSessionRequest, await read_json(request))
    sid = uuid.uuid4().hex
    srv.store.add_session(sid, client, req.sdk_version, req.user_metadata or {})
    return {"type": "create_session", "session_id": sid}


@router.post("/session_heartbeat")
async def heartbeat(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.SessionHeartbeatRequest, await read_json(request))
    if srv.store.session_owner(req.session_id) != client or not srv.store.heartbeat(req.session_id):
        raise APIError(410, f"session {req.session_id[:80]!r} is not known to this server")
    return {"type": "session_heartbeat"}


@router.post("/create_model")
async def create_model(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.CreateModelRequest, await read_json(request))
    if srv.store.session_owner(req.session_id) != client:
        raise APIError(404, f"no session {req.session_id[:80]!r}; create one first")
    model_id = f"{req.session_id}:train:{req.model_seq_id}"
    if not 0 <= req.model_seq_id < 10**9:
        raise APIError(400, f"model_seq_id must be 0 to 999999999, got {req.model_seq_id}")

    def create() -> dict[str, Any]:
        srv.check_base(req.base_model)
        if req.optimizer_config.type != "adamw":
            raise UserError(
                f"optimizer {req.optimizer_config.type!r} is not supported by this server (adamw is)"
            )
        lora = req.lora_config
        if lora is not None and lora.rank == 0:  # rank 0 (or no lora_config): full fine-tuning
            lora = None
        if lora is not None and not 1 <= lora.rank <= MAX_RANK:
            raise UserError(
                f"LoRA rank must be 1 to {MAX_RANK} (0 = full fine-tuning), got {lora.rank}"
            )
        spec = ModelSpec(
            model_id,
            srv.config.model_name,
            lora.rank if lora else 0,
            lora.train_mlp if lora else True,
            lora.train_attn if lora else True,
            lora.train_unembed if lora else True,
            (lora.seed or 0) if lora else 0,
        )
        srv.build_model(spec, req.session_id)
        return {"model_id": model_id, "type": "create_model"}

    return srv.start(client, srv.work.submit(create), model_id)


@router.post("/get_info")
async def get_info(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.GetInfoRequest, await read_json(request))
    try:
        srv.own_model_id(client, req.model_id)
    except UserError as e:
        raise APIError(404, str(e)) from None
    spec = srv.store.model(req.model_id)
    if spec is None:
        raise APIError(404, f"no model {req.model_id[:120]!r} on this server")
    return model_info(srv, req.model_id, spec)


@router.post("/unload_model")
async def unload(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.UnloadModelRequest, await read_json(request))
    try:
        srv.own_model_id(client, req.model_id)
    except UserError as e:
        return srv.failed(client, e, req.model_id)
    m = srv.models.pop(req.model_id, None)
    if m is not None:
        m.close()
    done: Future[Any] = Future()
    done.set_result({"model_id": req.model_id, "type": "unload_model"})
    return srv.start(client, done, req.model_id)


@router.post("/forward_backward")
async def forward_backward(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    from google.protobuf.message import DecodeError
    from tinker.proto import tinker_public_pb2 as pb

    if request.headers.get("content-encoding"):
        raise APIError(400, "compressed forward_backward bodies are not supported by this server")
    msg = pb.ForwardBackwardRequest()
    body = await request.body()
    try:  # parsing and checking up to 64 MiB is CPU work: off the event loop
        await asyncio.to_thread(msg.ParseFromString, body)
    except DecodeError:
        raise APIError(
            400, "the forward_backward body is not a ForwardBackwardRequest protobuf"
        ) from None
    loss_fn, forward_only = msg.loss_fn, msg.forward_only
    try:
        cfg = loss_config(msg, loss_fn, len(msg.data))
        data = await asyncio.to_thread(data_of, msg, loss_fn, srv.pool.context, srv.vocab)
    except UserError as e:
        return srv.failed(client, e, msg.model_id)
    return srv.on_model(
        client,
        msg.model_id,
        lambda m: ("proto", forward_backward_proto(m, data, loss_fn, cfg, forward_only)),
    )


@router.post("/optim_step")
async def optim_step(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    body = await read_json(request)
    params = body.get("adam_params")
    if not isinstance(params, dict):
        name = (
            (body.get("optimizer_params") or {}).get("type", "?")
            if isinstance(body.get("optimizer_params"), dict)
            else "?"
        )
        raise APIError(
            400,
            f"optimizer params of type {name!r} are not supported by this server (adam_params are)",
        )
    adam = _parse(types.AdamParams, params)
    model_id = str(body.get("model_id", ""))
    return srv.on_model(
        client, model_id, lambda m: {"metrics": m.optim_step(adam_params(adam.model_dump()))}
    )


@router.post("/save_weights")
async def save_weights(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.SaveWeightsRequest, await read_json(request))
    try:
        srv.own_model_id(client, req.model_id)
    except UserError as e:
        return srv.failed(client, e, req.model_id)
    n = len(srv.store.checkpoints(req.model_id)) + 1
    path, directory = srv.checkpoint_dir(req.model_id, "training", _name(req.path, f"ckpt-{n:06d}"))

    def save(m: TrainModel) -> dict[str, Any]:
        if srv.store.checkpoint(path) is not None and not req.overwrite:
            raise UserError(f"checkpoint {path} exists; pass overwrite=True or another name")
        m.save_state(directory)
        srv.store.add_checkpoint(path, req.model_id, "training", directory)
        return {"path": path, "type": "save_weights"}

    return srv.on_model(client, req.model_id, save)


@router.post("/save_weights_for_sampler")
async def save_for_sampler(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.SaveWeightsForSamplerRequest, await read_json(request))
    try:
        session = srv.own_model_id(client, req.model_id)
    except UserError as e:
        return srv.failed(client, e, req.model_id)
    ephemeral = req.path is None
    if req.path is not None and req.path.startswith("ephemeral-"):
        raise APIError(400, "sampler checkpoint names starting with 'ephemeral-' are reserved")
    name = _name(req.path, f"ephemeral-{uuid.uuid4().hex[:12]}")
    path, directory = srv.checkpoint_dir(req.model_id, "sampler", name)

    def save(m: TrainModel) -> dict[str, Any]:
        m.save_for_sampler(directory)
        srv.store.add_checkpoint(path, req.model_id, "sampler", directory)
        out: dict[str, Any] = {"path": path, "type": "save_weights_for_sampler"}
        if ephemeral:
            sid = f"{session}:sample:{req.sampling_session_seq_id}"
            srv.store.add_sampler(sid, srv.config.model_name, path, directory)
            out["sampling_session_id"] = sid
            srv.prune_ephemeral(req.model_id)
        return out

    return srv.on_model(client, req.model_id, save)


@router.post("/load_weights")
async def load_weights(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.LoadWeightsRequest, await read_json(request))
    if req.model_id is None and (req.session_id is None or req.model_seq_id is None):
        raise APIError(400, "load_weights needs model_id, or session_id with model_seq_id")
    model_id = req.model_id or f"{req.session_id}:train:{req.model_seq_id}"
    try:  # the target is `<own session>:train:<n>`, so it cannot share another's folder
        session_id = srv.own_model_id(client, model_id)
    except UserError as e:
        return srv.failed(client, e, model_id)

    def load() -> dict[str, Any]:
        srv.check_base(req.base_model)
        if req.optimizer_config is not None and req.optimizer_config.type != "adamw":
            raise UserError(
                f"optimizer {req.optimizer_config.type!r} is not supported by this server (adamw is)"
            )
        source, directory = srv.resolve(client, req.path, "training")
        spec_raw = srv.store.model(source)
        if spec_raw is None:
            raise UserError(f"checkpoint {req.path} belongs to no known model")
        m = srv.models.get(model_id)
        if m is None:  # a new model from the checkpoint, or one the restart emptied
            known = srv.store.model(model_id)
            spec = ModelSpec(**{**(known or spec_raw), "model_id": model_id})
            m = srv.build_model(spec, session_id)
        elif m.spec.lora_rank != spec_raw["lora_rank"]:
            raise UserError(
                f"checkpoint {req.path} has LoRA rank {spec_raw['lora_rank']}, this model {m.spec.lora_rank}"
            )
        m.submit(m.load_state, directory, req.optimizer).result()
        return {"path": req.path, "model_id": model_id, "type": "load_weights"}

    return srv.start(client, srv.work.submit(load), model_id)


@router.post("/create_sampling_session")
async def create_sampling_session(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.CreateSamplingSessionRequest, await read_json(request))
    sid = f"{req.session_id}:sample:{req.sampling_session_seq_id}"
    try:
        srv.own_session(client, req.session_id, f"session {req.session_id[:80]!r}")
    except UserError as e:
        raise APIError(404, str(e)) from None
    try:
        if req.model_path:
            _, directory = srv.resolve(client, req.model_path, "sampler")
            srv.store.add_sampler(sid, srv.config.model_name, req.model_path, directory)
        else:
            srv.check_base(req.base_model)
            srv.store.add_sampler(sid, srv.config.model_name, None, None)
    except UserError as e:
        raise APIError(400, str(e)) from None
    return {"type": "create_sampling_session", "sampling_session_id": sid}


@router.get("/samplers/{sid:path}")
async def sampler(sid: str, srv: Srv, client: Client) -> dict[str, Any]:
    found = srv.store.sampler(sid)
    try:
        srv.own_sampler(client, sid)
    except UserError:
        found = None
    if found is None:
        raise APIError(404, f"no sampler {sid[:120]!r} on this server")
    return {"sampler_id": sid, "base_model": srv.config.model_name, "model_path": found[1]}


@router.post("/asample")
async def asample(request: Request, srv: Srv, client: Client) -> dict[str, Any]:
    req = _parse(types.SampleRequest, await read_json(request))
    weights = ""
    if req.sampling_session_id:
        found = srv.store.sampler(req.sampling_session_id)
        try:
            srv.own_sampler(client, req.sampling_session_id)
        except UserError:
            found = None
        if found is None:
            raise APIError(404, f"no sampler {req.sampling_session_id[:120]!r} on this server")
        weights = str(found[2]) if found[2] else ""
        if found[2] is not None and not found[2].is_dir():
            raise APIError(
                410,
                f"the weights of sampler {req.sampling_session_id} were dropped; save weights for a sampler again",
            )
    elif req.model_path:
        try:
            weights = str(srv.resolve(client, req.model_path, "sampler")[1])
        except UserError as e:
            raise APIError(400, str(e)) from None
    prompt = sample_prompt(req, srv.pool.context, srv.vocab)
    p = req.sampling_params
    temperature = check_temperature(float(p.temperature), "sampling_params.temperature")
    if not 0.0 < float(p.top_p) <= 1.0:
        raise APIError(400, f"top_p must be above 0 and at most 1, got {p.top_p:g}")
    if p.top_k not in (-1, 0):
        raise APIError(400, "top_k sampling is not supported by this server")
    if (
        req.topk_prompt_logprobs
        or req.topk_sample_logprobs
        or req.prompt_alt_tokens_k
        or req.target_prompt_logprobs is not None
    ):
        raise APIError(400, "top-k and target prompt logprobs are not supported by this server")
    if not 1 <= req.num_samples <= MAX_SAMPLES:
        raise APIError(400, f"num_samples must be 1 to {MAX_SAMPLES}")
    room = srv.pool.context - len(prompt)
    max_tokens = p.max_tokens if p.max_tokens is not None else min(256, room)
    if not 1 <= max_tokens <= room:
        raise APIError(
            400, f"max_tokens must be 1 to {room} for this prompt (context {srv.pool.context})"
        )
    stops = stop_strings(p.stop, srv.pool.tokenizer, srv.vocab)
    seed = p.seed if p.seed is not None else int(uuid.uuid4().int % 2**31)
    reqs = [
        GenRequest(prompt, max_tokens, (seed + i) % 2**63, stops) for i in range(req.num_samples)
    ]
    sampled = srv.pool.submit(reqs, temperature, float(p.top_p), weights)
    scored = srv.pool.compute_logprobs([prompt], weights) if req.prompt_logprobs else None
    result: Future[Any] = Future()

    def finish(_: Any) -> None:
        if not sampled.done() or (scored is not None and not scored.done()):
            return
        if result.done():
            return
        try:
            result.set_result(
                ("proto", sample_proto(sampled.result(), scored.result()[0] if scored else None))
            )
        except Exception as e:  # noqa: BLE001 - reported to the client's future
            result.set_exception(e)

    sampled.add_done_callback(finish)
    if scored is not None:
        scored.add_done_callback(finish)
    out = srv.start(client, result)
    out["sample_sequence_ids"] = [f"{out['request_id']}:{i}" for i in range(req.num_samples)]
    return out


@router.post("/retrieve_future", response_model=None)
async def retrieve_future(request: Request, srv: Srv, client: Client) -> Response:
    req = _parse(types.FutureRetrieveRequest, await read_json(request))
    future = srv.futures.get(client, req.request_id)
    if future is None:
        raise APIError(
            404, f"no request {req.request_id[:80]!r} on this server (it may predate a restart)"
        )
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), POLL_S)
    except TimeoutError:
        return JSONResponse(
            {"type": "try_again", "request_id": req.request_id, "queue_state": "active"}, 408
        )
    except Exception:  # noqa: BLE001 - read below
        pass
    error = future.exception()
    if error is not None:
        user = isinstance(error, (UserError, ValueError, APIError))
        message = (
            error.message if isinstance(error, APIError) else str(error) or type(error).__name__
        )
        return JSONResponse({"error": message, "category": "user" if user else "server"})
    value = future.result()
    if isinstance(value, tuple) and value[0] == "proto":
        return Response(value[1], media_type="application/x-protobuf")
    return JSONResponse(value)
