"""What every part of the server shares: its configuration, the client error and its shape,
and reading a JSON body. The route modules import this, never `server.app`."""

from __future__ import annotations

import json
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
    api_key: str | None = None
    threads: int = 0
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
