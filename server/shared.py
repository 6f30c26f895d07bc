"""What every part of the server shares: its configuration, the client error and its shape,
and reading a JSON body. The route modules import this, never `server.app`."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request

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
    api_keys: tuple[str, ...] = ()
    """The keys clients authenticate with; each key is one client (none: loopback only)."""
    threads: int = 0
    aliases: set[str] = field(default_factory=set)
    """Other names accepted for the base model (its path)."""


MIN_TEMPERATURE = 0.01
"""Smallest sampling temperature above 0 (0 is greedy); below it the scaled logits overflow."""


def error_body(e: APIError) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": e.message, "type": e.type, "param": e.param, "code": None}}


def error_json(path: str, e: APIError) -> dict[str, Any]:
    """The error shape of the API `path` belongs to: Tinker's client reads `detail`."""
    if path.startswith("/api/"):
        return {"detail": e.message, "error": e.message}
    return error_body(e)


def presented_key(headers: Any) -> str:
    """The key a request carries (`X-API-Key`, or `Authorization: Bearer KEY`), or ""."""
    given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
    return str(given).strip()


def client_of(request: Request) -> str:
    """The client a request comes from: a digest of the key it carries. Every session, model,
    sampler, checkpoint and pending call belongs to the client that created it; on a keyless
    loopback server the key a client picks (Tinker's client always sends one) names it."""
    return hashlib.sha256(presented_key(request.headers).encode()).hexdigest()[:32]


def check_temperature(t: float, param: str = "temperature") -> float:
    """A sampling temperature the engines can use: 0 (greedy) or MIN_TEMPERATURE and above."""
    if not math.isfinite(t) or t < 0 or 0 < t < MIN_TEMPERATURE:
        raise APIError(
            400,
            f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {t:g}",
            param=param,
        )
    return t


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text[:40]} is out of range")
    return x


async def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object; APIError 400 when it is not one."""
    raw = await request.body()
    try:  # NaN, Infinity and numbers beyond a float are not JSON numbers
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, UnicodeDecodeError):
        raise APIError(400, "the request body is not valid JSON") from None
    except RecursionError:
        raise APIError(400, "the request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:  # a lone surrogate (`"\\ud800"`) parses, but no tokenizer or file can take it
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise APIError(
            400, "the request body holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
        ) from None
    except RecursionError:
        raise APIError(400, "the request body is nested too deeply") from None
    return body
