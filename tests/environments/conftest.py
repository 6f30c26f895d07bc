"""A throwaway PostgreSQL cluster for the SQL driver tests (`postgres` fixture).

initdb in a temp dir, `pg_ctl start` on a unix socket only (no TCP), trust auth for local
connections, stopped at the end of the session. initdb refuses root, so as root the cluster
runs as uid 65534 (nobody) through `setpriv`. Tests that need it skip with the reason when
no server can start (no postgresql package, no psycopg).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

NOBODY = 65534


@dataclass(frozen=True)
class Postgres:
    admin_dsn: str
    """A superuser: builds the bundled schemas."""
    reader_dsn: str
    """The read-only role `tasks.sql.materialise` created: what the environment gets."""
    socket_dir: str


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    return Path(dirs[-1]) if dirs else None


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]


def start_cluster() -> tuple[Postgres | None, str, object]:
    """(the cluster, why not, a stop function)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, "psycopg is not installed (pip install 'psycopg[binary]')", lambda: None
    bindir = _bindir()
    if bindir is None or not (bindir / "initdb").exists():
        return None, "no PostgreSQL server binaries (apt-get install postgresql)", lambda: None
    root = Path(tempfile.mkdtemp(prefix="skyrl-pg-", dir="/tmp"))  # short: socket paths
    data, sock = root / "data", root / "s"
    sock.mkdir()
    if os.geteuid() == 0:
        os.chown(root, NOBODY, NOBODY)
        os.chown(sock, NOBODY, NOBODY)
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C", "LC_ALL": "C"}
    run = lambda cmd: subprocess.run(  # noqa: E731
        _as_owner(cmd), env=env, cwd=root, capture_output=True, text=True, timeout=120
    )

    def stop() -> None:
        run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
        shutil.rmtree(root, ignore_errors=True)

    init = run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        return None, f"initdb failed: {(init.stderr or init.stdout).strip()[-300:]}", lambda: None
    opts = f"-c listen_addresses='' -c unix_socket_directories={sock} -c fsync=off"
    started = run(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "log"),
            "-w",
            "-o",
            opts,
            "start",
        ]
    )
    if started.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else started.stderr
        stop()
        return None, f"pg_ctl start failed: {log.strip()[-300:]}", lambda: None
    import psycopg

    with psycopg.connect(f"host={sock} user=postgres dbname=postgres", autocommit=True) as c:
        c.execute("CREATE DATABASE skyrl")
    admin = f"postgresql://postgres@/skyrl?host={sock}"
    from tasks.sql.materialise import materialise_postgres

    reader = materialise_postgres(admin)
    return Postgres(admin, reader, str(sock)), "", stop


@pytest.fixture(scope="session")
def postgres():
    """The throwaway cluster with the bundled suite materialised; skips with the reason where
    no server can start."""
    cluster, why, stop = start_cluster()
    if cluster is None:
        pytest.skip(f"no PostgreSQL server: {why}")
    try:
        yield cluster
    finally:
        stop()  # type: ignore[operator]
