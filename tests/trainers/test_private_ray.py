"""The private Ray cluster `skyrl train` starts accepts nothing from outside the machine
(issue 11, item 17).

The cluster is started exactly as the trainer starts it (`trainers.placement.start_ray(None)`,
with `ray` imported first, as `trainers.sync` does), in its own process. Its listening
sockets are read from /proc; then an outsider without the cluster's token tries what an
attacker would: join the cluster and run a task.

Every probe goes to loopback only. The servers bind every interface, so loopback reaches the
same sockets a neighbour on the network would; what they refuse there, they refuse from
outside. The outsider names the cluster and its own node as 127.0.0.2: Ray rewrites
127.0.0.1 and localhost (not the rest of 127/8) to the machine's interface address.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CLUSTER = """
import json, os, sys
import ray
from trainers.placement import start_ray

start_ray(None)

@ray.remote
def pid():
    return os.getpid()

ray.get([pid.remote() for _ in range(2)])  # workers listen too
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address}), flush=True)
sys.stdin.read()  # hold the cluster until the test closes stdin
ray.shutdown()
"""

ATTACK = """
import ray, sys
ray.init(address=sys.argv[1], _node_ip_address="127.0.0.2", logging_level="ERROR")

@ray.remote
def pwn(path):
    open(path, "w").write("ran on the cluster")

ray.get(pwn.remote(sys.argv[2]), timeout=30)
"""


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += parents.get(pid, [])
    return out


def _listening() -> dict[int, tuple[str, int]]:
    """socket inode -> (address, port) of every listening TCP socket on the machine."""
    out = {}
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)
            # /proc writes each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            out[int(fields[9])] = (socket.inet_ntop(family, raw), int(hex_port, 16))
    return out


def _sockets_of(pid: int, listening: dict[int, tuple[str, int]]) -> list[tuple[str, int]]:
    found = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inode = int(target[8:-1])
            if inode in listening:
                found.append(listening[inode])
    return found


def _auth_mode(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"RAY_AUTH_MODE="):
            return item.split(b"=", 1)[1].decode()
    return None


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


WILDCARD = ("0.0.0.0", "::")


def _loopback_host(address: str) -> str | None:
    """Where to reach a socket bound to `address` without leaving loopback: itself when it
    is a loopback address, 127.0.0.1 when it binds every interface, else None."""
    if address in WILDCARD:
        return "127.0.0.1"
    return address if ipaddress.ip_address(address).is_loopback else None


AUTH = (401, 403)


def _http_status(address: str, port: int) -> int | None:
    """The HTTP status a request without a token gets, asked on loopback; None for a socket
    loopback cannot reach, a server that does not speak HTTP/1 (gRPC) or no answer."""
    host = _loopback_host(address)
    if host is None:
        return None
    try:
        return urllib.request.urlopen(f"http://{host}:{port}/", timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError, http.client.HTTPException):
        return None


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), RAY_AUTH_MODE="disabled")  # what tests/conftest.py sets
    proc = subprocess.Popen(
        [sys.executable, "-c", CLUSTER],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    assert line, "the private cluster did not start"
    yield proc.pid, json.loads(line)["gcs"]
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_every_listener_is_loopback_or_needs_the_token(private_cluster):
    driver, _ = private_cluster
    listening = _listening()
    open_to_all = []
    seen = 0
    for pid in _descendants(driver):
        for address, port in _sockets_of(pid, listening):
            seen += 1
            if ipaddress.ip_address(address).is_loopback:
                continue
            # The driver sets RAY_AUTH_MODE in its own os.environ, which /proc does not show;
            # a long process title (setproctitle) can overwrite what /proc shows of the
            # environment, and then an HTTP server's answer without the token decides (asked
            # on loopback: a socket bound to one outside address counts as open).
            trusted = pid == driver or _auth_mode(pid) == "token"
            if not trusted and _http_status(address, port) not in AUTH:
                open_to_all.append((_name(pid), address, port, _auth_mode(pid)))
    assert seen >= 3, "found no Ray listeners to check"  # gcs, raylet, workers at least
    assert not open_to_all, f"listening without authentication: {open_to_all}"


def test_http_listeners_refuse_a_request_without_the_token(private_cluster):
    driver, _ = private_cluster
    listening = _listening()
    answered = {}
    for pid in _descendants(driver):
        for address, port in _sockets_of(pid, listening):
            answered[(_name(pid), address, port)] = _http_status(address, port)
    answered = {k: v for k, v in answered.items() if v is not None}
    assert answered, "found no HTTP listener (Ray's runtime env agent is one)"
    assert all(code in AUTH for code in answered.values()), answered


def test_an_outsider_cannot_join_and_run_code(private_cluster, tmp_path):
    _, gcs = private_cluster
    port = gcs.rsplit(":", 1)[1]
    marker = tmp_path / "pwned"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    attack = subprocess.run(
        [sys.executable, "-c", ATTACK, f"127.0.0.2:{port}", str(marker)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert not marker.exists(), "an outsider ran a task on the private cluster"
    assert attack.returncode != 0
    assert "auth" in attack.stderr.lower(), attack.stderr[-2000:]
