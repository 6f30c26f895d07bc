"""What `benchmarks/learning.py` reads of a seed's run: its evaluations' reports and, from
their trajectories, which episodes probed (`<sql>` before `<solution>`), which were right,
and why the wrong answers were wrong; the bundled SQL databases' naming conventions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PROBE = re.compile(r"<sql>", re.I)


@dataclass
class Probes:
    """One evaluation's episodes split by whether the policy ran a `<sql>` probe before
    its `<solution>` (or before giving up)."""

    n: int = 0
    probed: int = 0
    probed_correct: int = 0
    plain_correct: int = 0
    sql_tagged: int = 0  # episodes that wrote a <sql> or <solution> tag: an SQL environment's
    episodes: list[tuple[str, bool]] = field(default_factory=list)  # (task id, probed)
    outcomes: list[tuple[str, bool, bool]] = field(default_factory=list)  # (id, probed, right)
    kinds: list[tuple[str, str]] = field(default_factory=list)  # (task id, one of KINDS)

    @property
    def rate(self) -> float:
        return 100 * self.probed / max(1, self.n)

    def acc(self, probed: bool) -> tuple[float | None, int]:
        """Accuracy (%) of the episodes with (or without) a probe, and how many there were."""
        k = self.probed if probed else self.n - self.probed
        right = self.probed_correct if probed else self.plain_correct
        return (100 * right / k if k else None), k


KINDS = ("right", "wrong rows", "unknown table", "unknown column", "other SQL error", "no answer")
"""What the SQL environment said of an episode's answer (`failure_kind`)."""


_UNKNOWN = {  # SQLite's, DuckDB's and PostgreSQL's words for a name the schema lacks
    "unknown table": re.compile(
        r"no such table|Table with name .* does not exist|relation .* does not exist"
    ),
    "unknown column": re.compile(
        r"no such column|column .* not found|column .* does not exist", re.I
    ),
}


def failure_kind(said: str, info: dict[str, Any], correct: bool) -> str:
    """One of KINDS for an episode: right; no `<solution>` at all; the answer's SQL error,
    split by whether it named a table or a column the schema lacks; or it ran and returned
    other rows (the environment's `info["error"]` is None)."""
    if correct:
        return "right"
    if "<solution>" not in said:
        return "no answer"
    error = info.get("error")
    if not error:
        return "wrong rows"
    return next((k for k, pat in _UNKNOWN.items() if pat.search(error)), "other SQL error")


def probes(path: Path) -> Probes:
    """Count the probing episodes of an eval's trajectories (`eval/NAME.jsonl`)."""
    p = Probes()
    if not path.exists():
        return p
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        said = "".join(t["text"] for t in rec["turns"] if t["role"] == "assistant")
        probed = bool(_PROBE.search(said.split("<solution>")[0]))
        info = rec.get("info") or {}
        correct = bool(info["correct"]) if "correct" in info else rec["reward"] >= 1.0
        p.n += 1
        p.probed += probed
        p.probed_correct += probed and correct
        p.plain_correct += (not probed) and correct
        p.sql_tagged += probed or "<solution>" in said
        p.episodes.append((rec["task_id"], probed))
        p.outcomes.append((rec["task_id"], probed, correct))
        p.kinds.append((rec["task_id"], failure_kind(said, info, correct)))
    return p


def subset(p: Probes, databases: set[str]) -> Probes:
    """The episodes of some SQL databases only (task ids `sql-<database>-...`)."""
    q = Probes()
    for task, probed, correct in p.outcomes:
        if task.split("-")[1:2] and task.split("-")[1] in databases:
            q.n += 1
            q.probed += probed
            q.probed_correct += probed and correct
            q.plain_correct += (not probed) and correct
            q.sql_tagged += 1
            q.episodes.append((task, probed))
            q.outcomes.append((task, probed, correct))
    return q


def convention(database: str) -> tuple[str, str]:
    """A bundled SQL database's naming convention ("plural snake_case") and whether train
    shows it ("yes", or "no" for a held-out database); ("-", "-") for any other."""
    from tasks import sql
    from tasks.sql import domains, transfer

    if database not in sql.DATABASES and not transfer.is_transfer_database(database):
        return "-", "-"
    shared = domains.load(database.partition(transfer.SEP)[0]).split == "shared"
    return sql.convention(database), "yes" if shared else "no"


def group(database: str) -> str | None:
    """`seen` when train renderings use a bundled database's naming convention, `unseen`
    when none does; None for a database that is not bundled."""
    from tasks import sql
    from tasks.sql import transfer

    if database not in sql.DATABASES and not transfer.is_transfer_database(database):
        return None
    return "seen" if transfer.convention_seen(database) else "unseen"


@dataclass
class Checkpoint:
    """One checkpoint's evaluation on one split: its report and its episodes' probes."""

    report: dict[str, Any]
    probes: Probes


@dataclass
class Seed:
    seed: int
    run: Path
    wall_s: float | None = None
    start: dict[str, Any] = field(default_factory=dict)  # warm-up report (or before)
    final: dict[str, Any] = field(default_factory=dict)
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, reward/mean)
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, dev accuracy)
    eval_s: float | None = None
    start_probes: Probes = field(default_factory=Probes)
    final_probes: Probes = field(default_factory=Probes)
    # another split (`--test-split`) scored at both checkpoints: split -> (start, final)
    extra: dict[str, tuple[Checkpoint, Checkpoint]] = field(default_factory=dict)

    @property
    def delta(self) -> float:
        return 100 * (self.final["accuracy"] - self.start["accuracy"])
