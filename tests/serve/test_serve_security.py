"""Attacks on `skyrl serve` (issue 37, items 7, 8 and 10), each against a real server on
loopback: one client reaching another's ids, a web page driving the keyless server, and
malformed inputs that must answer 4xx in the documented error shape, never 500."""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from pathlib import Path

import pytest
import tinker
from tinker import types

from tests.serve.conftest import Server, start_server

A, B = "tml-client-alice", "tml-client-bob"
CHAT = [{"role": "user", "content": "Hi"}]
SESSION = {"tags": [], "user_metadata": None, "sdk_version": "0.38"}


def call(
    server: Server,
    method: str,
    path: str,
    body: object = None,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, object]:
    """One request to the server's loopback port; (status, JSON body or text)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    h = {"Content-Type": "application/json"} if body is not None or raw is not None else {}
    if key is not None:
        h["X-API-Key"] = key
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    text = r.read()
    conn.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text.decode(errors="replace")


def result(server: Server, out: object, key: str) -> dict:
    """The finished value of a Tinker call answered with a request id."""
    assert isinstance(out, dict) and "request_id" in out, out
    for _ in range(30):
        status, got = call(
            server, "POST", "/api/v1/retrieve_future", {"request_id": out["request_id"]}, key
        )
        if status != 408:
            assert isinstance(got, dict), got
            return got
    raise AssertionError("the call never finished")


def refused(server: Server, status: int, out: object, key: str) -> bool:
    """A Tinker call was refused as if the id did not exist: a 4xx, or a failed future,
    whose message says "no <thing>" (not some other complaint about the request)."""
    if 400 <= status < 500:
        message = out.get("detail", "") if isinstance(out, dict) else str(out)
    else:
        assert status == 200, (status, out)
        message = result(server, out, key).get("error", "")
    assert str(message).startswith("no "), message
    return True


@pytest.fixture(scope="module")
def alice(server: Server):
    """Alice's session, LoRA model, a training checkpoint, a sampler checkpoint, a sampler."""
    sc = tinker.ServiceClient(base_url=server.url, api_key=A)
    tc = sc.create_lora_training_client(base_model="tiny", rank=2, seed=5).result()
    state = tc.save_state("alice-state").result().path
    named = tc.save_weights_for_sampler("alice-sampler").result().path
    sampler = tc.save_weights_and_get_sampling_client().result()
    yield {
        "session": tc.model_id.split(":train:")[0],
        "model": tc.model_id,
        "state": state,
        "named": named,
        "sampler": sampler._sampling_session_id,
        "tc": tc,
    }
    with contextlib.suppress(Exception):
        sc.close("success").result(timeout=10)


def test_a_client_neither_sees_nor_uses_another_clients_ids(server: Server, alice: dict) -> None:
    status, listing = call(server, "GET", "/v1/models", key=B)
    assert status == 200
    ids = [m["id"] for m in listing["data"]]  # type: ignore[index]
    assert ids == ["tiny"], ids  # bob sees the base model only
    status, listing = call(server, "GET", "/v1/models", key=A)
    assert alice["named"] in [m["id"] for m in listing["data"]]  # type: ignore[index]

    chat = {"model": alice["named"], "messages": CHAT, "max_tokens": 2}
    assert call(server, "POST", "/v1/chat/completions", chat, B)[0] == 404
    assert call(server, "GET", f"/v1/models/{alice['named']}", key=B)[0] == 404
    assert call(server, "POST", "/v1/chat/completions", chat, A)[0] == 200

    # bob's own session and sampler checkpoint, to point alice's ids at
    status, out = call(server, "POST", "/api/v1/create_session", SESSION, B)
    assert status == 200
    bob_session = out["session_id"]  # type: ignore[index]

    # alice's sampling session re-pointed at other weights: refused
    repoint = {"session_id": alice["session"], "sampling_session_seq_id": 0, "base_model": "tiny"}
    assert refused(server, *call(server, "POST", "/api/v1/create_sampling_session", repoint, B), B)
    assert call(server, "POST", "/api/v1/session_heartbeat", {"session_id": alice["session"]}, B)[
        0
    ] in (404, 410)
    sample = {
        "sampling_session_id": alice["sampler"],
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
        "num_samples": 1,
        "sampling_params": {"max_tokens": 2},
    }
    status, out = call(server, "POST", "/api/v1/asample", sample, B)
    assert refused(server, status, out, B)
    assert call(server, "GET", f"/api/v1/samplers/{alice['sampler']}", key=B)[0] == 404
    by_path = {**sample, "sampling_session_id": None, "model_path": alice["named"]}
    status, out = call(server, "POST", "/api/v1/asample", by_path, B)
    assert refused(server, status, out, B)
    from_ckpt = {
        "session_id": bob_session,
        "sampling_session_seq_id": 1,
        "model_path": alice["named"],
    }
    assert refused(
        server, *call(server, "POST", "/api/v1/create_sampling_session", from_ckpt, B), B
    )

    # alice's model: not trained, saved over, loaded from, inspected or unloaded by bob
    assert call(server, "POST", "/api/v1/get_info", {"model_id": alice["model"]}, B)[0] == 404
    step = {"model_id": alice["model"], "adam_params": {"learning_rate": 1.0}}
    status, out = call(server, "POST", "/api/v1/optim_step", step, B)
    assert refused(server, status, out, B)
    save = {"model_id": alice["model"], "path": "alice-state", "overwrite": True}
    status, out = call(server, "POST", "/api/v1/save_weights", save, B)
    assert refused(server, status, out, B)
    into_bob = {
        "session_id": bob_session,
        "model_seq_id": 0,
        "path": alice["state"],
        "optimizer": False,
    }
    status, out = call(server, "POST", "/api/v1/load_weights", into_bob, B)
    assert refused(server, status, out, B)
    # a model id that is not `<own session>:train:<n>` (it would share alice's folder)
    lookalike = {
        "model_id": f"{alice['session']}_train_0",
        "path": alice["state"],
        "optimizer": False,
    }
    status, out = call(server, "POST", "/api/v1/load_weights", lookalike, B)
    assert refused(server, status, out, B)
    status, out = call(server, "POST", "/api/v1/unload_model", {"model_id": alice["model"]}, B)
    assert refused(server, status, out, B)
    status, out = call(
        server,
        "POST",
        "/api/v1/create_model",
        {
            "session_id": alice["session"],
            "model_seq_id": 9,
            "base_model": "tiny",
            "lora_config": {"rank": 2},
        },
        B,
    )
    assert refused(server, status, out, B)

    # bob cannot read alice's futures either
    status, out = call(server, "POST", "/api/v1/get_info", {"model_id": alice["model"]}, A)
    assert status == 200
    mine = call(
        server,
        "POST",
        "/api/v1/optim_step",
        {"model_id": alice["model"], "adam_params": {"learning_rate": 0.0}},
        A,
    )[1]
    assert (
        call(server, "POST", "/api/v1/retrieve_future", {"request_id": mine["request_id"]}, B)[0]
        == 404
    )  # type: ignore[index]
    assert "error" not in result(server, mine, A)

    # alice's model still trains, and her checkpoint is still hers
    tc = alice["tc"]
    tok = tc.get_tokenizer()
    ids = tok.encode("The answer is 42.")
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    assert tc.forward_backward([datum], "cross_entropy").result().metrics


def test_no_host_paths_in_responses(server: Server, alice: dict) -> None:
    found = []
    for method, path, body in [
        ("GET", f"/api/v1/samplers/{alice['sampler']}", None),
        ("POST", "/api/v1/get_info", {"model_id": alice["model"]}),
        ("GET", "/api/v1/get_server_capabilities", None),
        ("GET", "/v1/models", None),
    ]:
        status, out = call(server, method, path, body, A)
        assert status == 200, (path, out)
        if isinstance(out, dict) and "model_data" in out:  # Tinker's client loads it: see docs
            out["model_data"].pop("tokenizer_id")
        text = json.dumps(out)
        if str(Path.home()) in text or "/.cache/" in text or str(server.state_dir) in text:
            found.append((path, text[:300]))
    assert not found, found


def test_checkpoint_folders_map_ids_injectively() -> None:
    from server.tinker_state import folder_name

    ids = ["A:train:0", "A_train_0", "A_3atrain_3a0", "..", ".", "A/train/0", "a:train:0"]
    names = [folder_name(i) for i in ids]
    assert len(set(names)) == len(ids), names
    assert all("/" not in n and n not in (".", "..") and n for n in names)


def test_keyless_server_refuses_what_a_browser_can_send(server: Server) -> None:
    chat = json.dumps({"model": "tiny", "messages": CHAT, "max_tokens": 1}).encode()
    evil = "http://evil.example"
    for headers in [
        {"Content-Type": "text/plain", "Origin": evil},  # a cross-origin form/fetch, no preflight
        {"Content-Type": "text/plain;charset=UTF-8"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "application/json", "Origin": evil},
        {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
        {"Content-Type": "application/json", "Host": "evil.example"},  # DNS rebinding
        {"Content-Type": "application/json", "Host": f"rebind.example:{server.port}"},
        {"Content-Type": "application/json", "Host": f"127.0.0.1.evil.example:{server.port}"},
    ]:
        status, out = call(server, "POST", "/v1/chat/completions", headers=headers, raw=chat)
        assert status in (403, 415), (headers, status)
        assert isinstance(out, dict) and out["error"]["message"], out
    status, out = call(server, "GET", "/v1/models", headers={"Host": "evil.example"})
    assert status == 403, status
    status, out = call(
        server,
        "POST",
        "/api/v1/create_session",
        headers={"Content-Type": "text/plain", "Origin": evil},
        raw=b"SESSION",
    )
    assert status in (403, 415) and out["detail"], out  # type: ignore[index]
    # what a local client sends still works: a loopback Host by any spelling, its own origin
    for headers in [
        {"Content-Type": "application/json"},
        {"Content-Type": "application/json; charset=utf-8", "Host": f"localhost:{server.port}"},
        {"Content-Type": "application/json", "Host": f"[::1]:{server.port}"},
        {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{server.port}"},
        {"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"},
    ]:
        status, out = call(server, "POST", "/v1/chat/completions", headers=headers, raw=chat)
        assert status == 200, (headers, status, out)


def test_malformed_inputs_are_4xx_in_the_documented_shape(server: Server) -> None:
    deep = b'{"model": "tiny", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    surrogate = b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    cases = [
        ("/v1/chat/completions", deep),
        ("/v1/chat/completions", b"[" * 200_000),
        ("/v1/chat/completions", surrogate),
        ("/v1/completions", b'{"model": "tiny", "prompt": "\\udfff", "max_tokens": 1}'),
        (
            "/v1/chat/completions",
            b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "temperature": 1e-300}',
        ),
        (
            "/v1/completions",
            b'{"model": "tiny", "prompt": "x", "max_tokens": 2, "temperature": 5e-324}',
        ),
        (
            "/v1/completions",
            b'{"model": "tiny", "prompt": "x", "max_tokens": 2, "temperature": NaN}',
        ),
        ("/v1/completions", b'{"model": "tiny", "prompt": "x", "max_tokens": 2, "top_p": NaN}'),
        ("/v1/completions", b'{"model": "tiny", "prompt": "x", "max_tokens": 2, "\\ud800": 1}'),
    ]
    for path, raw in cases:
        status, out = call(server, "POST", path, raw=raw)
        assert 400 <= status < 500, (raw[:90], status, out)
        assert isinstance(out, dict) and out["error"]["message"] and out["error"]["type"], out
    status, out = call(server, "POST", "/api/v1/create_session", raw=deep)
    assert 400 <= status < 500 and out["detail"], (status, out)  # type: ignore[index]
    status, out = call(server, "POST", "/api/v1/create_session", SESSION, A)
    sid = out["session_id"]  # type: ignore[index]
    status, out = call(
        server,
        "POST",
        "/api/v1/create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "base_model": "tiny"},
        A,
    )
    sample = {
        "sampling_session_id": out["sampling_session_id"],  # type: ignore[index]
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
        "num_samples": 1,
        "sampling_params": {"max_tokens": 2, "temperature": 1e-300},
    }
    status, out = call(server, "POST", "/api/v1/asample", sample, A)
    assert 400 <= status < 500 and out["detail"], (status, out)  # type: ignore[index]
    # and the server still serves
    time.sleep(0.1)
    ok = {"model": "tiny", "messages": CHAT, "max_tokens": 1}
    assert call(server, "POST", "/v1/chat/completions", ok)[0] == 200


def test_clients_with_their_own_keys_are_isolated(tmp_path: Path) -> None:
    one, two = "tml-key-number-one", "tml-key-number-two"
    srv = start_server(tmp_path / "state", None, "--api-key", one, "--api-key", two)
    try:
        assert call(srv, "GET", "/v1/models", key="tml-key-number-three")[0] == 401
        status, out = call(srv, "POST", "/api/v1/create_session", SESSION, one)
        assert status == 200
        sid = out["session_id"]  # type: ignore[index]
        assert call(srv, "POST", "/api/v1/session_heartbeat", {"session_id": sid}, one)[0] == 200
        assert call(srv, "POST", "/api/v1/session_heartbeat", {"session_id": sid}, two)[0] in (
            404,
            410,
        )
        sampler = {"session_id": sid, "sampling_session_seq_id": 0, "base_model": "tiny"}
        assert refused(
            srv, *call(srv, "POST", "/api/v1/create_sampling_session", sampler, two), two
        )
    finally:
        srv.stop()
