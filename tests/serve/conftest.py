"""`skyrl serve --model tiny` as a real subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import with_tiny

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running `skyrl serve`."""

    url: str
    """http://127.0.0.1:PORT"""
    state_dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(state_dir: Path, port: int | None = None, *extra: str) -> Server:
    """Start `skyrl serve --model tiny` and wait until it answers /health."""
    port = port or free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir.parent / f"serve-{port}-{time.time_ns()}.log"
    env = {**os.environ, "HOME": str(state_dir.parent), "TINKER_TELEMETRY": "0"}
    with_tiny(state_dir.parent / ".cache" / "skyrl")
    cmd = [
        str(BIN / "skyrl"),
        "serve",
        "--model",
        "tiny",
        "--port",
        str(port),
        "--state-dir",
        str(state_dir),
        "--threads",
        "2",
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"skyrl serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return Server(url, state_dir, port, proc, log)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"skyrl serve did not start: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for every test of tests/serve that needs no special flags."""
    srv = start_server(tmp_path_factory.mktemp("serve") / "state")
    yield srv
    srv.stop()
