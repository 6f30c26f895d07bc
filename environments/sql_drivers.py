"""The database drivers behind `skyrl/SQL-v0`: SQLite, DuckDB and PostgreSQL.

A `Target` names one database: a SQLite file, a DuckDB file, or a schema in a PostgreSQL
database. `resolve_target` picks it from a task's `metadata.database` (a bundled name, a file,
or a `duckdb:`/`postgresql://` DSN) and the environment's `dsn` (where bundled names live).

Each driver opens its read-only connection inside the query worker (`sql_guard._serve`) and
runs one query at a time there, so the worker's time kill and memory caps hold for all three:

- SQLite: `sql_guard.open_read_only` (`mode=ro`, `query_only`, authorizer, guarded builtins).
- DuckDB: `read_only=True`, no external access (files, extensions, ATTACH), configuration
  locked, one thread, a memory limit; `interrupt()` at the time limit. Each query runs on
  a connection of its own, closed after it: a read-only DuckDB still has a writable temp
  catalog (and variables, a search path), and nothing left there outlives the query.
- PostgreSQL: a role that is not a superuser and may not run `set_config`, read other
  sessions' activity or signal them (refused otherwise; `python -m tasks.sql.materialise`
  revokes those), every query in its own `READ ONLY` transaction, rolled back, then
  `DISCARD ALL`. One deadline bounds the whole read (every FETCH of the server-side cursor):
  a watchdog cancels the query at the limit, the caller kills the worker soon after, and
  `client_connection_check_interval` makes the server end a backend whose client is gone.

Every driver returns rows in one format (`plain`): int, float, str, bytes or None.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlglot

from tasks.sql.tables import SESSION_FUNCTIONS
from tasks.task import Task

KINDS = ("sqlite", "duckdb", "postgresql")
DIALECTS = {"sqlite": "sqlite", "duckdb": "duckdb", "postgresql": "postgres"}
"""sqlglot's name for each driver's SQL dialect."""
LABELS = {"sqlite": "SQLite", "duckdb": "DuckDB", "postgresql": "PostgreSQL"}
MEMORY_LIMIT = "256MB"
"""DuckDB's memory limit in a worker (the worker's address space is capped as well)."""
_PG_PREFIXES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class Target:
    """One database a query runs on."""

    kind: str
    """`sqlite`, `duckdb` or `postgresql`."""
    location: str
    """The file (SQLite, DuckDB) or the connection string (PostgreSQL)."""
    schema: str | None = None
    """PostgreSQL only: the schema that holds the tables (the bundled databases live in one
    schema each); None keeps the role's search_path."""

    @property
    def dialect(self) -> str:
        return DIALECTS[self.kind]

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def is_file(self) -> bool:
        return self.kind != "postgresql"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> Target:
        return Target(**json.loads(text))

    def version(self) -> tuple[int, ...]:
        """Changes when the database file is replaced or written (a server has none)."""
        if not self.is_file:
            return ()
        stat = Path(self.location).stat()
        return (stat.st_ino, stat.st_mtime_ns)

    def describe(self) -> str:
        """For messages: the file, or the server without its password."""
        if self.is_file:
            return self.location
        where = re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", self.location)
        return where + (f" (schema {self.schema})" if self.schema else "")


def is_dsn(text: str) -> bool:
    return text.startswith(("sqlite:", "duckdb:", *_PG_PREFIXES))


def resolve_target(database: str, dsn: str | None = None) -> Target:
    """The Target for a task's `database` under the environment's `dsn`.

    `database` is a bundled name, a SQLite file, or a DSN of its own (`duckdb:/x.duckdb`,
    `postgresql://...`, `sqlite:/x.sqlite`). `dsn` says where bundled names live: `sqlite:`
    (the default), `duckdb:` or `duckdb:<folder>`, or a PostgreSQL DSN whose database holds
    one schema per bundled database. ValueError (one sentence) for anything else."""
    from tasks import sql as sql_tasks

    if database.startswith("sqlite:"):
        return Target("sqlite", str(Path(database[7:]).expanduser().resolve()))
    if database.startswith("duckdb:"):
        path = Path(database[7:]).expanduser()
        if not path.is_file():
            raise ValueError(f"the DuckDB file {path} does not exist")
        return Target("duckdb", str(path.resolve()))
    if database.startswith(_PG_PREFIXES):
        return Target("postgresql", database)
    bundled = database in sql_tasks.DATABASES
    if dsn in ("duckdb", "sqlite"):
        dsn += ":"
    if not dsn or dsn == "sqlite:":
        return Target("sqlite", str(Path(sql_tasks.database_path(database)).resolve()))
    if not bundled:
        raise ValueError(
            f"the database {database!r} is not a bundled one ({', '.join(sql_tasks.DATABASES)}): "
            "with env.kwargs.dsn set, name a task's own database as a DSN (duckdb:FILE or postgresql://...)"
        )
    if dsn.startswith("duckdb:"):
        folder = Path(dsn[7:]).expanduser() if dsn[7:] else None
        return Target("duckdb", str(sql_tasks.duckdb_path(database, folder).resolve()))
    if dsn.startswith(_PG_PREFIXES):
        return Target("postgresql", dsn, schema=database)
    raise ValueError(
        f"env.kwargs.dsn {dsn!r} is not understood; accepted: sqlite:, duckdb:[FOLDER], "
        "postgresql://USER@HOST/DB"
    )


def check_dsn(dsn: Any) -> str | None:
    """The environment's `dsn` knob, normalised (`duckdb` -> `duckdb:`; `duckdb:` read as
    YAML's one-key mapping); ValueError (one sentence) for one that names no driver."""
    if isinstance(dsn, dict) and len(dsn) == 1 and None in dsn.values():
        dsn = f"{next(iter(dsn))}:"  # `--set env.kwargs.dsn=duckdb:` read as YAML
    if dsn in ("sqlite", "duckdb"):
        dsn = f"{dsn}:"
    if dsn is not None and (not isinstance(dsn, str) or not is_dsn(dsn)):
        raise ValueError(
            f"dsn {dsn!r} is not understood; accepted: sqlite:, duckdb:[FOLDER], "
            "postgresql://USER@HOST/DB"
        )
    return dsn


def gold_sql(task: Task, target: Target) -> str:
    """The task's gold query in the target's dialect: transpiled by sqlglot from the task's
    `metadata.dialect` (default `sqlite`, the bundled suite's) when the two differ."""
    source = str(task.metadata.get("dialect") or "sqlite")
    answer = str(task.answer).strip()
    if source == target.dialect:
        return answer
    try:
        out = sqlglot.transpile(answer, read=source, write=target.dialect)
    except Exception as e:  # ParseError, UnsupportedError, TokenError
        raise ValueError(
            f"task {task.id!r}: the gold query cannot be translated from {source} to "
            f"{target.dialect} ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    if len(out) != 1:
        raise ValueError(f"task {task.id!r}: the gold query must be one statement")
    return out[0]


def plain(value: Any) -> Any:
    """One observation format for every driver: int, float, str, bytes or None."""
    if value is None or isinstance(value, int | float | str | bytes):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return float(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, datetime.date | datetime.time):
        return (
            value.isoformat(sep=" ") if isinstance(value, datetime.datetime) else value.isoformat()
        )
    return str(value)


# ---------------------------------------------------------------------------- in the worker

RowSink = Callable[[list[str], Iterable[tuple]], bytes]
"""`sql_guard.encode_rows` bound to the request's row and byte limits."""


class DuckDBDriver:
    """A read-only DuckDB connection (in a query worker)."""

    def __init__(self, target: Target) -> None:
        import duckdb

        self.error = duckdb.Error
        self.db = duckdb.connect(
            target.location,
            read_only=True,
            config={
                "enable_external_access": False,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "threads": 1,  # also makes float sums deterministic
                "memory_limit": MEMORY_LIMIT,
                "max_temp_directory_size": "0KB",
                "lock_configuration": True,
            },
        )

    def execute(self, sql: str, time_limit_s: float, sink: RowSink) -> bytes:
        from environments.sql_guard import QueryError

        # cursor(): a new connection to the open database, with its own temp catalog,
        # variables and settings; closed below, so an episode's CREATE TEMP VIEW books (were
        # it to pass the statement check) cannot shadow `books` for the next query or gold.
        conn = self.db.cursor()
        timer = threading.Timer(time_limit_s, conn.interrupt)
        deadline = time.monotonic() + time_limit_s
        timer.start()
        try:
            cursor = conn.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            rows = iter(lambda: cursor.fetchone(), None)
            return sink(columns, (tuple(plain(v) for v in row) for row in rows))
        except QueryError:
            raise
        except (self.error, ValueError, OverflowError, MemoryError, RuntimeError) as e:
            if time.monotonic() >= deadline or "INTERRUPT" in str(e).upper():
                raise QueryError(
                    f"the query was stopped at the {time_limit_s:g} s time limit"
                ) from None
            if "read-only" in str(e).lower() or "external access" in str(e).lower():
                raise QueryError("not allowed: the database is read-only (SELECT only)") from None
            if isinstance(e, MemoryError) or "out of memory" in str(e).lower():
                raise QueryError("the query ran out of memory") from None
            raise QueryError(f"duckdb error: {_first_line(e)}") from None
        finally:
            timer.cancel()
            conn.close()


class PostgresDriver:
    """A PostgreSQL connection whose every query is a rolled-back READ ONLY transaction."""

    def __init__(self, target: Target) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        from environments.sql_guard import QueryError

        self.psycopg = psycopg
        options = conninfo_to_dict(target.location).get("options") or ""
        options = (
            f"{options} -c default_transaction_read_only=on -c client_connection_check_interval=1000"
        ).strip()
        self.conn = psycopg.connect(
            make_conninfo(target.location, options=options, connect_timeout="10"),
            autocommit=True,
        )
        self.conn.prepare_threshold = None  # DISCARD ALL drops prepared statements
        row = self.conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if row is None or row[0]:
            raise QueryError(
                "refusing to run queries as a PostgreSQL superuser; connect as a role that "
                "may only SELECT (python -m tasks.sql.materialise creates one)"
            )
        allowed = self.conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'pg_catalog' AND p.proname = ANY(%s) "
            "AND has_function_privilege(p.oid, 'EXECUTE') "
            "UNION ALL SELECT 'pg_stat_activity' "
            "WHERE has_table_privilege('pg_catalog.pg_stat_activity', 'SELECT')",
            (list(SESSION_FUNCTIONS),),
        ).fetchall()
        if allowed:
            raise QueryError(
                f"the PostgreSQL role may run {', '.join(sorted({r[0] for r in allowed}))}, "
                "so a query could lift its time limit or reach other sessions; rerun "
                "python -m tasks.sql.materialise on the database (it revokes them)"
            )
        self.schema = target.schema
        if self.schema is not None:
            found = self.conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                (self.schema,),
            ).fetchone()
            if found is None:
                raise QueryError(
                    f"the schema {self.schema!r} is not in {target.describe()}; build it with "
                    "python -m tasks.sql.materialise"
                )

    def execute(self, sql: str, time_limit_s: float, sink: RowSink) -> bytes:
        from psycopg import sql as pgsql

        from environments.sql_guard import QueryError

        conn = self.conn
        # One deadline for the whole read: statement_timeout restarts at every FETCH. The
        # watchdog may fire just as the statement_timeout ends the query; the lock and flag
        # keep its cancel from landing on what this connection runs next (the next episode).
        finished = threading.Event()
        stopping = threading.Lock()

        def stop() -> None:
            with stopping:
                if not finished.is_set():
                    conn.cancel_safe()

        watchdog = threading.Timer(time_limit_s, stop)
        deadline = time.monotonic() + time_limit_s
        watchdog.start()
        try:
            conn.execute("BEGIN READ ONLY")
            # SET LOCAL: a rolled-back transaction takes these (and any set_config) with it.
            conn.execute(f"SET LOCAL statement_timeout = {max(1, int(time_limit_s * 1000))}")
            conn.execute("SET LOCAL idle_in_transaction_session_timeout = 60000")
            if self.schema is not None:
                conn.execute(
                    pgsql.SQL("SET LOCAL search_path = {}").format(pgsql.Identifier(self.schema))
                )
            # A server-side cursor: rows arrive in batches, so the byte cap stops a huge result.
            with conn.cursor(name="skyrl_query") as cursor:
                cursor.itersize = 64
                cursor.execute(sql)  # type: ignore[arg-type]  # a checked SELECT
                columns = [d.name for d in cursor.description or ()]
                return sink(columns, (tuple(plain(v) for v in row) for row in cursor))
        except QueryError:
            raise
        except self.psycopg.Error as e:
            text = _first_line(e)
            if "statement timeout" in text or time.monotonic() >= deadline:
                raise QueryError(
                    f"the query was stopped at the {time_limit_s:g} s time limit"
                ) from None
            if "read-only transaction" in text or "permission denied" in text:
                raise QueryError("not allowed: the database is read-only (SELECT only)") from None
            if "out of memory" in text:
                raise QueryError("the query ran out of memory") from None
            raise QueryError(f"postgresql error: {text}") from None
        finally:
            watchdog.cancel()
            with stopping:  # a cancel under way is delivered before the rollback, none after
                finished.set()
            try:
                conn.execute("ROLLBACK")
                conn.execute("DISCARD ALL")  # session locks, prepared plans, settings
            except self.psycopg.Error:
                pass


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def open_driver(target: Target) -> DuckDBDriver | PostgresDriver:
    """The non-SQLite driver for a target (SQLite stays in `sql_guard`)."""
    if target.kind == "duckdb":
        return DuckDBDriver(target)
    if target.kind == "postgresql":
        return PostgresDriver(target)
    raise ValueError(f"no driver for {target.kind!r}")


def cache_key(target: Target) -> str:
    """A short stable name for a target (file names, logs)."""
    return hashlib.sha256(target.to_json().encode()).hexdigest()[:16]
