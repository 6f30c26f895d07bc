"""`skyrl/SQL-v0`: answer a question about a SQLite database with one SELECT query.

This module owns the environment: the action grammar (`parse_action`), grading
(`execution_match`, `component_f1` shaping, `gold_order_matters`, the gold-result cache) and the
observations (`format_table`). Running a query safely (read-only connection, statement
check, authorizer, guarded builtins, time limit) is `environments.sql_guard`'s job; its
public names are re-exported here.

Action grammar (the model's text; `stop_strings` end generation at a closing tag):

    <sql>SELECT ...</sql>            run a read-only query; the observation is the result table
    <solution>SELECT ...</solution>  submit the answer; ends the episode and grades it

Tag rule: the FIRST opening `<sql>` or `<solution>` in the text is the action; text before
it (reasoning) and after its closing tag is ignored. The first tag is what the agent meant
when it stopped at the closing tag's stop string. An opening tag with no closing tag (the
model ran out of tokens), a tag inside the body (nested or mismatched tags) or an empty body
is malformed: an error observation, reward 0, and the turn is spent.

Rewards: `<solution>` gives 1.0 when its result matches the gold query's result under the
Spider test-suite rule (`execution_match`), else 0.0 (a query that fails to run scores 0.0
too). Exploring and malformed turns give 0.0. Running out of turns without a `<solution>`
truncates the episode with reward `-format_penalty`. Every failure is an observation, never
an exception.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import sqlglot
from sqlglot import exp

from environments.spaces import ActionError, TextSpace
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
    "query_components",
    "component_f1",
    "run_query",
]

MAX_ACTION_CHARS = 100_000
"""Longer actions are rejected unread (an LLM turn is a few thousand tokens at most)."""
MAX_OBSERVATION_CHARS = 1_000_000
"""Upper bound of the observation space; step observations are capped by `max_obs_chars`."""
GRADE_MAX_ROWS = 100_000
"""A gold or submitted result larger than this cannot be graded."""
MAX_COLUMN_PERMUTATIONS = 10_000
"""Column orders of the prediction tried against the gold result before giving up."""
GOLD_TIME_FACTOR = 10
"""The gold query gets this many times the per-query time limit."""
MAX_CELL_CHARS = 80
GRAMMAR = "Use <sql>SELECT ...</sql> to run a query or <solution>SELECT ...</solution> to answer."

_ANY_TAG = re.compile(r"</?(?:sql|solution)>")
_OPEN_TAG = re.compile(r"<(sql|solution)>")


# ---------------------------------------------------------------------------- parsing


def parse_action(text: str) -> tuple[str, str]:
    """Return (tag, body) of the first `<sql>` / `<solution>` tag; ActionError if malformed."""
    opening = _OPEN_TAG.search(text)
    if opening is None:
        raise ActionError("no <sql> or <solution> tag found")
    tag = opening.group(1)
    end = text.find(f"</{tag}>", opening.end())
    if end < 0:
        raise ActionError(f"<{tag}> is not closed with </{tag}>")
    body = text[opening.end() : end]
    if _ANY_TAG.search(body):
        raise ActionError(f"<{tag}> contains another tag; tags cannot be nested")
    if not body.strip():
        raise ActionError(f"<{tag}></{tag}> is empty")
    return tag, body.strip()


def gold_order_matters(sql: str) -> bool:
    """True when the gold query has a top-level ORDER BY (then row order is graded)."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:
        return "order by" in " ".join(sql.lower().split())
    return tree is not None and tree.args.get("order") is not None


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


def _normalise(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6) + 0.0  # + 0.0 folds -0.0 into 0.0
    return value


def execution_match(
    gold_rows: Sequence[Sequence[Any]], pred_rows: Sequence[Sequence[Any]], order_matters: bool
) -> bool:
    """The Spider test-suite rule: same rows as multisets (as lists when `order_matters`),
    columns matched up to a permutation of the predicted ones, floats rounded to 6 digits."""
    gold = [tuple(_normalise(v) for v in row) for row in gold_rows]
    pred = [tuple(_normalise(v) for v in row) for row in pred_rows]
    if len(gold) != len(pred):
        return False
    if not gold:
        return True
    width = len(gold[0])
    if any(len(row) != width for row in gold + pred):
        return False
    for perm in _column_permutations(gold, pred, width, order_matters):
        permuted = [tuple(row[i] for i in perm) for row in pred]
        if permuted == gold if order_matters else Counter(permuted) == Counter(gold):
            return True
    return False


def _column_permutations(
    gold: list[tuple], pred: list[tuple], width: int, order_matters: bool
) -> Iterator[tuple[int, ...]]:
    """Bijections gold column -> predicted column whose values agree column by column.

    A predicted column can stand for a gold column only if it holds the same values (the
    same list when order matters, else the same multiset); this prunes almost every case to
    one candidate. The search stops after MAX_COLUMN_PERMUTATIONS orders.
    """

    def column(rows: list[tuple], i: int) -> Any:
        values = [row[i] for row in rows]
        return values if order_matters else Counter(values)

    gold_cols = [column(gold, i) for i in range(width)]
    pred_cols = [column(pred, i) for i in range(width)]
    candidates = [[k for k in range(width) if pred_cols[k] == g] for g in gold_cols]
    tried = 0

    def extend(prefix: list[int]) -> Iterator[tuple[int, ...]]:
        nonlocal tried
        if tried >= MAX_COLUMN_PERMUTATIONS:
            return
        if len(prefix) == width:
            tried += 1
            yield tuple(prefix)
            return
        for k in candidates[len(prefix)]:
            if k not in prefix:
                yield from extend([*prefix, k])

    yield from extend([])


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


def _as_text(action: Any) -> str | None:
    """The action as clean text: bytes decoded, lone surrogates replaced; None if not text."""
    if isinstance(action, bytes | bytearray):
        action = bytes(action).decode("utf-8", "replace")
    if not isinstance(action, str):
        return None
    if len(action) > MAX_ACTION_CHARS:
        return action
    return action.encode("utf-8", "replace").decode("utf-8")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 24)] + "\n... (output clipped)"


def resolve_database(name_or_path: str | Path) -> Path:
    """A SQLite file path, or a bundled database name (`tasks.sql` builds it on first use)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.resolve()
    from tasks import sql as sql_tasks  # ValueError listing the bundled names if unknown

    return Path(sql_tasks.database_path(str(name_or_path))).resolve()


@functools.lru_cache(maxsize=64)
def _schema(path: Path) -> tuple[str, str]:
    """(compact schema, first table name for the prompt's example) of a database."""
    from tasks import sql as sql_tasks

    conn = open_read_only(path)
    try:
        row = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY rowid LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    first = row[0] if row else "t"
    if not re.fullmatch(r"[A-Za-z_]\w*", first):
        first = '"' + first.replace('"', '""') + '"'
    return sql_tasks.schema_text(str(path)), first


_GOLD_CACHE: dict[tuple[str, int, str], tuple[list[tuple], bool]] = {}


def gold_result(path: Path, sql: str, time_limit_s: float) -> tuple[list[tuple], bool]:
    """(rows, order_matters) of a gold query, cached per (database file, version, query).

    A task file's gold query runs under the same guards as the agent's queries."""
    key = (str(path), path.stat().st_mtime_ns, sql)
    if key not in _GOLD_CACHE:
        try:
            _, rows, more = run_query(path, sql, GRADE_MAX_ROWS, time_limit_s * GOLD_TIME_FACTOR)
        except QueryError as e:
            raise ValueError(f"the gold query fails on {path}: {e}") from None
        if more:
            raise ValueError(f"the gold query returns more than {GRADE_MAX_ROWS} rows on {path}")
        if len(_GOLD_CACHE) > 4096:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[key] = (rows, gold_order_matters(sql))
    return _GOLD_CACHE[key]


@functools.lru_cache(maxsize=1)
def _train_suite() -> list[Task]:
    from tasks import sql as sql_tasks

    return sql_tasks.load_suite("train")


def _question(task: Task) -> str:
    if isinstance(task.prompt, str):
        return task.prompt
    return "\n".join(m.get("content", "") for m in task.prompt if m.get("role") == "user")


# ---------------------------------------------------------------------------- environment


class SQLEnv(gym.Env):
    """Explore a SQLite database with read-only queries, then submit one as the answer."""

    metadata = {"render_modes": []}
    stop_strings = ("</sql>", "</solution>")

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
        **kwargs: Any,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.max_turns = max_turns
        self.database = database
        self.format_penalty = format_penalty
        self.time_limit_s = time_limit_s
        self.max_rows = max_rows
        self.max_obs_chars = max_obs_chars
        self.response_prefix = response_prefix
        self.partial_credit = partial_credit
        """Weight of the F1 shaping reward for a wrong <solution> (0 = pure execution match)."""
        """Text every model turn starts with (the agent writes it, mask 0), e.g. "<"."""
        self.observation_space = TextSpace(MAX_OBSERVATION_CHARS)
        self.action_space = TextSpace(MAX_ACTION_CHARS)
        self._task: Task | None = None
        self._db: Path | None = None
        self._gold: tuple[list[tuple], bool] = ([], False)
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a task drawn from the bundled train suite.

        A broken task (unknown database, failing gold query) raises ValueError here, so
        that `step` never has to.
        """
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if task is None:
            suite = _train_suite()
            task = suite[int(self.np_random.integers(len(suite)))]
        database = task.metadata.get("database") or self.database
        if not database:
            raise ValueError(
                f"task {task.id!r} names no database and SQLEnv(database=...) is unset"
            )
        if not isinstance(task.answer, str) or not task.answer.strip():
            raise ValueError(f"task {task.id!r} has no gold SQL in its `answer` field")
        path = resolve_database(database)
        self._gold = gold_result(path, task.answer, self.time_limit_s)
        self._db = path
        self._task, self._turns_left = task, self.max_turns
        schema, first_table = _schema(path)
        # Small models copy the example: it shows the answer tag, the thing they must learn.
        observation = (
            f"Tables:\n{schema}\n"
            f"Question: {_question(task)}\n"
            "Reply with one SQLite query inside <solution></solution>, e.g. "
            f"<solution>SELECT COUNT(*) FROM {first_table}</solution>. To look at the data first, "
            f"send <sql>query</sql> (shows up to {self.max_rows} rows). Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return _clip(observation, MAX_OBSERVATION_CHARS), info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None or self._db is None:
            error = "the episode is over; call reset() to start a new one"
            return f"Error: {error}.", 0.0, True, False, {"turns_left": 0, "error": error}
        self._turns_left -= 1
        text = _as_text(action)
        try:
            if text is None:
                raise ActionError(f"the action must be text, not {type(action).__name__}")
            if len(text) > MAX_ACTION_CHARS:
                raise ActionError(
                    f"the action is {len(text)} characters; the limit is {MAX_ACTION_CHARS}"
                )
            tag, query = parse_action(text)
        except ActionError as e:
            return self._next_turn(f"Error: {e}. {GRAMMAR}", str(e))
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
        text = f"<solution>{task.answer.strip()}</solution>"
        if not text.startswith(self.response_prefix):
            return None
        return text[len(self.response_prefix) :]

    def _next_turn(
        self, body: str, error: str | None
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """An observation for a turn that did not end the episode, unless it was the last one."""
        left = self._turns_left
        if left <= 0:
            self._task = None
            footer = "\nTurns left: 0. The episode ended without a <solution>."
            info = {"turns_left": 0, "error": error, "correct": False}
            return (
                _clip(body, self.max_obs_chars) + footer,
                -float(self.format_penalty),
                False,
                True,
                info,
            )
        footer = f"\nTurns left: {left}" + (" (use it for <solution>)" if left == 1 else "")
        return (
            _clip(body, self.max_obs_chars) + footer,
            0.0,
            False,
            False,
            {"turns_left": left, "error": error},
        )

    def _grade(self, query: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self._db is not None and self._task is not None
        gold_sql = str(self._task.answer)
        self._task = None
        gold_rows, order_matters = self._gold
        error = None
        try:
            _, rows, more = run_query(self._db, query, GRADE_MAX_ROWS, self.time_limit_s)
            correct = not more and execution_match(gold_rows, rows, order_matters)
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
