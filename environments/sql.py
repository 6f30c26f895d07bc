"""`skyrl/SQL-v0`: answer a question about a database with one SELECT query.

This module owns the environment: the action grammar (`parse_action`), the episode, the
`component_f1` shaping and the gold-result cache. The grading rules (Spider's, BIRD's) are
`environments.sql_grade`; the drivers (SQLite, DuckDB, PostgreSQL), where a task's database
lives and the gold query's dialect are `environments.sql_drivers`; the schema text of the
prompt and the result tables of observations (`format_table`) are `environments.sql_schema`;
running a query safely (read-only connection, statement check, time kill, caps) is
`environments.sql_guard`. Their public names are re-exported here.

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
too), plus `schema_link_weight` x `schema_link` (0 by default; docs/sql.md has the formula
and range). Exploring and malformed turns give 0.0. Running out of turns without a `<solution>`
truncates the episode with reward `-format_penalty`. Every failure is an observation, never
an exception.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import sqlglot
from sqlglot import exp

from environments import text_env
from environments.spaces import ActionError
from environments.sql_drivers import Target, check_dsn, gold_sql, resolve_target
from environments.sql_grade import (
    MAX_COLUMN_PERMUTATIONS,
    check_grader,
    execution_match,
    gold_order_matters,
    postprocess,
    remove_distinct,
)
from environments.sql_guard import QueryError, check_read_only, open_read_only, run_query
from environments.sql_probes import PROBE_WHEN, tables_to_probe
from environments.sql_schema import GOLD_TIME_FACTOR, SCHEMA_FORMATS, format_table, schema
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
    "schema_link",
    "run_query",
]

MAX_OBSERVATION_CHARS = 1_000_000
"""Upper bound of the observation space; step observations are capped by `max_obs_chars`."""
GRADE_MAX_ROWS = 100_000
"""A gold or submitted result larger than this cannot be graded."""
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


def schema_link(gold_sql: str, pred_sql: str) -> float:
    """The schema-linking score of Reasoning-SQL (Pourreza et al. 2025): the Jaccard overlap
    |G & P| / |G | P| of the tables and columns (unqualified, lower case; `*` names none) the
    gold query (G) and the answer (P) name. In [0, 1]: 1 when the answer names exactly the
    gold query's schema items, lowered both by the ones it misses and by extras it adds. An
    answer sqlglot cannot parse names none (0)."""
    gold, pred = (
        {k for k in query_components(q) if k.startswith(("table:", "column:")) and k != "column:*"}
        for q in (gold_sql, pred_sql)
    )
    union = gold | pred
    return len(gold & pred) / len(union) if union else 0.0


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 24)] + "\n... (output clipped)"


def resolve_database(name_or_path: str | Path) -> Path:
    """A SQLite file path, or a bundled database name (`tasks.sql` builds it on first use)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.resolve()
    from tasks import sql as sql_tasks  # ValueError listing the bundled names if unknown

    return Path(sql_tasks.database_path(str(name_or_path))).resolve()


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


# ---------------------------------------------------------------------------- environment


class SQLEnv(gym.Env):
    """Explore a database (SQLite, DuckDB or PostgreSQL) with read-only queries, then submit
    one as the answer."""

    grammar = "<sql>query</sql> runs a read-only query; <solution>query</solution> answers"
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
        probe_share: float = 0.0,
        probe_when: str = "random",
        schema_link_weight: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.max_turns = text_env.turn_limit(max_turns)
        self.dsn = check_dsn(dsn)
        """Where bundled databases live: `sqlite:` (None, the default), `duckdb:[FOLDER]`, or
        `postgresql://...` (one schema per bundled database); a task's own DSN wins."""
        self.grader = check_grader(grader)
        """`spider` (test-suite execution match) or `bird` (set match); a task's
        `metadata.grader` wins."""
        self.keep_distinct = keep_distinct
        """Spider only: keep DISTINCT (True) or drop it from both queries, as test-suite-sql-eval
        does unless given `--keep_distinct`."""
        self.float_decimals = text_env.in_range("float_decimals", float_decimals, 0, 15)
        """Round floats to this many decimals before comparing; None compares exactly, as the
        official evaluators do."""
        self.schema_format = text_env.one_of("schema_format", schema_format, SCHEMA_FORMATS)
        """How the prompt shows the schema (`compact`, `create`); None: the task's
        `metadata.schema_format`, else `compact`."""
        self.sample_rows = sample_rows
        """Example rows per table in the prompt; None: the task's `metadata.sample_rows`, else 0."""
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
        self.probe_share = text_env.in_range("probe_share", probe_share, 0, 1)
        """Share of warm-up demonstrations (seeded per task id) that first look at the gold
        query's tables with `<sql>SELECT * FROM T LIMIT 3</sql>` (one or two), then answer."""
        self.probe_when = text_env.one_of("probe_when", probe_when, PROBE_WHEN)
        """Which of them: `random` (any task), or `unsure`: only tasks whose gold query uses a
        table or column the question does not name, and then those tables
        (`environments.sql_probes`)."""
        self.schema_link_weight = text_env.in_range("schema_link_weight", schema_link_weight, 0, 1)
        """Weight of the schema-linking term added to every graded <solution>'s reward:
        reward = execution reward + weight x `schema_link` (0 = execution match alone)."""
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
        schema_text, first_table = schema(
            target, target.version(), fmt, max(0, int(rows or 0)), self.time_limit_s
        )
        # Small models copy the example: it shows the answer tag, the thing they must learn.
        observation = (
            f"Tables:\n{schema_text}\n"
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

    def demonstration(self, task: Task) -> str | list[str] | None:
        """What a model turn that answers `task` correctly writes (after `response_prefix`):
        the gold query as the solution, after one or two probes for a `probe_share` of
        tasks (a list of turns, replayed). For supervised warm-up (`warmup.sft_steps`)."""
        if not isinstance(task.answer, str) or not task.answer.strip():
            return None
        answer = task.answer.strip()
        database = task.metadata.get("database") or self.database
        if database:
            answer = gold_sql(task, resolve_target(str(database), self.dsn))
        solution = text_env.tag_demonstration("solution", answer, self.response_prefix)
        probes = self._probes(task, answer) if solution is not None else []
        return [*probes, solution] if probes and solution is not None else solution

    def _probes(self, task: Task, answer: str) -> list[str]:
        """The probes of a looking demonstration: for a seeded `probe_share` of tasks (of the
        unsure ones, with `probe_when: unsure`), the rows of the first table to look at (and,
        for half of those with two or more, of the second), within the turns an episode has
        before its answer. None where the response prefix leaves no room for an `<sql>` tag."""
        rng = random.Random(f"skyrl-sql-probe-{task.id}")
        if self.max_turns < 2 or rng.random() >= self.probe_share:
            return []
        tables = tables_to_probe(answer, str(task.prompt), self.probe_when)
        k = 2 if len(tables) > 1 and self.max_turns > 2 and rng.random() < 0.5 else 1
        probes = [
            text_env.tag_demonstration("sql", f"SELECT * FROM {t} LIMIT 3", self.response_prefix)
            for t in tables[:k]
        ]
        return [p for p in probes if p is not None] if None not in probes else []

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
        if self.schema_link_weight:  # the right tables and columns pay, even when it fails to run
            reward += self.schema_link_weight * schema_link(gold_sql, query)
        return _clip(observation, self.max_obs_chars), reward, True, False, info

    def close(self) -> None:
        # Query workers are shared by every SQLEnv in the process; `close_workers` ends them.
        self._db = self._task = None
