"""The bundled search suite: a seeded fictional-world corpus, its questions, its FTS5 index.

Everything is generated from syllables and a fixed seed (no download), so every machine
renders byte-identical passages and the same questions, and no model knows an answer
without searching:

    from tasks.search import corpus, index_path, load_suite
    task = load_suite("dev")[0]   # prompt: the question; answer: accepted strings
    task.metadata                 # {"hops": 2, "difficulty": "medium", "gold_passages": [...], ...}
    index_path()                  # SQLite FTS5 index (bm25) of corpus(), built once per machine

The index lives in `<cache>/search/corpus-<VERSION>-s<SEED>.sqlite`; a new VERSION or SEED
names a new file, so a change rebuilds it. It is written to a temp file and renamed, so a
reader sees a complete index or none. Questions split 80/10/10 train/dev/test within each
template, so every split holds every kind of question.
"""

from __future__ import annotations

import functools
import os
import random
import sqlite3
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tasks.cache import cache_dir
from tasks.search.corpus import Passage, render
from tasks.search.questions import DIFFICULTY_OF_HOPS, Question, generate
from tasks.search.world import World, generate_world
from tasks.task import Task

__all__ = [
    "SEED",
    "SPLITS",
    "VERSION",
    "Passage",
    "build_index",
    "corpus",
    "fact_passages",
    "index_path",
    "load_suite",
    "world",
]

VERSION = "v1"
"""Bump when the generator or the index layout changes, so old caches are not reused."""
SEED = 20261130
"""The bundled world's seed."""
SPLITS = ("train", "dev", "test")
FTS_TABLE = "passages"
"""The FTS5 table: columns `title`, `text` (indexed) and `pid` (stored only)."""
TOKENIZER = "unicode61 remove_diacritics 2"


@functools.cache
def world(seed: int = SEED) -> World:
    """The fictional world the corpus and questions describe."""
    return generate_world(seed)


@functools.cache
def _rendered(seed: int) -> tuple[tuple[Passage, ...], dict[tuple[str, str, str], str]]:
    passages, gold = render(world(seed))
    return tuple(passages), gold


def corpus(seed: int = SEED) -> list[Passage]:
    """Every passage of the world, in a fixed order (ids `p00000`, `p00001`, ...)."""
    return list(_rendered(seed)[0])


def fact_passages(seed: int = SEED) -> dict[tuple[str, str, str], str]:
    """The gold passage id of every fact: (kind, entity, role) -> pid, e.g.
    ("person", "Dorav Kelmun", "bio") -> "p01234" (see `tasks.search.corpus`)."""
    return dict(_rendered(seed)[1])


def build_index(passages: Iterable[Passage], path: str | Path) -> Path:
    """Write an FTS5 index of passages to path, atomically (temp file, then rename).

    A user's own corpus works the same way: build an index from their passages and pass
    it to `SearchEnv(index=...)`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".build-", suffix=".sqlite", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.execute(
                f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5("
                f"title, text, pid UNINDEXED, tokenize = '{TOKENIZER}')"
            )
            conn.executemany(
                f"INSERT INTO {FTS_TABLE} (title, text, pid) VALUES (?, ?, ?)",
                ((p.title, p.text, p.id) for p in passages),
            )
            conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")
            conn.commit()
        finally:
            conn.close()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def index_path(seed: int = SEED) -> Path:
    """The FTS5 index of `corpus(seed)`, built into the cache dir on first use."""
    path = cache_dir() / "search" / f"corpus-{VERSION}-s{seed}.sqlite"
    if not path.exists():
        build_index(corpus(seed), path)
    return path


def _split_labels(n: int, seed: str) -> list[str]:
    """80/10/10 train/dev/test labels for n items, shuffled by seed (dev and test >= 1)."""
    n_dev = n_test = max(1, round(n * 0.1))
    labels = ["dev"] * n_dev + ["test"] * n_test + ["train"] * max(0, n - n_dev - n_test)
    labels = labels[:n]
    random.Random(seed).shuffle(labels)
    return labels


def _task(i: int, q: Question, split: str, gold: dict[tuple[str, str, str], str]) -> Task:
    return Task(
        id=f"search-{i:04d}",
        env="search",
        prompt=q.text,
        answer=list(q.answers),
        split=split,
        metadata={
            "hops": q.hops,
            "difficulty": DIFFICULTY_OF_HOPS[q.hops],
            "template": q.template,
            "gold_passages": [gold[key] for key in q.gold],
        },
    )


@functools.cache
def _suite(seed: int) -> tuple[Task, ...]:
    gold = _rendered(seed)[1]
    questions = generate(world(seed), seed)
    by_template: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_template.setdefault(q.template, []).append(i)
    split_of: dict[int, str] = {}
    for template, members in by_template.items():
        labels = _split_labels(len(members), f"skyrl-search-{VERSION}-{seed}-{template}")
        split_of.update(zip(members, labels, strict=True))
    return tuple(_task(i, q, split_of[i], gold) for i, q in enumerate(questions))


def load_suite(split: str | None = None, seed: int = SEED) -> list[Task]:
    """The bundled questions of one split (`train`, `dev`, `test`), or all for None."""
    if split is not None and split not in SPLITS:
        raise ValueError(
            f"unknown split '{split}'; accepted: {', '.join(SPLITS)} (or None for all)"
        )
    return [t for t in _suite(seed) if split is None or t.split == split]
