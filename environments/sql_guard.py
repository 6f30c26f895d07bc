"""The read-only query sandbox behind `skyrl/SQL-v0`: open a database, run one query safely.

Read-only, three levels deep: the connection is opened `mode=ro` (plus `query_only`);
`check_read_only` accepts exactly one SELECT-shaped statement (parsed by sqlglot); and an
sqlite authorizer denies everything but reads and ordinary functions (no ATTACH, PRAGMA,
writes or `load_extension`; `VACUUM INTO`, which `mode=ro` alone lets through, needs
ATTACH). The builtins that loop inside one C call (printf, trim, replace) are guarded.

Queries run in a worker process (`run_query`), never in the caller: a progress handler
stops ordinary queries at `time_limit_s`, but nothing inside sqlite reaches into one long C
call (`instr` of two large blobs ran 15 s against a 2 s limit, and `interrupt()` waits for
it too), so the caller kills the worker when its reply is late. The worker's address space
and sqlite heap are capped, sorts stay in memory, and a result is capped in bytes as well
as rows, so no query grows the host process by more than `MAX_RESULT_BYTES`. Every failure
is a `QueryError` whose message is fit to show the agent.

DuckDB and PostgreSQL (`environments.sql_drivers`) run in the same workers under the same
time kill, caps and statement check (parsed in their own dialect), each read-only by its own
means as well.

The environment itself (action grammar, grading, observations) lives in `environments.sql`.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import logging
import os
import re
import select
import sqlite3
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from environments.sql_drivers import Target, open_driver

# sqlglot logs a warning for every statement it falls back to parsing as a raw Command;
# a policy in training writes thousands of those, and we already reject them with a message.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

MAX_QUERY_CHARS = 10_000
"""Longer queries are refused before parsing (sqlglot needs ~0.5 s for 90 kB of SQL)."""
_SET_OPERATION = getattr(exp, "SetOperation", exp.Union)
# fmt: off
_FORBIDDEN_NODES = tuple(getattr(exp, name) for name in [
    "DDL", "DML", "Command", "Pragma", "Attach", "Detach", "Transaction", "Commit", "Rollback",
    "Alter", "Drop", "Create", "Insert", "Update", "Delete", "Merge", "Set", "Use", "Analyze",
] if hasattr(exp, name))
# fmt: on
_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_ALLOWED_ACTIONS.add(getattr(sqlite3, "SQLITE_RECURSIVE", 33))
_DENIED_FUNCTIONS = {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"}


class QueryError(ValueError):
    """A query was refused, failed, or ran out of time; the message is shown to the agent."""


# ---------------------------------------------------------------------------- statement check


def check_read_only(sql: str, dialect: str = "sqlite") -> None:
    """Level 2: exactly one SELECT (or WITH ... SELECT, set operation, VALUES) statement.

    Fails closed: text sqlglot cannot read is refused, not passed on. Sixty nested
    parentheses make sqlglot raise RecursionError, and `CREATE TEMP VIEW ... ((((...))))`
    then reached DuckDB, whose read-only databases still take temp objects.
    """
    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    except sqlglot.errors.ParseError as e:
        where = e.errors[0] if e.errors else {}
        near = str(where.get("highlight") or "").strip()[:40]
        raise QueryError(
            f"syntax error near {near!r} at line {where.get('line', '?')}, column "
            f"{where.get('col', '?')}"
            if near
            else "syntax error: the query is not one complete statement"
        ) from None
    except sqlglot.errors.TokenError:
        raise QueryError("syntax error: an unclosed quote or comment") from None
    except RecursionError:
        raise QueryError("the query is nested too deeply to check; use fewer parentheses") from None
    except Exception:  # noqa: BLE001 - anything else sqlglot raises: refused, not passed on
        raise QueryError("the query could not be read as one SQL statement") from None
    if not trees:
        raise QueryError("the query is empty")
    if len(trees) > 1:
        raise QueryError("only one statement per query is allowed")
    tree = trees[0]
    if not isinstance(tree, exp.Select | _SET_OPERATION | exp.Subquery | exp.Values):
        kind = str(tree.this).split()[0] if isinstance(tree, exp.Command) else tree.key
        raise QueryError(f"only SELECT queries are allowed, not {kind.upper()}")
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            raise QueryError(f"only SELECT queries are allowed; {node.key.upper()} is not")


# ---------------------------------------------------------------------------- sqlite


def _authorize(
    action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
) -> int:
    """Level 3: reads, selects and ordinary functions only."""
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


_PRINTF_WIDTH = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d*))?")
MAX_PRINTF_WIDTH = 1000
MAX_SCAN_COST = 20_000_000
"""Largest len(text) * len(characters or pattern) one trim/replace call may scan."""
MAX_VALUE_BYTES = 1_000_000
"""sqlite's limit on any string or blob (default 1 GB: `zeroblob(1e9)` would just allocate)."""


class _Connection(sqlite3.Connection):
    """A connection that remembers why a guarded function refused its arguments."""

    refusal = ""


def _length(value: Any) -> int:
    return 0 if value is None else len(value) if isinstance(value, str | bytes) else len(str(value))


def _install_guards(conn: _Connection) -> None:
    """Checked versions of the builtins that can run for minutes inside one C call.

    Neither the progress handler nor sqlite3_interrupt reaches into a function call:
    `printf('%.*c', 2000000000, 'x')` loops for half a minute (sqlite 3.40) and
    `ltrim(x, y)` scans len(x) * len(y) (two 10 kB strings: ~1 s). Each replacement checks
    its arguments, then runs the real builtin on a private in-memory database.
    """
    helper = sqlite3.connect(":memory:", check_same_thread=False)
    helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)

    def refuse(message: str) -> None:
        conn.refusal = message
        raise ValueError(message)

    def check_printf(fmt: Any = None, *args: Any) -> None:
        text = fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else str(fmt)
        for width, precision in _PRINTF_WIDTH.findall(text):
            if (
                "*" in (width, precision)
                or max(int(width or 0), int(precision or 0)) > MAX_PRINTF_WIDTH
            ):
                refuse(f"printf: '*' and widths above {MAX_PRINTF_WIDTH} are not allowed here")

    def check_scan(text: Any = None, chars: Any = " ", *rest: Any) -> None:
        if _length(text) * _length(chars) > MAX_SCAN_COST:
            refuse("trim/replace: the text and pattern are too long together")

    def guarded(name: str, check: Any) -> Any:
        def call(*args: Any) -> Any:
            check(*args)
            try:
                marks = ", ".join("?" * len(args))
                return helper.execute(f"SELECT {name}({marks})", args).fetchone()[0]
            except sqlite3.Error as e:
                refuse(str(e))

        return call

    for name in ("printf", "format"):
        conn.create_function(name, -1, guarded(name, check_printf), deterministic=True)
    for name in ("trim", "ltrim", "rtrim", "replace"):
        conn.create_function(name, -1, guarded(name, check_scan), deterministic=True)


def open_read_only(path: Path, heap_limit_bytes: int = 0) -> sqlite3.Connection:
    """Level 1 (`mode=ro`, `query_only`) and level 3 (the authorizer), plus size limits.

    `heap_limit_bytes` caps sqlite's heap for the whole process (the query worker sets it)."""
    # check_same_thread=False: async rollouts may step one env from several pool threads
    # (never at once); the env owns its connection.
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=ro",
        uri=True,
        check_same_thread=False,
        isolation_level=None,
        factory=_Connection,
    )
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA temp_store = MEMORY")  # sorts count against the heap, not the disk
    if heap_limit_bytes:
        conn.execute(f"PRAGMA hard_heap_limit = {int(heap_limit_bytes)}")
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # a bad byte is not a crash
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_QUERY_CHARS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 200)  # LIKE scans text x pattern
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    _install_guards(conn)
    conn.set_authorizer(_authorize)
    return conn


# ---------------------------------------------------------------------------- queries

MAX_RESULT_BYTES = 16_000_000
"""Largest result a query may return, measured as the JSON the worker sends back."""
KILL_GRACE_S = 0.5
"""A worker whose reply is this late after the time limit is killed (one long C call)."""
WORKER_MEMORY_BYTES = 1 << 30
"""Address-space limit of a query worker process."""
WORKER_HEAP_BYTES = 256_000_000
"""sqlite's heap limit in a worker: a sort or a big value fails with "out of memory" first."""
MAX_IDLE_WORKERS = 8
"""Idle workers kept per database for the next query (episodes come and go quickly)."""
MAX_IDLE_TOTAL = 16
"""Idle workers kept over all databases; the least recently used database's go first, so a
run or a test session over many databases does not keep a process per database."""
_START_TIMEOUT_S = 60.0
_WORKER_ENV = ("PATH", "PYTHONPATH", "TMPDIR", "LANG", "LC_ALL", "HOME", "PGPASSFILE", "PGPASSWORD")
_MAX_ERROR_CHARS = 500


def _blob(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$blob": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot send a {type(value).__name__}")


def _unblob(obj: dict[str, Any]) -> Any:
    return base64.b64decode(obj["$blob"]) if set(obj) == {"$blob"} else obj


def encode_rows(columns: list[str], rows: Any, max_rows: int, max_bytes: int) -> bytes:
    """The worker's reply as JSON, rows taken one at a time and counted in bytes, so a few
    huge rows stop as early as many small ones."""
    out: list[str] = []
    size, more = 0, False
    for row in rows:
        if len(out) == max_rows:
            more = True
            break
        out.append(json.dumps(row, default=_blob))
        size += len(out[-1]) + 1
        if size > max_bytes:
            raise QueryError(f"the result is larger than {max_bytes:,} bytes; select less")
    head = json.dumps({"columns": columns, "more": more})
    return (head[:-1] + ', "rows": [' + ",".join(out) + "]}").encode("ascii")


def _execute(
    conn: sqlite3.Connection, sql: str, max_rows: int, max_bytes: int, time_limit_s: float
) -> bytes:
    """In the worker: run one query on sqlite; the reply as JSON (`encode_rows`)."""
    deadline = time.monotonic() + time_limit_s
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    cursor = None
    try:
        cursor = conn.execute(sql)
        columns = [d[0] for d in cursor.description or ()]
        return encode_rows(columns, cursor, max_rows, max_bytes)
    except (sqlite3.Error, ValueError, OverflowError, MemoryError) as e:
        if isinstance(e, QueryError):
            raise
        if time.monotonic() > deadline:
            raise QueryError(
                f"the query was stopped at the {time_limit_s:g} s time limit"
            ) from None
        if "user-defined function raised exception" in str(e):  # only the guards are ours
            raise QueryError(getattr(conn, "refusal", "") or str(e)) from None
        if "not authorized" in str(e) or "authorization denied" in str(e):
            raise QueryError("not allowed: the database is read-only (SELECT only)") from None
        if isinstance(e, MemoryError) or "out of memory" in str(e):
            raise QueryError("the query ran out of memory") from None
        raise QueryError(f"sqlite error: {e}") from None
    finally:
        if cursor is not None:
            cursor.close()
        conn.set_progress_handler(None, 0)


def _serve(target_json: str) -> None:
    """The worker process: open the target, then answer one JSON request per stdin line."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    out = sys.stdout.buffer
    target = Target.from_json(target_json)

    def send(data: bytes) -> None:
        out.write(len(data).to_bytes(8, "big") + data)
        out.flush()

    try:
        if target.kind == "sqlite":
            conn = open_read_only(Path(target.location), heap_limit_bytes=WORKER_HEAP_BYTES)
        else:
            driver = open_driver(target)
    except QueryError as e:
        send(json.dumps({"error": str(e)[:_MAX_ERROR_CHARS]}).encode())
        return
    except Exception as e:  # noqa: BLE001 - any driver's connection error, shown in one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        send(
            json.dumps({"error": f"cannot open the database: {first}"[:_MAX_ERROR_CHARS]}).encode()
        )
        return
    send(b"{}")
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            sql, limit = request["sql"], request["time_limit_s"]
            if target.kind == "sqlite":
                reply = _execute(conn, sql, request["max_rows"], request["max_bytes"], limit)
            else:
                sink = functools.partial(
                    encode_rows, max_rows=request["max_rows"], max_bytes=request["max_bytes"]
                )
                reply = driver.execute(sql, limit, sink)
        except QueryError as e:
            reply = json.dumps({"error": str(e)[:_MAX_ERROR_CHARS]}).encode()
        send(reply)


class _Late(Exception):
    """The worker did not answer before the deadline."""


class _Worker:
    """A child process that owns one read-only connection to one database."""

    def __init__(self, target: Target) -> None:
        self.version = target.version()
        self.owner = os.getpid()
        code = "import sys; sys.path.insert(0, sys.argv[1]); import environments.sql_guard as g; g._serve(sys.argv[2])"  # noqa: E501
        # start_new_session: a Ctrl-C to the run does not kill a worker mid-episode; a worker
        # exits when its stdin closes, so it never outlives the process that started it.
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(Path(__file__).resolve().parents[1]),
                target.to_json(),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={k: os.environ[k] for k in _WORKER_ENV if k in os.environ},
        )
        try:
            hello = self._reply(time.monotonic() + _START_TIMEOUT_S, 64 * 1024)
        except (_Late, EOFError, OSError, ValueError):
            self.kill()
            raise QueryError("the database process did not start") from None
        if "error" in hello:
            self.kill()
            raise QueryError(hello["error"])

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd, data = self.proc.stdout.fileno(), bytearray()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise _Late
            chunk = os.read(fd, min(n - len(data), 1 << 20))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    def _reply(self, deadline: float, limit: int) -> dict[str, Any]:
        """One length-prefixed JSON reply; a length above `limit` is refused unread."""
        n = int.from_bytes(self._read(8, deadline), "big")
        if n > limit:
            raise ValueError(f"a reply of {n} bytes")
        reply = json.loads(self._read(n, deadline), object_hook=_unblob)
        if not isinstance(reply, dict):
            raise ValueError("a reply that is not an object")
        return reply

    def query(self, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        return self._reply(deadline, request["max_bytes"] + 64 * 1024)

    def usable(self, target: Target) -> bool:
        try:
            same = target.version() == self.version
        except OSError:
            return False
        return same and self.owner == os.getpid() and self.proc.poll() is None

    def kill(self) -> None:
        if self.owner != os.getpid():
            return  # a forked copy of this object; the process belongs to the parent
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


_IDLE: OrderedDict[Target, list[_Worker]] = OrderedDict()  # least recently used first
_IDLE_LOCK = threading.Lock()


def _checkout(target: Target) -> _Worker:
    with _IDLE_LOCK:
        idle = _IDLE.get(target, [])
        while idle:
            worker = idle.pop()
            if worker.usable(target):
                return worker
            worker.kill()
    return _Worker(target)


def _checkin(target: Target, worker: _Worker) -> None:
    evicted = []
    with _IDLE_LOCK:
        idle = _IDLE.setdefault(target, [])
        _IDLE.move_to_end(target)
        if len(idle) < MAX_IDLE_WORKERS:
            idle.append(worker)
        else:
            evicted.append(worker)
        for empty in [t for t, ws in _IDLE.items() if not ws]:  # checked-out databases
            del _IDLE[empty]
        while sum(len(ws) for ws in _IDLE.values()) > MAX_IDLE_TOTAL:
            oldest = next(iter(_IDLE))
            evicted.append(_IDLE[oldest].pop(0))
            if not _IDLE[oldest]:
                del _IDLE[oldest]
    for w in evicted:
        w.kill()


@atexit.register
def close_workers() -> None:
    """End every idle query worker (busy ones end when their query does)."""
    with _IDLE_LOCK:
        workers = [w for idle in _IDLE.values() for w in idle]
        _IDLE.clear()
    for worker in workers:
        worker.kill()


def run_query(
    where: Path | Target,
    sql: str,
    max_rows: int,
    time_limit_s: float,
    max_bytes: int = MAX_RESULT_BYTES,
) -> tuple[list[str], list[tuple], bool]:
    """Run one read-only query on a database (a SQLite path or any `Target`) in a worker
    process: (column names, at most max_rows rows, whether more exist)."""
    target = where if isinstance(where, Target) else Target("sqlite", str(Path(where).resolve()))
    if len(sql) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(sql)} characters; the limit is {MAX_QUERY_CHARS}")
    check_read_only(sql, target.dialect)
    worker = _checkout(target)
    request = {"sql": sql, "max_rows": max_rows, "max_bytes": max_bytes}
    request["time_limit_s"] = time_limit_s
    try:
        reply = worker.query(request, time.monotonic() + time_limit_s + KILL_GRACE_S)
    except _Late:
        worker.kill()
        raise QueryError(f"the query was stopped at the {time_limit_s:g} s time limit") from None
    except (EOFError, OSError, ValueError):  # killed by its memory limit, or a broken reply
        worker.kill()
        raise QueryError("the query ran out of memory") from None
    _checkin(target, worker)
    if "error" in reply:
        raise QueryError(str(reply["error"]))
    return reply["columns"], [tuple(row) for row in reply["rows"]], bool(reply["more"])
