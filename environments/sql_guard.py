"""The read-only query sandbox behind `skyrl/SQL-v0`: open a database, run one query safely.

Read-only, three levels deep: the connection is opened `mode=ro` (plus `query_only`);
`check_read_only` accepts exactly one SELECT-shaped statement (parsed by sqlglot); and an
sqlite authorizer denies everything but reads and ordinary functions (no ATTACH, PRAGMA,
writes or `load_extension`; `VACUUM INTO`, which `mode=ro` alone lets through, needs
ATTACH). A progress handler stops any query after `time_limit_s` of wall time; the few
builtins that can loop inside one C call, out of its reach (printf, trim, replace, long
LIKE patterns), are guarded. At most `max_rows + 1` rows are fetched, and every failure is
a `QueryError` whose message is fit to show the agent.

The environment itself (action grammar, grading, observations) lives in `environments.sql`.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

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


def check_read_only(sql: str) -> None:
    """Level 2: exactly one SELECT (or WITH ... SELECT, set operation, VALUES) statement.

    Text sqlglot cannot parse goes on to sqlite, whose syntax error is the clearer message;
    levels 1 and 3 still hold for it.
    """
    try:
        trees = [t for t in sqlglot.parse(sql, read="sqlite") if t is not None]
    except Exception:  # sqlglot.ParseError, TokenError, RecursionError on deep nesting
        return
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


def open_read_only(path: Path) -> sqlite3.Connection:
    """Level 1 (`mode=ro`, `query_only`) and level 3 (the authorizer), plus size limits."""
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
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # a bad byte is not a crash
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_QUERY_CHARS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 200)  # LIKE scans text x pattern
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    _install_guards(conn)
    conn.set_authorizer(_authorize)
    return conn


def run_query(
    conn: sqlite3.Connection, sql: str, max_rows: int, time_limit_s: float
) -> tuple[list[str], list[tuple], bool]:
    """Run one read-only query: (column names, at most max_rows rows, whether more exist)."""
    if len(sql) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(sql)} characters; the limit is {MAX_QUERY_CHARS}")
    check_read_only(sql)
    deadline = time.monotonic() + time_limit_s
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    cursor = None
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchmany(max_rows + 1)
        columns = [d[0] for d in cursor.description or ()]
    except (sqlite3.Error, ValueError, OverflowError, MemoryError) as e:
        if time.monotonic() > deadline:
            raise QueryError(
                f"the query was stopped at the {time_limit_s:g} s time limit"
            ) from None
        if "user-defined function raised exception" in str(e):  # only the guards are ours
            raise QueryError(getattr(conn, "refusal", "") or str(e)) from None
        if "not authorized" in str(e) or "authorization denied" in str(e):
            raise QueryError("not allowed: the database is read-only (SELECT only)") from None
        raise QueryError(f"sqlite error: {e}") from None
    finally:
        if cursor is not None:
            cursor.close()
        conn.set_progress_handler(None, 0)
    return columns, rows[:max_rows], len(rows) > max_rows
