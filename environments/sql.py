"""`skyrl/SQL-v0`: answer a question about a database with one SELECT query.

This module owns the environment: the action grammar (`parse_action`), the episode, the
`component_f1` shaping, the gold-result cache and the observations (`format_table`). The
grading rules (Spider's, BIRD's) are `environments.sql_grade`; the drivers (SQLite, DuckDB,
PostgreSQL) and where a task's database lives are `environments.sql_drivers`; running a query
safely (read-only connection, statement check, time kill, caps) is `environments.sql_guard`.
Their public names are re-exported here.

Action grammar (the model's text; `stop_strings` end generation at a closing tag):

    <sql>SELECT ...</sql>            run a read-only query; the observation is the result table
    <solution>SELECT ...</solution>  submit the answer; ends the episode and grades it

Tag rule: the FIRST opening `<sql>` or `<solution>` in the text is the action; text before
it (reasoning) and after its closing tag is ignored. The first tag is what the agent meant
when it stopped at the closing tag's stop string. An opening tag with no closing tag (the
model ran out of tokens), a tag inside the body (nested or mismatched tags) or an empty body
is malformed: an error observation, reward 0, and the turn is spent.

Rewards: `<solution>` gives 1.0 when its result matches the gold query's result under the
`grader` (Spider's test-suite rule by default, BIRD's set rule), else 0.0 (a query that fails to run scores 0.0
too). Exploring and malformed turns give 0.0. Running out of turns without a `<solution>`
truncates the episode with reward `-format_penalty`. Every failure is an observation, never
an exception.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import sqlglot
from sqlglot import exp

from environments import text_env
from environments.spaces import ActionError
from environments.sql_drivers import Target, resolve_target, sqlite_tables
from environments.sql_grade import (
    MAX_COLUMN_PERMUTATIONS,
    check_grader,
    execution_match,
    gold_order_matters,
    postprocess,
    remove_distinct,
)
from environments.sql_guard import QueryError, check_read_only, open_read_only, run_query
from tasks.task import Task

__all__ = [
    "ActionError",
    "QueryError",
    "SQLEnv",
    "check_read_only",
    "execution_match",
    "format_table",
    "gold_order_matters",
    "gold_result",
    "open_read_only",
    "parse_action",
    "resolve_database",
    "resolve_target",
    "Target",
    "MAX_COLUMN_PERMUTATIONS",
    "query_components",
    "component_f1",
    "run_query",
]

MAX_OBSERVATION_CHARS = 1_000_000
"""Upper bound of the observation space; step observations are capped by `max_obs_chars`."""
GRADE_MAX_ROWS = 100_000
"""A gold or submitted result larger than this cannot be graded."""
GOLD_TIME_FACTOR = 10
"""The gold query gets this many times the per-query time limit."""
MAX_CELL_CHARS = 80
GRAMMAR = "Use <sql>SELECT ...</sql> to run a query or <solution>SELECT ...</solution> to answer."

TAGS = text_env.Tags("sql", "solution")


# ---------------------------------------------------------------------------- parsing


def parse_action(text: str) -> tuple[str, str]:
    """Return (tag, body) of the first `<sql>` / `<solution>` tag; ActionError if malformed."""
    return TAGS.parse(text)


# ---------------------------------------------------------------------------- grading


# Clauses, aggregates and operators that shape a query's meaning, named the same in any alias.
_CLAUSES = {
    exp.Where: "where",
    exp.Group: "group by",
    exp.Having: "having",
    exp.Order: "order by",
    exp.Limit: "limit",
    exp.Join: "join",
    exp.Distinct: "distinct",
    exp.Subquery: "subquery",
    exp.Union: "union",
    exp.Intersect: "intersect",
    exp.Except: "except",
    exp.Like: "like",
    exp.In: "in",
    exp.Not: "not",
    exp.Between: "between",
}


def query_components(sql: str) -> Counter[str]:
    """The parts of a query that decide its meaning, as a multiset: tables, columns (without
    their qualifier), aggregate and scalar functions, literals, clauses and comparisons.

    Aliases are resolved away, so `SELECT b.title FROM books b` and `SELECT title FROM books`
    have the same parts. Text sqlglot cannot parse has none."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:  # sqlglot.ParseError, TokenError, RecursionError
        return Counter()
    if tree is None:
        return Counter()
    parts: Counter[str] = Counter()
    for node in tree.walk():
        if isinstance(node, exp.Table):
            parts["table:" + node.name.lower()] += 1
        elif isinstance(node, exp.Column):
            parts["column:" + node.name.lower()] += 1
        elif isinstance(node, exp.Star) and not isinstance(node.parent, (exp.Column, exp.Count)):
            parts["column:*"] += 1  # COUNT(*) is its function alone
        elif isinstance(node, exp.Literal):
            parts["value:" + str(node.this).lower()] += 1
        elif isinstance(node, exp.Func) and not isinstance(node, exp.Paren):
            parts["function:" + node.key] += 1
        elif isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
            parts["compare:" + node.key] += 1
        else:
            for kind, name in _CLAUSES.items():
                if isinstance(node, kind):
                    parts["clause:" + name] += 1
                    break
    return parts


def component_f1(gold_sql: str, pred_sql: str) -> float:
    """F1 between the parts (`query_components`) of a predicted query and the gold query.

    A shaping signal for wrong answers, in the spirit of Spider's partial matching and the
    schema-linking reward of Reasoning-SQL (Pourreza et al. 2025): the right tables, columns
    and aggregate score above nothing, and only the gold query's own parts reach 1. Unlike an
    overlap of result values, no single query earns credit on every question."""
    gold, pred = query_components(gold_sql), query_components(pred_sql)
    common = sum((gold & pred).values())
    if not common:
        return 0.0
    precision, recall = common / sum(pred.values()), common / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    text = repr(round(value, 6)) if isinstance(value, float) else str(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 3] + "..."


def format_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], more: bool, max_chars: int = 2000
) -> str:
    """Header, one line per row while they fit in max_chars, and a row-count line."""
    lines = [" | ".join(_cell(c) for c in columns)]
    used = len(lines[0])
    for row in rows:
        line = " | ".join(_cell(v) for v in row)
        if used + len(line) + 50 > max_chars:  # 50: room for the count line
            break
        lines.append(line)
        used += len(line) + 1
    n, shown = len(rows), len(lines) - 1
    if more or shown < n:
        lines.append(f"... ({'more than ' * more}{n} rows; showing {shown})")
    else:
        lines.append(f"({n} row{'s' * (n != 1)})")
    return "\n".join(lines)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 24)] + "\n... (output clipped)"


def resolve_database(name_or_path: str | Path) -> Path:
    """A SQLite file path, or a bundled database name (`tasks.sql` builds it on first use)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.resolve()
    from tasks import sql as sql_tasks  # ValueError listing the bundled names if unknown

    return Path(sql_tasks.database_path(str(name_or_path))).resolve()


SCHEMA_FORMATS = ("compact", "create")


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_]\w*", name) else '"' + name.replace('"', '""') + '"'


def _sqlite_file(target: Target) -> Path | None:
    """The SQLite file whose schema describes the target: its own, or for a bundled database
    on another driver the bundled SQLite file (same tables, so the same prompt)."""
    from tasks import sql as sql_tasks

    if target.kind == "sqlite":
        return Path(target.location)
    name = target.schema if target.kind == "postgresql" else Path(target.location).stem
    if name in sql_tasks.DATABASES and (
        target.kind == "postgresql" or Path(target.location).parent == sql_tasks.duckdb_folder()
    ):
        return sql_tasks.database_path(name)
    return None


def _tables(target: Target, time_limit_s: float) -> list[tuple[str, list[tuple[str, str]]]]:
    """(table, [(column, type)]) of a database, in creation order where the DBMS knows it."""
    sqlite = _sqlite_file(target)
    if sqlite is not None:  # our own fixed statements: a plain read-only connection
        with sqlite_tables(sqlite) as (conn, names):
            return [
                (t, [(c[1], c[2]) for c in conn.execute(f"PRAGMA table_info({_quote(t)})")])
                for t in names
            ]
    sql = (
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    )
    _, rows, _ = run_query(target, sql, 5000, time_limit_s * GOLD_TIME_FACTOR)
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        tables.setdefault(str(table), []).append((str(column), str(kind).upper()))
    return list(tables.items())


@functools.lru_cache(maxsize=64)
def _schema(
    target: Target, version: tuple, fmt: str, sample_rows: int, time_limit_s: float
) -> tuple[str, str]:
    """(schema text, first table name for the prompt's example) of a database.

    `compact`: one `table(col TYPE, ...)` line per table and the foreign keys (bundled and
    SQLite databases); `create`: CREATE TABLE statements, as the SkyRL-SQL and Spider recipes
    show them. `sample_rows` > 0 adds that many rows of each table (SELECT * ... LIMIT k)."""
    from tasks import sql as sql_tasks

    tables = _tables(target, time_limit_s)
    first = _quote(tables[0][0]) if tables else "t"
    sqlite = _sqlite_file(target)
    if fmt == "compact" and sqlite is not None:
        parts = [sql_tasks.schema_text(str(sqlite))]
    elif fmt == "create" and sqlite is not None:
        conn = sqlite3.connect(f"{sqlite.resolve().as_uri()}?mode=ro", uri=True)
        try:
            parts = [
                str(r[0]).strip() + ";"
                for r in conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY rowid"
                )
            ]
        finally:
            conn.close()
    elif fmt == "create":
        parts = [
            f"CREATE TABLE {_quote(t)} (\n"
            + ",\n".join(f"  {_quote(c)} {k}" for c, k in cols)
            + "\n);"
            for t, cols in tables
        ]
    else:
        parts = [f"{t}({', '.join(f'{c} {k}' for c, k in cols)})" for t, cols in tables]
    if sample_rows > 0:
        for table, _ in tables:
            try:
                columns, rows, _ = run_query(
                    target,
                    f"SELECT * FROM {_quote(table)} LIMIT {int(sample_rows)}",
                    sample_rows,
                    time_limit_s,
                )
            except QueryError:
                continue
            parts.append(
                f"/* {sample_rows} example rows from {table}:\n"
                + format_table(columns, rows, False, 2000)
                + "\n*/"
            )
    return "\n".join(parts), first


_GOLD_CACHE: dict[tuple, tuple[list[tuple], bool]] = {}


def gold_result(
    where: Path | Target, sql: str, time_limit_s: float, keep_distinct: bool = True
) -> tuple[list[tuple], bool]:
    """(rows, order_matters) of a gold query (already in the target's dialect), cached per
    (database, version, query). A task file's gold query runs under the same guards as the
    agent's queries; Spider's text repairs apply, and DISTINCT goes unless `keep_distinct`."""
    target = where if isinstance(where, Target) else Target("sqlite", str(Path(where).resolve()))
    key = (target, target.version(), sql, keep_distinct)
    if key not in _GOLD_CACHE:
        query = postprocess(sql)
        if not keep_distinct:
            query = remove_distinct(query, target.dialect)
        try:
            _, rows, more = run_query(
                target, query, GRADE_MAX_ROWS, time_limit_s * GOLD_TIME_FACTOR
            )
        except QueryError as e:
            raise ValueError(f"the gold query fails on {target.describe()}: {e}") from None
        if more:
            raise ValueError(
                f"the gold query returns more than {GRADE_MAX_ROWS} rows on {target.describe()}"
            )
        if len(_GOLD_CACHE) > 4096:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[key] = (rows, gold_order_matters(sql))
    return _GOLD_CACHE[key]


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


# ---------------------------------------------------------------------------- environment


class SQLEnv(gym.Env):
    """Explore a database (SQLite, DuckDB or PostgreSQL) with read-only queries, then submit
    one as the answer."""

    stop_strings = TAGS.stop_strings
    # metadata keys evaluation reports break accuracy down by
    report_by = ("database", "difficulty")

    def __init__(
        self,
        max_turns: int = 5,
        database: str | None = None,
        format_penalty: float = 0.1,
        time_limit_s: float = 2.0,
        max_rows: int = 50,
        max_obs_chars: int = 2000,
        response_prefix: str = "",
        partial_credit: float = 0.0,
        dsn: str | None = None,
        grader: str = "spider",
        keep_distinct: bool = True,
        float_decimals: int | None = None,
        schema_format: str | None = None,
        sample_rows: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.max_turns = text_env.turn_limit(max_turns)
        if isinstance(dsn, dict) and len(dsn) == 1 and None in dsn.values():
            dsn = f"{next(iter(dsn))}:"  # `--set env.kwargs.dsn=duckdb:` read as YAML
        if dsn in ("sqlite", "duckdb"):
            dsn = f"{dsn}:"
        self.dsn = dsn
        """Where bundled databases live: `sqlite:` (None, the default), `duckdb:[FOLDER]`, or
        `postgresql://...` (one schema per bundled database); a task's own DSN wins."""
        self.grader = check_grader(grader)
        """`spider` (test-suite execution match) or `bird` (set match); a task's
        `metadata.grader` wins."""
        self.keep_distinct = keep_distinct
        """Spider only: keep DISTINCT (True) or drop it from both queries, as test-suite-sql-eval
        does unless given `--keep_distinct`."""
        if float_decimals is not None and not 0 <= float_decimals <= 15:
            raise ValueError(f"float_decimals must be between 0 and 15, got {float_decimals}")
        self.float_decimals = float_decimals
        """Round floats to this many decimals before comparing; None compares exactly, as the
        official evaluators do."""
        if schema_format is not None and schema_format not in SCHEMA_FORMATS:
            raise ValueError(
                f"unknown schema_format {schema_format!r}; accepted: {', '.join(SCHEMA_FORMATS)}"
            )
        self.schema_format = schema_format
        """How the prompt shows the schema (`compact`, `create`); None: the task's
        `metadata.schema_format`, else `compact`."""
        self.sample_rows = sample_rows
        """Example rows per table in the prompt; None: the task's `metadata.sample_rows`, else 0."""
        if dsn is not None and (
            not isinstance(dsn, str)
            or not dsn.startswith(("sqlite:", "duckdb:", "postgresql://", "postgres://"))
        ):
            raise ValueError(
                f"dsn {dsn!r} is not understood; accepted: sqlite:, duckdb:[FOLDER], "
                "postgresql://USER@HOST/DB"
            )
        self.database = database
        """The database of tasks that name none (a SQLite path or a bundled name)."""
        self.format_penalty = format_penalty
        """Reward (negated) of an episode that ends without a <solution>."""
        self.time_limit_s = time_limit_s
        """Wall clock of one query (the gold query gets GOLD_TIME_FACTOR times it)."""
        self.max_rows = max_rows
        """Rows an <sql> observation shows."""
        self.max_obs_chars = max_obs_chars
        """An observation is cut to this many characters."""
        self.response_prefix = response_prefix
        """Text every model turn starts with (the agent writes it, mask 0), e.g. "<"."""
        self.partial_credit = partial_credit
        """Weight of the F1 shaping reward for a wrong <solution> (0 = pure execution match)."""
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self._task: Task | None = None
        self._db: Target | None = None
        self._gold: tuple[list[tuple], bool] = ([], False)
        self._gold_sql = ""
        self._grading: tuple[str, bool] = (self.grader, self.keep_distinct)
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a task drawn from the bundled train suite.

        A broken task (unknown database, failing gold query) raises ValueError here, so
        that `step` never has to.
        """
        super().reset(seed=seed)
        task = text_env.episode_task(self, options, lambda: text_env.train_suite("sql"))
        database = task.metadata.get("database") or self.database
        if not database:
            raise ValueError(
                f"task {task.id!r} names no database and SQLEnv(database=...) is unset"
            )
        if not isinstance(task.answer, str) or not task.answer.strip():
            raise ValueError(f"task {task.id!r} has no gold SQL in its `answer` field")
        target = resolve_target(str(database), self.dsn)
        grader = check_grader(str(task.metadata.get("grader") or self.grader))
        keep_distinct = grader == "bird" or self.keep_distinct
        self._gold_sql = gold_sql(task, target)
        self._gold = gold_result(target, self._gold_sql, self.time_limit_s, keep_distinct)
        self._db, self._grading = target, (grader, keep_distinct)
        self._task, self._turns_left = task, self.max_turns
        fmt = self.schema_format or str(task.metadata.get("schema_format") or "compact")
        if fmt not in SCHEMA_FORMATS:
            raise ValueError(f"task {task.id!r}: unknown schema_format {fmt!r}")
        rows = (
            self.sample_rows if self.sample_rows is not None else task.metadata.get("sample_rows")
        )
        schema, first_table = _schema(
            target, target.version(), fmt, max(0, int(rows or 0)), self.time_limit_s
        )
        # Small models copy the example: it shows the answer tag, the thing they must learn.
        observation = (
            f"Tables:\n{schema}\n"
            f"Question: {text_env.user_text(task)}\n"
            f"Reply with one {target.label} query inside <solution></solution>, e.g. "
            f"<solution>SELECT COUNT(*) FROM {first_table}</solution>. To look at the data first, "
            f"send <sql>query</sql> (shows up to {self.max_rows} rows). Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return _clip(observation, MAX_OBSERVATION_CHARS), info

    @text_env.tag_step(parse_action, GRAMMAR)
    def step(self, action: tuple[str, str]) -> text_env.Step:
        tag, query = action
        assert self._db is not None
        if tag == "solution":
            return self._grade(query)
        try:
            columns, rows, more = run_query(self._db, query, self.max_rows, self.time_limit_s)
        except QueryError as e:
            return self._next_turn(f"Error: {e}", str(e))
        return self._next_turn(format_table(columns, rows, more, self.max_obs_chars), None)

    def demonstration(self, task: Task) -> str | None:
        """What a model turn that answers `task` correctly writes (after `response_prefix`):
        the gold query as the solution. For supervised warm-up (`warmup.sft_steps`)."""
        if not isinstance(task.answer, str) or not task.answer.strip():
            return None
        answer = task.answer.strip()
        database = task.metadata.get("database") or self.database
        if database:
            answer = gold_sql(task, resolve_target(str(database), self.dsn))
        return text_env.tag_demonstration("solution", answer, self.response_prefix)

    def _next_turn(self, body: str, error: str | None) -> text_env.Step:
        """An observation for a turn that did not end the episode, unless it was the last one."""
        body = _clip(body, self.max_obs_chars)
        if self._turns_left > 0:
            return text_env.next_turn(body, error, self._turns_left, "use it for <solution>")
        self._task = None
        return text_env.out_of_turns(body, error, self.format_penalty, "a <solution>")

    def _grade(self, query: str) -> text_env.Step:
        assert self._db is not None and self._task is not None
        gold_sql = self._gold_sql
        self._task = None
        gold_rows, order_matters = self._gold
        grader, keep_distinct = self._grading
        error = None
        try:
            graded = postprocess(query)
            if not keep_distinct:
                graded = remove_distinct(graded, self._db.dialect)
            _, rows, more = run_query(self._db, graded, GRADE_MAX_ROWS, self.time_limit_s)
            correct = not more and execution_match(
                gold_rows, rows, order_matters, grader, self.float_decimals
            )
            if more:
                error = f"the result has more than {GRADE_MAX_ROWS} rows"
        except QueryError as e:
            correct, error = False, str(e)
        if correct:
            observation = "Correct."
        else:
            observation = (
                f"Incorrect: {error}." if error else "Incorrect: the result does not match."
            )
        info = {"turns_left": self._turns_left, "error": error, "correct": correct}
        # Optional shaping: a wrong answer that runs earns partial_credit x the F1 of its
        # parts (tables, columns, functions, literals, clauses) against the gold query's, a
        # gradient for a small model long before it gets answers right. Not an overlap of
        # result values: `SELECT * FROM <table>` and the prompt's `SELECT COUNT(*)` example
        # each earned that on most questions, and trained policies collapsed onto them (measured).
        reward = 1.0
        if not correct:
            reward = (
                self.partial_credit * component_f1(gold_sql, query)
                if error is None and self.partial_credit
                else 0.0
            )
        return _clip(observation, self.max_obs_chars), reward, True, False, info

    def close(self) -> None:
        # Query workers are shared by every SQLEnv in the process; `close_workers` ends them.
        self._db = self._task = None
