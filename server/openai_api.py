"""OpenAI-compatible routes: `GET /v1/models`, `POST /v1/chat/completions`, `/v1/completions`.

Chat messages go through the served model's own chat template; sampling is the same
`SamplingClient` the trainer uses (seeded per choice: choice i gets seed + i). Stop strings
end a choice and are cut from its text, as OpenAI does. `stream: true` answers with
server-sent events, one chunk per token, sent once the batch that decoded the request is
done (the hf engine decodes a batch at a time). Errors use OpenAI's shape and status codes.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.engine import GenRequest, GenResult
from server.pool import SamplerPool
from server.shared import APIError, ServeConfig, check_temperature, client_of, read_json

MAX_N = 16
"""Most choices one request may ask for."""
MAX_NEW_TOKENS = 4096
"""Most tokens one choice may generate (the model's context also bounds it)."""
DEFAULT_MAX_TOKENS = 256
MAX_STOP = 4

router = APIRouter()


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Part(_Strict):
    type: Literal["text"]
    text: str


class _Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_Part] | None = None


class _Sampling(_Strict):
    model: str
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, bool] | None = None


class ChatRequest(_Sampling):
    messages: list[_Message] = Field(min_length=1, max_length=1024)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int]
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False


_UNSUPPORTED_CHAT = ("tools", "functions", "tool_choice", "response_format", "logit_bias", "audio")
_UNSUPPORTED_COMPLETION = ("suffix", "logit_bias", "best_of")


def _parse(model: type[_Strict], body: dict[str, Any], unsupported: tuple[str, ...]) -> Any:
    for key in unsupported:
        if body.get(key) not in (None, [], {}) and not (key == "best_of" and body[key] == 1):
            raise APIError(400, f"'{key}' is not supported by this server", param=key)
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        raise APIError(400, f"invalid '{where}': {err['msg']}", param=where) from None


def _weights(request: Request, name: str) -> str:
    """The weights folder a model name picks: "" for the served model, or a sampler
    checkpoint written through Tinker's API (`tinker://<model>/sampler_weights/<name>`)."""
    config: ServeConfig = request.app.state.config
    if name == config.model_name or name in config.aliases:
        return ""
    if name.startswith("tinker://"):
        try:
            return str(request.app.state.tinker.resolve(client_of(request), name, "sampler")[1])
        except ValueError as e:
            raise APIError(404, str(e), param="model") from None
    raise APIError(
        404,
        f"the model '{name[:200]}' does not exist on this server; it serves '{config.model_name}' and its tinker:// sampler checkpoints",
        param="model",
    )


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP or any(not s or len(s) > 256 for s in stops):
        raise APIError(
            400,
            f"'stop' takes at most {MAX_STOP} non-empty strings of <= 256 characters",
            param="stop",
        )
    return tuple(stops)


def _budget(pool: SamplerPool, prompt_len: int, asked: int | None) -> int:
    room = pool.context - prompt_len
    if room < 1:
        raise APIError(
            400,
            f"the prompt has {prompt_len} tokens; this model's context is {pool.context}",
            param="messages",
        )
    if asked is not None and asked > room:
        raise APIError(
            400,
            f"max_tokens {asked} plus the prompt's {prompt_len} tokens exceed this model's context of {pool.context}",
            param="max_tokens",
        )
    return asked if asked is not None else min(DEFAULT_MAX_TOKENS, room)


class _Choice:
    """One sampled continuation as OpenAI reports it: text cut at a stop string or EOS."""

    def __init__(self, pool: SamplerPool, r: GenResult, stops: tuple[str, ...]) -> None:
        tok = pool.tokenizer
        ids, lps = list(r.token_ids), list(r.logprobs)
        if r.finish_reason == "eos" and ids and ids[-1] in pool.eos_ids:
            ids, lps = ids[:-1], lps[:-1]
        text = tok.decode(ids, skip_special_tokens=True)
        if r.finish_reason == "stop":
            cuts = [i for s in stops if (i := text.find(s)) >= 0]
            text = text[: min(cuts)] if cuts else text
        # the tokens that make up the returned text (a stop string's tokens are dropped)
        pieces = _pieces(tok, ids, text, window=16)
        if "".join(pieces) != text:  # a rare multi-byte split the window missed
            pieces = _pieces(tok, ids, text, window=len(ids) + 1)
        self.pieces = [(p, lp, t) for p, lp, t in zip(pieces, lps, ids, strict=False)]
        self.text = text
        self.finish = "length" if r.finish_reason == "length" else "stop"
        self.generated = len(r.token_ids)


def _pieces(tok: Any, ids: list[int], text: str, window: int) -> list[str]:
    """Each token's share of `text`, decoding a sliding window of at most `window` tokens
    (linear time; a token that ends mid-character gets "" and the next one carries it)."""
    out: list[str] = []
    done, start, base = 0, 0, ""
    for i in range(len(ids)):
        if done >= len(text):
            break
        chunk = tok.decode(ids[start : i + 1], skip_special_tokens=True)
        if chunk.endswith("\ufffd") and i + 1 < len(ids):
            out.append("")
            continue
        piece = chunk[len(base) :][: len(text) - done]
        out.append(piece)
        done += len(piece)
        start, base = (i + 1, "") if i + 1 - start >= window else (start, chunk)
    return out


async def _sample(
    pool: SamplerPool, prompt: list[int], req: _Sampling, max_tokens: int | None, weights: str
) -> tuple[list[_Choice], int]:
    stops = _stops(req.stop)
    budget = _budget(pool, len(prompt), max_tokens)
    seed = req.seed if req.seed is not None else secrets.randbelow(2**31)
    temperature = 1.0 if req.temperature is None else check_temperature(req.temperature)
    reqs = [GenRequest(prompt, budget, (seed + i) % 2**63, stops) for i in range(req.n)]
    results = await asyncio.wrap_future(pool.submit(reqs, temperature, req.top_p or 1.0, weights))
    # decoding is CPU work: off the event loop, so other requests keep flowing
    choices = await asyncio.to_thread(lambda: [_Choice(pool, r, stops) for r in results])
    return choices, sum(c.generated for c in choices)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _chat_prompt(pool: SamplerPool, req: ChatRequest) -> list[int]:
    messages = []
    for m in req.messages:
        content = (
            m.content
            if isinstance(m.content, str) or m.content is None
            else "".join(p.text for p in m.content)
        )
        messages.append(
            {"role": "system" if m.role == "developer" else m.role, "content": content or ""}
        )
    if sum(len(m["content"]) for m in messages) > 4 * pool.context * 8:
        raise APIError(
            400, "the messages are far longer than this model's context", param="messages"
        )
    text = pool.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return pool.tokenizer(text, add_special_tokens=False)["input_ids"]


def _completion_prompt(pool: SamplerPool, req: CompletionRequest) -> list[int]:
    p = req.prompt
    if isinstance(p, list) and p and isinstance(p[0], int):
        ids = [int(x) for x in p]
        vocab = len(pool.tokenizer)
        if any(not 0 <= x < vocab for x in ids):
            raise APIError(400, f"prompt token ids must lie in [0, {vocab})", param="prompt")
        return ids
    if isinstance(p, list) and len(p) != 1:
        raise APIError(
            400, "'prompt' as a list takes exactly one string on this server", param="prompt"
        )
    text = p[0] if isinstance(p, list) else p
    assert isinstance(text, str)
    if len(text) > 4 * pool.context * 8:
        raise APIError(400, "the prompt is far longer than this model's context", param="prompt")
    return pool.tokenizer(text, add_special_tokens=False)["input_ids"]


def _ids() -> tuple[str, int]:
    return uuid.uuid4().hex[:24], int(time.time())


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    config: ServeConfig = request.app.state.config
    own = request.app.state.tinker.store.sampler_checkpoints(client_of(request))
    names = [config.model_name, *own]
    return {
        "object": "list",
        "data": [{"id": n, "object": "model", "created": 0, "owned_by": "skyrl"} for n in names],
    }


@router.get("/v1/models/{name:path}")
async def model(request: Request, name: str) -> dict[str, Any]:
    _weights(request, name)
    return {"id": name, "object": "model", "created": 0, "owned_by": "skyrl"}


@router.post("/v1/chat/completions", response_model=None)
async def chat(request: Request) -> JSONResponse | StreamingResponse:
    pool: SamplerPool = request.app.state.pool
    req = _parse(ChatRequest, await read_json(request), _UNSUPPORTED_CHAT)
    weights = _weights(request, req.model)
    if req.top_logprobs:
        raise APIError(
            400,
            "'top_logprobs' above 0 is not supported by this server (logprobs of the sampled tokens are)",
            param="top_logprobs",
        )
    prompt = _chat_prompt(pool, req)
    choices, generated = await _sample(
        pool, prompt, req, req.max_completion_tokens or req.max_tokens, weights
    )
    rid, created = _ids()
    head = {"id": f"chatcmpl-{rid}", "created": created, "model": req.model}

    def logprobs(c: _Choice) -> dict[str, Any] | None:
        if not req.logprobs:
            return None
        return {
            "content": [
                {"token": p, "logprob": lp, "bytes": list(p.encode()), "top_logprobs": []}
                for p, lp, _ in c.pieces
            ]
        }

    if req.stream:
        return _stream(
            head, "chat.completion.chunk", choices, req, len(prompt), generated, chat=True
        )
    body = {
        **head,
        "object": "chat.completion",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": logprobs(c),
                "finish_reason": c.finish,
            }
            for i, c in enumerate(choices)
        ],
        "usage": _usage(len(prompt), generated),
    }
    return JSONResponse(body)


@router.post("/v1/completions", response_model=None)
async def completions(request: Request) -> JSONResponse | StreamingResponse:
    pool: SamplerPool = request.app.state.pool
    req = _parse(CompletionRequest, await read_json(request), _UNSUPPORTED_COMPLETION)
    weights = _weights(request, req.model)
    if req.echo:
        raise APIError(400, "'echo' is not supported by this server", param="echo")
    if req.logprobs is not None and req.logprobs > 1:
        raise APIError(
            400,
            "'logprobs' above 1 is not supported by this server (the sampled token's is)",
            param="logprobs",
        )
    prompt = _completion_prompt(pool, req)
    choices, generated = await _sample(pool, prompt, req, req.max_tokens, weights)
    rid, created = _ids()
    head = {"id": f"cmpl-{rid}", "created": created, "model": req.model}

    def logprobs(c: _Choice) -> dict[str, Any] | None:
        if req.logprobs is None:
            return None
        offsets, at = [], 0
        for p, _, _ in c.pieces:
            offsets.append(at)
            at += len(p)
        return {
            "tokens": [p for p, _, _ in c.pieces],
            "token_logprobs": [lp for _, lp, _ in c.pieces],
            "top_logprobs": [{p: lp} for p, lp, _ in c.pieces] if req.logprobs else None,
            "text_offset": offsets,
        }

    if req.stream:
        return _stream(head, "text_completion", choices, req, len(prompt), generated, chat=False)
    body = {
        **head,
        "object": "text_completion",
        "choices": [
            {"index": i, "text": c.text, "logprobs": logprobs(c), "finish_reason": c.finish}
            for i, c in enumerate(choices)
        ],
        "usage": _usage(len(prompt), generated),
    }
    return JSONResponse(body)


def _stream(
    head: dict[str, Any],
    kind: str,
    choices: list[_Choice],
    req: _Sampling,
    prompt_len: int,
    generated: int,
    chat: bool,
) -> StreamingResponse:
    """Server-sent events: per choice a role chunk (chat), one chunk per token, a finish chunk;
    then the usage chunk when `stream_options.include_usage`, then `[DONE]`."""

    def chunk(i: int, text: str | None, finish: str | None, role: bool = False) -> str:
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {
                "index": i,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish,
            }
        else:
            choice = {"index": i, "text": text or "", "logprobs": None, "finish_reason": finish}
        return f"data: {json.dumps({**head, 'object': kind, 'choices': [choice]})}\n\n"

    async def events() -> AsyncIterator[str]:
        for i, c in enumerate(choices):
            if chat:
                yield chunk(i, None, None, role=True)
            for piece, _, _ in c.pieces:
                if piece:
                    yield chunk(i, piece, None)
            yield chunk(i, None, c.finish)
        if (req.stream_options or {}).get("include_usage"):
            usage = {**head, "object": kind, "choices": [], "usage": _usage(prompt_len, generated)}
            yield f"data: {json.dumps(usage)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
