"""The bundled SQLite databases copied into DuckDB files and into PostgreSQL schemas.

The copy is table by table from the SQLite file (same rows, same order, column types mapped,
names in lower case on PostgreSQL), so a gold query returns the same rows on every driver
once sqlglot has translated it.

    python -m tasks.sql.materialise postgresql://ADMIN@HOST/DB [--reader skyrl_reader]

builds one schema per bundled database in DB (replacing what was there), creates a login
role that may only SELECT them, and prints the DSN to give `env.kwargs.dsn`. DuckDB files
need no command: `env.kwargs.dsn=duckdb:` builds them in the cache on first use.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tasks.sql.tables import SESSION_FUNCTIONS, sqlite_tables

READER = "skyrl_reader"
"""The read-only role `materialise_postgres` creates."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _pg_type(declared: str) -> str:
    t = declared.upper()
    if "INT" in t:
        return "BIGINT"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "DOUBLE PRECISION"
    if "BLOB" in t:
        return "BYTEA"
    return "TEXT"


def _duck_type(declared: str) -> str:
    return {"DOUBLE PRECISION": "DOUBLE", "BYTEA": "BLOB", "TEXT": "VARCHAR"}.get(
        _pg_type(declared), _pg_type(declared)
    )


def read_sqlite(path: Path) -> list[tuple[str, list[tuple[str, str, bool]], list[tuple]]]:
    """(table, [(column, declared type, primary key)], rows in rowid order) of a SQLite file."""
    with sqlite_tables(path) as (conn, names):
        out = []
        for name in names:
            if not _NAME.fullmatch(name):
                raise ValueError(f"table name {name!r} cannot be copied")
            cols = [(c[1], c[2], bool(c[5])) for c in conn.execute(f'PRAGMA table_info("{name}")')]
            rows = conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid').fetchall()
            out.append((name, cols, rows))
        return out


def _create(table: str, cols: list[tuple[str, str, bool]], typ: Any) -> str:
    keys = [c for c, _, pk in cols if pk]
    body = [f'"{c}" {typ(t)}' for c, t, _ in cols]
    if keys:
        body.append("PRIMARY KEY (" + ", ".join(f'"{k}"' for k in keys) + ")")
    return f'CREATE TABLE "{table}" (' + ", ".join(body) + ")"


def to_duckdb(sqlite_path: Path, out: Path) -> None:
    """Write a DuckDB copy of a SQLite file at `out`, atomically (temp file, then rename)."""
    import duckdb

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".duckdb", dir=out.parent)
    os.close(fd)
    os.unlink(tmp)  # duckdb creates the file itself
    try:
        conn = duckdb.connect(tmp)
        try:
            for table, cols, rows in read_sqlite(sqlite_path):
                conn.execute(_create(table, cols, _duck_type))
                if rows:
                    _insert_duckdb(conn, table, cols, rows)
            conn.execute("CHECKPOINT")
        finally:
            conn.close()
        os.replace(tmp, out)
    finally:
        for leftover in (tmp, tmp + ".wal"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _insert_duckdb(conn: Any, table: str, cols: list[tuple[str, str, bool]], rows: list) -> None:
    """Rows into a DuckDB table: through Arrow when pyarrow is there (100x faster than
    executemany), else row by row."""
    try:
        import pyarrow as pa
    except ImportError:
        marks = ", ".join("?" * len(cols))
        conn.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
        return
    types = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BLOB": pa.binary()}
    arrays = [
        pa.array([row[i] for row in rows], type=types.get(_duck_type(t), pa.string()))
        for i, (_, t, _) in enumerate(cols)
    ]
    source = pa.Table.from_arrays(arrays, names=[c for c, _, _ in cols])
    conn.register("skyrl_source", source)
    try:
        conn.execute(f'INSERT INTO "{table}" SELECT * FROM skyrl_source')
    finally:
        conn.unregister("skyrl_source")


def to_postgres(sqlite_path: Path, conn: Any, schema: str) -> None:
    """Replace `schema` in a PostgreSQL database (an open psycopg connection) with a copy of
    a SQLite file, in the caller's transaction."""
    from psycopg import sql

    if not _NAME.fullmatch(schema):
        raise ValueError(f"schema name {schema!r} is not a plain identifier")
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))
    for table, cols, rows in read_sqlite(sqlite_path):
        # PostgreSQL folds unquoted names to lower case, so a camelCase table or column
        # (`member.fullName`) is created in lower case, where an unquoted query finds it
        table = table.lower()
        cols = [(c.lower(), t, pk) for c, t, pk in cols]
        conn.execute(_create(table, cols, _pg_type))
        with conn.cursor().copy(f'COPY "{table}" FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row)


def reader_dsn(admin_dsn: str, reader: str, password: str | None) -> str:
    """The admin DSN with the reader's name (and password) instead, as a URL."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(admin_dsn)
    auth = quote(reader, safe="") + (":" + quote(password, safe="") if password else "")
    host = str(params.get("host") or "")
    query = []
    if host.startswith("/") or "," in host:
        query.append("host=" + quote(host, safe="/,"))
        host = ""
    port = str(params.get("port") or "")
    if port and not host:
        query.append("port=" + port)
    elif port:
        host += f":{port}"
    dbname = quote(str(params.get("dbname") or ""), safe="")
    return f"postgresql://{auth}@{host}/{dbname}" + ("?" + "&".join(query) if query else "")


def revoke_session_functions(conn: Any) -> None:
    """REVOKE EXECUTE on `SESSION_FUNCTIONS` and SELECT on pg_stat_activity from PUBLIC in
    the connection's database (superusers keep them; other roles of this database lose them
    too: cancel a query through the protocol, read activity as a superuser)."""
    from psycopg import sql

    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n "
        "ON n.oid = p.pronamespace WHERE n.nspname = 'pg_catalog' AND p.proname = ANY(%s)",
        (list(SESSION_FUNCTIONS),),
    ).fetchall()
    for (signature,) in rows:
        conn.execute(
            sql.SQL("REVOKE EXECUTE ON FUNCTION pg_catalog.{} FROM PUBLIC").format(
                sql.SQL(signature)
            )
        )
    conn.execute("REVOKE SELECT ON pg_catalog.pg_stat_activity FROM PUBLIC")


def materialise_postgres(
    admin_dsn: str, reader: str = READER, password: str | None = None, names: Any = None
) -> str:
    """Build every bundled database as a schema of the admin DSN's database, grant `reader`
    (created if missing: LOGIN, no other rights) SELECT on them and nothing else, and return
    the reader's DSN. The reader's sessions default to read-only with a statement timeout."""
    import psycopg
    from psycopg import sql

    from tasks import sql as sql_tasks

    if not _NAME.fullmatch(reader):
        raise ValueError(f"role name {reader!r} is not a plain identifier")
    role = sql.Identifier(reader)
    with psycopg.connect(admin_dsn) as conn:
        for name in names or sql_tasks.DATABASES:
            to_postgres(sql_tasks.database_path(name), conn, name)
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (reader,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        conn.execute(
            sql.SQL(
                "ALTER ROLE {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
            ).format(role)
        )
        if password:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(password)))
        for setting, value in (
            ("default_transaction_read_only", "on"),
            ("statement_timeout", "30s"),
            ("idle_in_transaction_session_timeout", "60s"),
            ("temp_file_limit", "256MB"),
            ("work_mem", "16MB"),
            # a backend whose client is gone (a worker killed at its time limit) stops
            ("client_connection_check_interval", "1s"),
        ):
            conn.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    role, sql.Identifier(setting), sql.Literal(value)
                )
            )
        dbname = conn.info.dbname
        conn.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(dbname), role)
        )
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
        revoke_session_functions(conn)
        for name in names or sql_tasks.DATABASES:
            schema = sql.Identifier(name)
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            conn.execute(
                sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(schema, role)
            )
    return reader_dsn(admin_dsn, reader, password)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tasks.sql.materialise",
        description="Build the bundled SQL databases in PostgreSQL and create a read-only role.",
    )
    parser.add_argument("dsn", help="an admin DSN, e.g. postgresql://postgres@localhost/skyrl")
    parser.add_argument("--reader", default=READER, help="the read-only role to create")
    parser.add_argument("--password", default=None, help="the read-only role's password")
    args = parser.parse_args(argv)
    try:
        print(materialise_postgres(args.dsn, args.reader, args.password))
    except Exception as e:  # noqa: BLE001 - one sentence for the user
        print(f"error: {(str(e).strip().splitlines() or [type(e).__name__])[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
