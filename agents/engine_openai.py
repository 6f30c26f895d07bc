"""`openai` engine: any OpenAI-compatible server (`/v1/chat/completions`), for evaluation only.

    skyrl eval --env math --model openai:gpt-4o-mini@https://api.openai.com/v1
    skyrl eval --env sql --model openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000

Such a server takes chat messages and returns text: its token ids and log-probs are not
available, so this engine cannot feed a learner (`update_weights` refuses). To run the
token-level agent loop unchanged it works in *characters*: `TextTokenizer` "tokenizes" text
into Unicode code points with a ChatML template, the engine turns a request's ids back into
chat messages, asks the server, and returns the reply's code points (log-probs 0.0). Budgets
given to the loop in tokens should be multiplied by `CHARS_PER_TOKEN`; the engine divides
`max_new_tokens` by it again for the server's `max_tokens`.

Stop strings are applied here, not sent: servers strip the matched stop string from the
reply, and the environments need the closing tag (`</bash>`) in the action. The reply is
cut right after the first stop string it contains (finish reason `stop`).

The API key comes from `$OPENAI_API_KEY` (none is sent when unset). Only the standard
library is used (urllib).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agents.engine import GenRequest, GenResult

CHARS_PER_TOKEN = 4
"""Rough characters per token: converts the loop's character budgets to `max_tokens`."""
START, END = "<|im_start|>", "<|im_end|>"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The template `TextTokenizer` renders (the same text `apply_chat_template` produces)."""


class TextTokenizer:
    """A lossless character "tokenizer" with a ChatML chat template (ids = code points)."""

    chat_template = CHATML
    eos_token = END

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        tokenize: bool = False,
        add_generation_prompt: bool = False,
    ) -> str:
        """Render messages as ChatML text (only `tokenize=False` is supported)."""
        text = "".join(f"{START}{m['role']}\n{m['content']}{END}\n" for m in messages)
        return text + (f"{START}assistant\n" if add_generation_prompt else "")

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(map(chr, ids))


def parse_chatml(text: str) -> list[dict[str, str]]:
    """Chat messages back from rendered ChatML; a trailing open assistant turn with text
    (an environment's response prefix) becomes the last message."""
    messages = []
    for chunk in text.split(START)[1:]:
        role, _, rest = chunk.partition("\n")
        content = rest.split(END)[0]
        if END in rest or content:
            messages.append({"role": role, "content": content})
    return messages


def parse_spec(spec: str) -> tuple[str, str]:
    """`openai:MODEL@BASE_URL` -> (MODEL, base URL ending in /v1); ValueError if malformed."""
    body = spec.removeprefix("openai:")
    model, sep, url = body.rpartition("@")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise ValueError(
            f"model {spec!r} must look like openai:MODEL@BASE_URL, "
            "e.g. openai:gpt-4o-mini@https://api.openai.com/v1"
        )
    url = url.rstrip("/")
    return model, url if "/v1" in url else url + "/v1"


class OpenAIEngine:
    """Sends each request to `/chat/completions`, a few at a time, with retries."""

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        workers: int = 8,
        retries: int = 2,
    ) -> None:
        self.model = model
        """The server's model name."""
        self.url = base_url.rstrip("/") + "/chat/completions"
        """The endpoint."""
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout_s = timeout_s
        self.retries = retries
        self.workers = workers
        self.tokenizer = TextTokenizer()
        self.version = 0

    def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        raise NotImplementedError("the openai engine is for evaluation only; it has no weights")

    def generate(
        self, requests: list[GenRequest], *, temperature: float, top_p: float = 1.0
    ) -> list[GenResult]:
        """Ask the server for every request (in parallel); RuntimeError if it cannot answer."""
        if not requests:
            return []
        with ThreadPoolExecutor(min(self.workers, len(requests))) as pool:
            return list(pool.map(lambda r: self._one(r, temperature, top_p), requests))

    def _one(self, req: GenRequest, temperature: float, top_p: float) -> GenResult:
        messages = parse_chatml(self.tokenizer.decode(req.prompt_ids))
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max(1, req.max_new_tokens // CHARS_PER_TOKEN),
            "temperature": temperature,
            "seed": req.seed % 2**31,
        }
        if top_p < 1.0:
            body["top_p"] = top_p
        reply = self._post(body)
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] or ""
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{self.url} answered without choices[0].message.content") from None
        cut = [i + len(s) for s in req.stop if (i := text.find(s)) >= 0]
        if cut:
            text, finish = text[: min(cut)], "stop"
        text = text[: req.max_new_tokens]
        ids = [ord(c) for c in text]
        return GenResult(ids, [0.0] * len(ids), finish, self.version, {"usage": reply.get("usage")})

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(8.0, 2.0**attempt))
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                error = f"HTTP {e.code}: {e.read()[:300].decode('utf-8', 'replace')}"
                if e.code < 500 and e.code != 429:  # a client error will not go away
                    break
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                error = str(getattr(e, "reason", e))
            except json.JSONDecodeError:
                error = "the reply is not JSON"
        raise RuntimeError(f"the OpenAI-compatible server at {self.url} failed ({error})")
