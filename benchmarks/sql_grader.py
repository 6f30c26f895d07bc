"""Agreement of skyrl's SQL graders with the official evaluators, on generated candidates.

    pip install --no-deps nl2sql360==1.1.0      # ships both official evaluators (see below)
    python benchmarks/sql_grader.py [--limit N] [--show 3]

The references are the official code itself, imported from the PyPI package `nl2sql360`,
which ships test-suite-sql-eval's `exec_eval.py`/`parse.py` (identical to
github.com/taoyds/test-suite-sql-eval apart from a relative import) and BIRD's
`calculate_ex`/`execute_sql` (as in github.com/bird-bench/mini_dev):

- spider: `eval_exec_match(db, pred, gold, plug_value=False, keep_distinct=..., ...)`, against
  `SQLEnv(grader="spider", keep_distinct=...)` for both settings of keep_distinct;
- bird: `execute_sql(pred, gold, db, "SQLite", calculate_ex)` (an error scores 0), against
  `SQLEnv(grader="bird")`.

Candidates: every gold query of the bundled suite (all splits) and systematic perturbations
of it (columns reordered, dropped or added, DISTINCT added or removed, ORDER BY removed or
reversed, rows duplicated, LIMIT 1, ints cast to floats, floats rounded, values upper-cased,
NULLs replaced, an empty result). skyrl runs each one through the real environment (query
worker, `<solution>` action); the references run it with their own sqlite3 calls. Each
database sits alone in its folder, since eval_exec_match grades on every .sqlite file beside
the one it is given (the test-suite idea).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import sqlglot
from sqlglot import exp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.sql import SQLEnv  # noqa: E402
from tasks.sql import database_path, load_suite  # noqa: E402
from tasks.task import Task  # noqa: E402


def load_references() -> tuple[Callable[..., int], Callable[..., int]]:
    """(Spider's eval_exec_match, BIRD's set match) from the installed nl2sql360 package,
    imported module by module: the package's own __init__ files pull in its whole framework
    (sqlalchemy, loguru, ...), and BIRD's utilities import MySQL/PostgreSQL clients and
    func_timeout that the SQLite path never calls (stubbed here)."""
    try:
        spec = importlib.util.find_spec("nl2sql360")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: the reference evaluators need: pip install --no-deps nl2sql360==1.1.0")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name, folder in (
        ("nl2sql360", root),
        ("nl2sql360.evaluator", root / "evaluator"),
        ("nl2sql360.evaluator.test_suite_sql_eval", root / "evaluator" / "test_suite_sql_eval"),
        ("nl2sql360.evaluator.bird_eval", root / "evaluator" / "bird_eval"),
    ):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    for unused in ("psycopg2", "pymysql", "func_timeout"):
        if unused not in sys.modules:
            stub = types.ModuleType(unused)
            stub.func_timeout = stub.FunctionTimedOut = None  # type: ignore[attr-defined]
            sys.modules[unused] = stub
    spider = importlib.import_module("nl2sql360.evaluator.test_suite_sql_eval.exec_eval")
    bird_ex = importlib.import_module("nl2sql360.evaluator.bird_eval.bird_ex")
    bird_utils = importlib.import_module("nl2sql360.evaluator.bird_eval.evaluation_utils")

    def bird(db: str, pred: str, gold: str) -> int:
        try:
            return int(bird_utils.execute_sql(pred, gold, db, "SQLite", bird_ex.calculate_ex))
        except Exception:  # the official runner scores an error 0
            return 0

    return spider.eval_exec_match, bird


# ---------------------------------------------------------------------------- candidates


def _tree(sql: str) -> exp.Select | None:
    tree = sqlglot.parse_one(sql, read="sqlite")
    return tree if isinstance(tree, exp.Select) else None


def _columns(tree: exp.Select, wrap: Callable[[exp.Expression], exp.Expression]) -> str:
    out = tree.copy()
    out.set("expressions", [wrap(e.unalias()) for e in out.expressions])
    return out.sql(dialect="sqlite")


def perturbations(gold: str) -> Iterator[tuple[str, str]]:
    """(kind, candidate SQL) for one gold query."""
    yield "gold", gold
    yield "wrapped in SELECT *", f"SELECT * FROM ({gold})"
    yield "rows duplicated", f"SELECT * FROM ({gold}) UNION ALL SELECT * FROM ({gold})"
    yield "empty result", f"SELECT * FROM ({gold}) WHERE 1 = 0"
    yield "first row only", f"SELECT * FROM ({gold}) LIMIT 1"
    tree = _tree(gold)
    if tree is None:
        return
    cols = tree.expressions
    if len(cols) > 1:
        swapped = tree.copy()
        swapped.set("expressions", list(reversed(swapped.expressions)))
        yield "columns reversed", swapped.sql(dialect="sqlite")
        dropped = tree.copy()
        dropped.set("expressions", swapped.expressions[:-1])
        yield "column dropped", dropped.sql(dialect="sqlite")
    extra = tree.copy()
    extra.set("expressions", [*extra.expressions, exp.Literal.number(1)])
    yield "column added", extra.sql(dialect="sqlite")
    if tree.args.get("distinct"):
        plain = tree.copy()
        plain.set("distinct", None)
        yield "DISTINCT removed", plain.sql(dialect="sqlite")
    elif not any(isinstance(c.unalias(), exp.AggFunc) for c in cols):
        yield "DISTINCT added", tree.copy().distinct().sql(dialect="sqlite")
    order = tree.args.get("order")
    if order is not None:
        unordered = tree.copy()
        unordered.set("order", None)
        yield "ORDER BY removed", unordered.sql(dialect="sqlite")
        flipped = tree.copy()
        for key in flipped.args["order"].expressions:
            key.set("desc", not key.args.get("desc"))
        yield "ORDER BY reversed", flipped.sql(dialect="sqlite")
    else:
        yield "ORDER BY added", f"SELECT * FROM ({gold}) ORDER BY 1 DESC"
    yield (
        "times 1.0",
        _columns(tree, lambda e: exp.Mul(this=e, expression=exp.Literal.number("1.0"))),
    )
    yield "ROUND(x, 2)", _columns(tree, lambda e: exp.Round(this=e, decimals=exp.Literal.number(2)))
    yield "UPPER(x)", _columns(tree, lambda e: exp.Upper(this=e))
    yield (
        "NULL as 'none'",
        _columns(tree, lambda e: exp.Coalesce(this=e, expressions=[exp.Literal.string("none")])),
    )


# ---------------------------------------------------------------------------- the run


MODES = {
    "spider (keep_distinct)": {"grader": "spider", "keep_distinct": True},
    "spider (official default: DISTINCT removed)": {"grader": "spider", "keep_distinct": False},
    "bird": {"grader": "bird"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N gold queries")
    parser.add_argument("--show", type=int, default=3, help="disagreements printed per class")
    args = parser.parse_args()
    spider_ref, bird_ref = load_references()
    suite = load_suite()
    suite = suite[: args.limit] if args.limit else suite
    scratch = Path(tempfile.mkdtemp(prefix="skyrl-grader-bench-"))
    try:
        alone: dict[str, str] = {}
        for name in sorted({t.metadata["database"] for t in suite}):
            folder = scratch / name
            folder.mkdir()
            alone[name] = str(shutil.copy(database_path(name), folder / f"{name}.sqlite"))
        envs = {mode: SQLEnv(time_limit_s=10.0, **kwargs) for mode, kwargs in MODES.items()}  # type: ignore[arg-type]
        agree: dict[str, Counter[str]] = {mode: Counter() for mode in MODES}
        total: Counter[str] = Counter()
        accepted: dict[str, Counter[str]] = {mode: Counter() for mode in MODES}
        differ: dict[str, dict[str, list]] = {mode: defaultdict(list) for mode in MODES}
        start = time.monotonic()
        for task in suite:
            db = alone[task.metadata["database"]]
            gold = str(task.answer)
            for kind, pred in perturbations(gold):
                total[kind] += 1
                for mode, kwargs in MODES.items():
                    if kwargs["grader"] == "bird":
                        want = bird_ref(db, pred, gold)
                    else:
                        want = spider_ref(db, pred, gold, False, kwargs["keep_distinct"], False)
                    env = envs[mode]
                    env.reset(
                        options={"task": Task(task.id, "sql", "?", gold, metadata={"database": db})}
                    )
                    got = int(bool(env.step(f"<solution>{pred}</solution>")[4]["correct"]))
                    accepted[mode][kind] += got
                    if got == want:
                        agree[mode][kind] += 1
                    else:
                        differ[mode][kind].append((task.id, gold, pred, want, got))
        n = sum(total.values())
        print(f"{n} candidates from {len(suite)} gold queries in {time.monotonic() - start:.0f} s")
        for mode in MODES:
            same = sum(agree[mode].values())
            print(f"\n{mode}: agreement {same}/{n} = {100 * same / n:.2f}%")
            for kind in total:
                print(
                    f"  {kind:<22} {agree[mode][kind]:>5}/{total[kind]:<5} agree   "
                    f"({accepted[mode][kind]} accepted by skyrl)"
                )
            for kind, cases in differ[mode].items():
                for task_id, gold, pred, want, got in cases[: args.show]:
                    print(f"  DIFFERS [{kind}] {task_id}: official {want}, skyrl {got}")
                    print(f"    gold: {gold}\n    pred: {pred}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
