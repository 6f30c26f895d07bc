"""The OpenAI API of `skyrl serve --model tiny`, driven by the real `openai` client."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.conftest import with_tiny
from tests.serve.conftest import Server, start_server

BIN = Path(sys.executable).parent
CHAT = [{"role": "user", "content": "What is 2 + 3?"}]


def client(server: Server, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def post(
    server: Server, path: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    req = urllib.request.Request(
        server.url + path,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def oversized(server: Server, path: str, size: int) -> tuple[int, dict]:
    """Declare a `size`-byte body, send its first 64 KiB, read the answer (the server refuses
    before reading more)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(size))
    conn.endheaders()
    conn.send(b"x" * 65536)
    r = conn.getresponse()
    out = r.status, json.loads(r.read())
    conn.close()
    return out


def tiny_tokenizer():
    from transformers import AutoTokenizer

    from agents.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model("tiny", quiet=True)))


def test_models_and_chat_with_usage_seed_and_logprobs(server: Server) -> None:
    c = client(server)
    assert [m.id for m in c.models.list().data][0] == "tiny"
    r = c.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=12, n=3, seed=7, logprobs=True
    )
    tok = tiny_tokenizer()
    prompt = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert r.usage.prompt_tokens == len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert len(r.choices) == 3
    assert r.usage.completion_tokens <= 3 * 12
    for ch in r.choices:
        assert ch.finish_reason in ("length", "stop")
        assert ch.logprobs is not None and all(t.logprob <= 0 for t in ch.logprobs.content)
        assert "".join(t.token for t in ch.logprobs.content) == ch.message.content
    again = c.chat.completions.create(model="tiny", messages=CHAT, max_tokens=12, n=3, seed=7)
    assert [x.message.content for x in again.choices] == [x.message.content for x in r.choices]
    texts = {x.message.content for x in r.choices}
    assert len(texts) > 1, "choice i is seeded with seed + i: three identical choices"


def test_stop_string_is_cut_and_streaming_matches(server: Server) -> None:
    c = client(server)
    full = c.completions.create(
        model="tiny", prompt="SELECT name FROM", max_tokens=24, temperature=0
    )
    text = full.choices[0].text
    assert full.choices[0].finish_reason == "length" and len(text) > 6
    stop = text[3:6]
    cut = c.completions.create(
        model="tiny", prompt="SELECT name FROM", max_tokens=24, temperature=0, stop=[stop]
    )
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"

    chunks = list(
        c.chat.completions.create(
            model="tiny",
            messages=CHAT,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    plain = c.chat.completions.create(model="tiny", messages=CHAT, max_tokens=16, temperature=0)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == plain.choices[0].message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == plain.choices[
        0
    ].finish_reason
    assert (
        chunks[-1].usage is not None and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    )

    lp = c.completions.create(
        model="tiny", prompt="SELECT name FROM", max_tokens=8, temperature=0, logprobs=1
    )
    assert "".join(lp.choices[0].logprobs.tokens) == lp.choices[0].text
    assert len(lp.choices[0].logprobs.token_logprobs) == lp.usage.completion_tokens


def test_bad_requests_get_4xx_in_openai_shape_and_the_server_keeps_serving(server: Server) -> None:
    c = client(server)
    status, body = post(server, "/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, body = post(
        server, "/v1/chat/completions", json.dumps({"model": "tiny", "messages": "hi"}).encode()
    )
    assert status == 400 and body["error"]["param"] == "messages"
    status, body = post(server, "/v1/completions", b"[1, 2]")
    assert status == 400 and "JSON object" in body["error"]["message"]
    status, body = oversized(server, "/v1/chat/completions", 3 * 1024 * 1024)
    assert status == 413 and "limit" in body["error"]["message"]
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        c.chat.completions.create(model="gpt-4o", messages=CHAT)
    with pytest.raises(openai.BadRequestError, match="'n'"):
        c.chat.completions.create(model="tiny", messages=CHAT, n=1000)
    with pytest.raises(openai.BadRequestError, match="'temperature'"):
        c.chat.completions.create(model="tiny", messages=CHAT, temperature="hot")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="context"):
        c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "word " * 5000}]
        )
    with pytest.raises(openai.BadRequestError, match="context"):
        c.completions.create(model="tiny", prompt="word " * 1000, max_tokens=4000)
    with pytest.raises(openai.BadRequestError, match="'max_tokens'"):
        c.completions.create(model="tiny", prompt="hi", max_tokens=10**6)
    with pytest.raises(openai.BadRequestError, match="'tools' is not supported"):
        c.chat.completions.create(
            model="tiny", messages=CHAT, tools=[{"type": "function", "function": {"name": "f"}}]
        )
    status, body = post(server, "/v1/nothing", b"{}")
    assert status == 404 and "no route" in body["error"]["message"]
    ok = c.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4)
    assert ok.choices[0].message.content is not None


def test_bad_command_lines_are_one_sentence(server: Server, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    with_tiny(tmp_path / ".cache" / "skyrl")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text("{}")
    for args, words in [
        (["--model", str(tmp_path / "nothing")], "does not exist"),
        (["--model", str(tmp_path / "run")], "no complete checkpoint"),
        (["--model", "tiny", "--port", str(server.port)], "cannot listen"),
        (["--model", "openai:gpt@http://x/v1"], "local model"),
    ]:
        out = subprocess.run(
            [str(BIN / "skyrl"), "serve", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 2 and words in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_api_key(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    with_tiny(tmp_path / ".cache" / "skyrl")
    env.pop("SKYRL_API_KEY", None)
    out = subprocess.run(
        [str(BIN / "skyrl"), "serve", "--model", "tiny", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2 and "--api-key" in out.stderr and "Traceback" not in out.stderr
    srv = start_server(tmp_path / "state", None, "--api-key", "tml-secret-key")
    try:
        with pytest.raises(openai.AuthenticationError):
            client(srv, "tml-wrong").models.list()
        status, body = post(srv, "/v1/completions", b"{}")
        assert status == 401 and body["error"]["type"] == "authentication_error"
        assert client(srv, "tml-secret-key").models.list().data[0].id == "tiny"
        status, body = post(srv, "/api/v1/create_session", b"{}")  # Tinker's routes too
        assert status == 401
        status, _ = post(srv, "/api/v1/create_session", b"{}", {"X-API-Key": "tml-secret-key"})
        assert status == 400  # past the key: the empty body is refused on its merits
    finally:
        srv.stop()


def test_skyrl_eval_through_the_server_matches_local_eval(server: Server, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    with_tiny(tmp_path / ".cache" / "skyrl")
    base = [str(BIN / "skyrl"), "eval", "--env", "math", "--limit", "4", "--no-tracking"]
    local = subprocess.run(
        [*base, "--model", "tiny", "--output", str(tmp_path / "local")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    remote = subprocess.run(
        [*base, "--model", f"openai:tiny@{server.url}/v1", "--output", str(tmp_path / "remote")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    a = json.loads((tmp_path / "local" / "report.json").read_text())
    b = json.loads((tmp_path / "remote" / "report.json").read_text())
    assert (a["n"], a["accuracy"], a["mean_reward"]) == (b["n"], b["accuracy"], b["mean_reward"])
    texts = []
    for name in ("local", "remote"):
        rows = [json.loads(x) for x in (tmp_path / name / "results.jsonl").read_text().splitlines()]
        texts.append([[t["text"] for t in r["turns"] if t["role"] == "assistant"] for r in rows])
    assert texts[0] == texts[1], "greedy answers through the server differ from local ones"


def test_200_concurrent_requests_all_complete(server: Server) -> None:
    """The bounded load test (benchmarks/serve_load.py): 200 chat requests at once."""
    from benchmarks.serve_load import run

    result = run(server.url + "/v1", requests=200, max_tokens=4)
    print("serve_load:", result)
    assert result["completed"] == 200 and result["failed"] == 0, result
    assert client(server).models.list().data[0].id == "tiny"
