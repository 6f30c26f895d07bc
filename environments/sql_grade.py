"""Execution match for `skyrl/SQL-v0`: Spider's test-suite rule and BIRD's set rule.

Both are written from the official evaluators' rules (not their code), and
`benchmarks/sql_grader.py` measures the agreement with the official code itself:

- `spider` (default): test-suite-sql-eval's `eval_exec_match` on one database. Rows are
  compared as multisets, or as lists when the gold query's text contains `order by`
  anywhere (its substring test, subqueries included); columns may come in any order; values
  compare as Python values (1 == 1.0, no rounding). Before running, both queries get its
  `postprocess` (`> =` -> `>=`, ...), and unless `keep_distinct`, every DISTINCT is removed
  from both (its default; its `--keep_distinct` flag keeps them).
- `bird`: BIRD's `set(predicted) == set(gold)`: duplicates and row order ignored, columns
  in the gold's order.

`float_decimals` rounds floats before comparing (None, the default, compares exactly as
both official evaluators do; skyrl before issue 15 rounded to 6).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import sqlglot
from sqlglot import exp

GRADERS = ("spider", "bird")
MAX_COLUMN_PERMUTATIONS = 10_000
"""Column orders of the prediction tried against the gold result before giving up."""


def check_grader(name: str) -> str:
    if name not in GRADERS:
        raise ValueError(f"unknown grader {name!r}; accepted: {', '.join(GRADERS)}")
    return name


def gold_order_matters(sql: str) -> bool:
    """Spider's rule: row order is graded when the gold query's text contains `order by`."""
    return "order by" in postprocess(sql).lower()


def postprocess(sql: str) -> str:
    """Spider's repair of spaced comparison operators, applied to both queries."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def remove_distinct(sql: str, dialect: str = "sqlite") -> str:
    """Spider's default: every DISTINCT keyword dropped (`COUNT(DISTINCT x)` -> `COUNT(x)`).

    The official code drops DISTINCT tokens from the text; this drops them from the parse
    tree. Text sqlglot cannot parse is returned as it is (it fails to run either way)."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:  # ParseError, TokenError, RecursionError
        return sql
    if tree is None or not any(True for _ in tree.find_all(exp.Distinct)):
        return sql

    def drop(node: exp.Expression) -> exp.Expression | None:
        if isinstance(node, exp.Distinct):
            if node.args.get("on") is not None or len(node.expressions) > 1:
                return node  # DISTINCT ON (...) is not the keyword alone
            if isinstance(node.parent, exp.Select) and node.arg_key == "distinct":
                return None
            return node.expressions[0] if node.expressions else None
        return node

    out = tree.transform(drop)
    return out.sql(dialect=dialect) if out is not None else sql


def _round(value: Any, digits: int | None) -> Any:
    if digits is not None and isinstance(value, float):
        return round(value, digits) + 0.0  # + 0.0 folds -0.0 into 0.0
    return value


def execution_match(
    gold_rows: Sequence[Sequence[Any]],
    pred_rows: Sequence[Sequence[Any]],
    order_matters: bool,
    grader: str = "spider",
    float_decimals: int | None = None,
) -> bool:
    """Whether a prediction's rows match the gold rows under `grader` (see the module)."""
    gold = [tuple(_round(v, float_decimals) for v in row) for row in gold_rows]
    pred = [tuple(_round(v, float_decimals) for v in row) for row in pred_rows]
    if grader == "bird":
        return set(pred) == set(gold)
    return spider_match(gold, pred, order_matters)


def _unordered(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def spider_match(gold: list[tuple], pred: list[tuple], order_matters: bool) -> bool:
    """Spider's `result_eq`: a column order of `pred` under which its rows equal gold's."""
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    width = len(gold[0])
    if len(pred[0]) != width:  # the official test reads the first row only
        return False
    # Necessary condition first, as the official code does: each row's cells as a sorted
    # bag (sorted by text and type), compared as a list or as a set.
    loose_gold, loose_pred = map(lambda rows: [_unordered(r) for r in rows], (gold, pred))
    if order_matters and loose_gold != loose_pred:
        return False
    if not order_matters and set(loose_gold) != set(loose_pred):
        return False
    for perm in _column_permutations(gold, pred, width):
        permuted = pred if width == 1 else [tuple(row[i] for i in perm) for row in pred]
        if order_matters:
            if permuted == gold:
                return True
        elif set(permuted) == set(gold) and Counter(permuted) == Counter(gold):
            return True
    return False


def _column_permutations(gold: list[tuple], pred: list[tuple], width: int) -> Iterator[tuple]:
    """Orders of pred's columns worth trying: pred column k can stand for gold column i only
    if every value in k occurs in gold's column i (the official sampling of 20 rows only
    ever removes such impossible pairings, so testing all rows accepts the same tables)."""
    gold_sets = [{row[i] for row in gold} for i in range(width)]
    pred_sets = [{row[k] for row in pred} for k in range(width)]
    candidates = [[k for k in range(width) if pred_sets[k] <= gold_sets[i]] for i in range(width)]
    if width <= 3:  # the official code tries every order of up to three columns
        candidates = [list(range(width))] * width
    yield from itertools.islice(
        (p for p in itertools.product(*candidates) if len(set(p)) == width),
        MAX_COLUMN_PERMUTATIONS,
    )
