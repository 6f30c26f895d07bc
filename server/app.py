"""The HTTP app: the guard in front (`server/guard.py`: keys, the keyless server's browser
rules, body caps), error shapes, and the two APIs (`server/openai_api.py`,
`server/tinker_api.py`). Shared types live in `server/shared.py`.

Everything a client sends is hostile: JSON is parsed by `server.shared.read_json` and
validated by pydantic models, token counts and `n` are capped by the route, and nothing a
client sends is ever evaluated or unpickled. Every id belongs to the client that created it
(`server/tinker_state.py`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from server.guard import Guard
from server.shared import APIError, ServeConfig, error_body, error_json

__all__ = ["ServeConfig", "build_app"]


def build_app(config: ServeConfig) -> FastAPI:
    """The app with both APIs; loads the model (and the state file) once."""
    from transformers.utils import logging as hf_logging

    from server import openai_api, tinker_api
    from server.pool import SamplerPool
    from server.tinker_state import TinkerServer

    hf_logging.disable_progress_bar()  # engines load per sampler: no bar per load in the log
    app = FastAPI(title="skyrl serve", docs_url=None, redoc_url=None, openapi_url=None)
    pool = SamplerPool(config.model_path, threads=config.threads)
    app.state.config = config
    app.state.pool = pool

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError) -> JSONResponse:
        return JSONResponse(error_json(request.url.path, e), e.status)

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
    app.state.tinker = TinkerServer(config, pool)
    app.include_router(tinker_api.router)
    app.add_middleware(Guard, api_keys=config.api_keys)
    return app
