"""The HTTP app: authentication, request-size caps, error shapes, and the two APIs.

Everything a client sends is hostile: bodies are capped before they are read
(`MAX_BODY`, larger only for Tinker's `forward_backward`), JSON is parsed by `json.loads`
and validated by pydantic models, token counts and `n` are capped by the route, and
nothing a client sends is ever evaluated or unpickled. On a non-loopback address every
request must carry the API key (`Authorization: Bearer KEY`, or Tinker's `X-API-Key`).
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY = 2 * 1024 * 1024
"""Largest request body (bytes) except Tinker's forward_backward."""
MAX_TRAIN_BODY = 64 * 1024 * 1024
"""Largest forward_backward body (bytes)."""


class APIError(Exception):
    """A client error: HTTP status, one-sentence message, OpenAI error type and param."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


@dataclass
class ServeConfig:
    """What `skyrl serve` was started with."""

    model_name: str
    """The name clients use for the served base model (`--model` as typed)."""
    model_path: Path
    """Its local Hugging Face folder."""
    state_dir: Path
    """Checkpoints and the SQLite state file."""
    api_key: str | None = None
    threads: int = 0
    engine: str = "hf"
    """The engine that samples (a row of `agents/engines.py` that holds weights)."""
    aliases: set[str] = field(default_factory=set)
    """Other names accepted for the base model (its path)."""


def error_body(e: APIError) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": e.message, "type": e.type, "param": e.param, "code": None}}


async def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object; APIError 400 when it is not one."""
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise APIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


class _Guard:
    """ASGI middleware: API key check and body-size cap, before any route reads a byte."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        open_path = scope["path"] in ("/health", "/api/v1/healthz")  # says nothing but "up"
        if self.api_key is not None and not open_path and not self._authorized(headers):
            e = APIError(401, "a valid API key is required (Authorization: Bearer KEY)",
                         "authentication_error")  # fmt: skip
            await JSONResponse(error_body(e), 401)(scope, receive, send)
            return
        limit = MAX_TRAIN_BODY if scope["path"].endswith("/forward_backward") else MAX_BODY
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._too_large(scope, receive, send, limit)
            return
        seen = 0

        async def capped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, capped, send)
        except _TooLarge:
            await self._too_large(scope, receive, send, limit)

    def _authorized(self, headers: dict[str, str]) -> bool:
        assert self.api_key is not None
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        return hmac.compare_digest(given.strip().encode(), self.api_key.encode())

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        e = APIError(413, f"the request body exceeds the server's limit of {limit} bytes")
        await JSONResponse(error_body(e), 413)(scope, receive, send)


class _TooLarge(Exception):
    pass


def build_app(config: ServeConfig) -> FastAPI:
    """The app with both APIs; loads the model (and the state file) once."""
    from transformers.utils import logging as hf_logging

    from server import openai_api, tinker_api
    from server.pool import SamplerPool

    hf_logging.disable_progress_bar()  # engines load per sampler: no bar per load in the log
    app = FastAPI(title="skyrl serve", docs_url=None, redoc_url=None, openapi_url=None)
    pool = SamplerPool(config.model_path, threads=config.threads, engine=config.engine)
    app.state.config = config
    app.state.pool = pool

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        if request.url.path.startswith("/api/"):  # Tinker's client reads `detail`
            return JSONResponse({"detail": e.message, "error": e.message}, e.status)
        return JSONResponse(error_body(e), e.status)

    @app.exception_handler(404)
    async def _not_found(request: Request, exc: Exception) -> JSONResponse:
        e = APIError(404, f"no route {request.method} {request.url.path} on this server")
        return JSONResponse(error_body(e), 404)

    @app.exception_handler(405)
    async def _bad_method(request: Request, exc: Exception) -> JSONResponse:
        e = APIError(405, f"{request.url.path} does not accept {request.method}")
        return JSONResponse(error_body(e), 405)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        e = APIError(500, f"the server failed: {type(exc).__name__}: {exc}", "server_error")
        return JSONResponse(error_body(e), 500)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(openai_api.router)
    router, app.state.tinker = tinker_api.build_router(config, pool)
    app.include_router(router)
    app.add_middleware(_Guard, api_key=config.api_key)
    return app
