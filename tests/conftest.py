"""Shared fixtures: the real `skyrl` command and one real local Ray cluster per session."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
TINY_MATH = [
    "--env",
    "math",
    "--model",
    "tiny",
    "--set",
    "eval.limit=4",
    "--set",
    "rollout.batch_size=2",
]
"""`skyrl train` flags for a fast run: the tiny model on math, 4 eval tasks, 2 tasks a step."""
NO_TRACKING = ["--set", "tracking.enabled=false"]
"""For a run whose test checks nothing of MLflow: importing it and writing the store cost the
driver 1.3-1.9 CPU-s a run (docs/benchmarks.md). The tests of tracking keep it on, and so
do those of a run killed or stopped and then resumed (the store is part of what resumes)."""
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Harbor tasks run on this machine's own system: a base image's Debian root file system
# needs the Debian mirror, which tests never reach (tests/environments/test_harbor_base.py
# runs tasks over a small root file system it makes, with this unset)
os.environ.setdefault("SKYRL_HARBOR_BASE", "host")
# One torch thread a process (what a threads setting of 0 means, agents/engines.py): two xdist
# workers, each test's `skyrl` processes and Ray workers share 2 cores, and torch's
# default of a thread per core in each of them made every step wait on oversubscribed
# cores. A test that needs another count sets trainer.threads itself.
os.environ.setdefault("SKYRL_THREADS", "1")

# The files that take longest (the CI log's --durations), longest first. `make pytest` hands
# whole files to two xdist workers in collection order (--no-loadscope-reorder; xdist's own
# order, most tests first, put these one-to-three-test files last, so one worker ran a long
# file alone at the end). Started first, the long files run beside each other and the many
# short files fill in behind them, so both workers finish at about the same time.
LONGEST_FIRST = (
    "tests/e2e/test_train_cli.py",
    "tests/trainers/test_async.py",
    "tests/trainers/test_distributed_learners.py",
    "tests/trainers/test_distributed_train.py",
    "tests/e2e/test_run_integrity.py",
    "tests/trainers/test_one_home_pin.py",
    "tests/trainers/test_refactor_pin.py",
    "tests/trainers/test_lora.py",
    "tests/e2e/test_algorithms_cli.py",
    "tests/benchmarks/test_scripts_run.py",
    "tests/e2e/test_learning.py",
    "tests/e2e/test_run_health.py",
    "tests/serve/test_lora_pin.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The LONGEST_FIRST files first, in that order; every file's tests stay together and in
    their own order, the other files keep theirs."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
    # SKYRL_THREADS for torch inside the test process too (learners and engines a test
    # builds itself), once, before any test: collection imported it
    torch = sys.modules.get("torch")
    if torch is not None:
        from agents.engines import torch_threads

        torch.set_num_threads(torch_threads(0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory):
    """A real Ray head on loopback, shared by every test that trains (`--ray-address`).

    Its servers listen on every interface whatever --node-ip-address says, so like the
    trainer's private cluster it requires a token; the `skyrl` commands of the session
    inherit it (RAY_AUTH_MODE/RAY_AUTH_TOKEN, as a user joining a secured cluster sets them).
    They also keep their workers warm on it (`SKYRL_REUSE_WORKERS=1`, trainers/warm.py): a
    run takes the worker process a finished run left instead of starting one, about 5 s of
    CPU less each (docs/benchmarks.md); tests/trainers/test_warm_workers.py checks what
    that changes.
    """
    port = _free_port()
    auth = pytest.MonkeyPatch()
    auth.setenv("RAY_AUTH_MODE", "token")
    auth.setenv("RAY_AUTH_TOKEN", secrets.token_urlsafe(32))
    auth.setenv("SKYRL_REUSE_WORKERS", "1")
    tmp = tmp_path_factory.mktemp("ray")
    # A short temp dir: Ray's unix sockets fail on long paths.
    temp_dir = Path("/tmp") / f"skyrl-ray-{os.getpid()}"
    log = open(tmp / "ray.log", "w")  # noqa: SIM115 - open for the cluster's lifetime
    proc = subprocess.Popen(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            # not 127.0.0.1: Ray rewrites it (and localhost) to the machine's interface
            # address, and the cluster's traffic would leave loopback
            "--node-ip-address=127.0.0.2",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"127.0.0.2:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.2", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((tmp / "ray.log").read_text()) from None
            time.sleep(0.5)
    time.sleep(2)
    yield address
    # A graceful `ray start --block` shutdown takes ~30 s; this cluster holds nothing worth
    # saving, so after a short grace period kill its process group and every process that
    # names its private temp dir (gcs, raylet, ...); workers exit when their raylet dies.
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        kill_cluster(temp_dir)
    auth.undo()


def kill_cluster(temp_dir: Path | str) -> None:
    """SIGKILL every process (gcs, raylets, workers) whose command line names this Ray
    cluster's private temp dir, and no other."""
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if pid.isdigit() and str(temp_dir).encode() in cmdline:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


def with_tiny(cache: Path) -> Path:
    """`cache`, a skyrl cache dir a test keeps apart from the real one (a fresh `HOME` or
    `SKYRL_CACHE_DIR`), holding a copy of the tiny model: built there it would cost the
    test's first `skyrl` process 8 CPU-s (docs/benchmarks.md). The copy comes from the
    session's own cache dir, where `resolve_model` builds it once."""
    from agents.models import resolve_model

    built = resolve_model("tiny", quiet=True)
    target = cache / "models" / built.name
    if not target.exists():
        shutil.copytree(built, target)
    return cache


def skyrl(*args: str, cwd: Path, timeout: float = 600, check: bool = True, env: dict | None = None):
    """Run the real `skyrl` console script; return the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [str(BIN / "skyrl"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"skyrl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@contextlib.contextmanager
def stand_in_openai(
    answer: Callable[[dict], str], seen: list[dict] | None = None, tokens: int = 7
) -> Iterator[str]:
    """A loopback OpenAI-compatible stand-in (no hosted model exists here): every chat
    completion is answered with `answer(request body)`; requests are appended to `seen`.
    Yields the base URL (`http://127.0.0.1:PORT/v1`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if seen is not None:
                seen.append({"path": self.path, **body})
            message = {"role": "assistant", "content": answer(body)}
            reply = {
                "choices": [{"message": message, "finish_reason": "stop"}],
                "usage": {"completion_tokens": tokens},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
