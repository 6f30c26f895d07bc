"""The ASGI middleware in front of every route: who may ask, and how much they may send.

With API keys, a request must carry one of them. Without a key the server listens on
loopback only, and it serves only what a local program sends, not what a web page in the
user's browser can make the browser send: the `Host` must be a loopback name (a page that
rebinds its own DNS name to 127.0.0.1 still sends that name), an `Origin` must be the
server's own (browsers send it on cross-site requests), `Sec-Fetch-Site` must not say
cross-site, and a body must be `application/json` (or Tinker's protobuf): the types a page
may POST without asking the server first (`text/plain`, forms) are refused. Bodies are
capped before a route reads a byte.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.shared import MAX_BODY, MAX_TRAIN_BODY, APIError, error_json, presented_key

OPEN_PATHS = ("/health", "/api/v1/healthz")
"""Paths that need no key: they say nothing but "up"."""
BODY_TYPES = ("application/json", "application/x-protobuf")
"""Content types a keyless server accepts a body in (a browser must ask before sending them)."""


def loopback_host(host: str) -> bool:
    """Whether a `Host` header names this machine's loopback (`127.x`, `[::1]`, `localhost`)."""
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8000
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name, _, port = name.partition(":")
        if not port.isdigit():
            return False
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """API keys (each key one client) or, without keys, the keyless server's browser rules;
    then the body-size cap."""

    def __init__(self, app: ASGIApp, api_keys: tuple[str, ...]) -> None:
        self.app = app
        self.api_keys = api_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        refusal = self._refusal(scope, headers, path)
        if refusal is not None:
            await JSONResponse(error_json(path, refusal), refusal.status)(scope, receive, send)
            return
        limit = MAX_TRAIN_BODY if path.endswith("/forward_backward") else MAX_BODY
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

    def _refusal(self, scope: Scope, headers: dict[str, str], path: str) -> APIError | None:
        if self.api_keys:
            if path in OPEN_PATHS or self._authorized(headers):
                return None
            return APIError(
                401,
                "a valid API key is required (Authorization: Bearer KEY)",
                "authentication_error",
            )
        host = headers.get("host", "")
        if not loopback_host(host):
            return APIError(
                403,
                f"this keyless server answers only requests for a loopback host, not {host[:80]!r}; "
                "start it with --api-key to serve other names",
                "permission_error",
            )
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"http://{host.lower()}":
            return APIError(
                403, f"cross-origin requests (from {origin[:80]!r}) are refused", "permission_error"
            )
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return APIError(403, "requests from another site are refused", "permission_error")
        has_body = (
            headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers
        )
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if has_body and kind not in BODY_TYPES:
            return APIError(
                415,
                f"a request body must be sent as application/json, not {kind[:60] or 'untyped'!r}",
            )
        return None

    def _authorized(self, headers: dict[str, str]) -> bool:
        given = presented_key(headers).encode()
        ok = False
        for key in self.api_keys:  # every key compared, each in constant time
            ok |= hmac.compare_digest(given, key.encode())
        return ok

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        e = APIError(413, f"the request body exceeds the server's limit of {limit} bytes")
        await JSONResponse(error_json(scope["path"], e), 413)(scope, receive, send)


class _TooLarge(Exception):
    pass
