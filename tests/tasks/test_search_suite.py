"""The bundled search suite: a deterministic corpus, answerable questions, a cached index."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

import tasks.search as search_suite
from environments.search import open_index, search_index
from tasks.search import corpus, fact_passages, index_path, load_suite
from tasks.search.corpus import render
from tasks.search.world import generate_world

# words that point a search at one kind of passage, as an agent would add them
ROLE_WORDS = {
    "bio": "born",
    "career": "worked",
    "profile": "founded headquartered",
    "geo": "city river",
    "capital": "capital",
    "course": "flows sea",
    "maker": "manufactured",
    "origin": "invented",
}


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private cache dir for this module, so the user's ~/.cache is never touched."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("skyrl-cache")
        mp.setenv("SKYRL_CACHE_DIR", str(path))
        yield path


def _digest(seed: int) -> str:
    passages, _ = render(generate_world(seed))
    blob = json.dumps([asdict(p) for p in passages], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()


# ----------------------------------------------------------------------------- corpus


def test_same_seed_gives_byte_identical_passages_in_any_process():
    assert _digest(search_suite.SEED) == _digest(search_suite.SEED)
    assert _digest(1) != _digest(2)
    # another interpreter with another hash seed: no set or dict order leaks into the text
    code = (
        "import hashlib, json, dataclasses, tasks.search as s\n"
        "blob = json.dumps([dataclasses.asdict(p) for p in s.corpus()], ensure_ascii=False)\n"
        "print(hashlib.sha256(blob.encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True
    )
    assert out.stdout.strip() == _digest(search_suite.SEED)


def test_the_bundled_corpus_and_questions_are_the_pinned_ones():
    """The index is cached under VERSION: a change to the passages or questions (templates
    in passages.yaml, questions.py, world.py) must come with a VERSION bump and new pins."""
    blob = json.dumps([asdict(p) for p in corpus()], ensure_ascii=False).encode()
    assert hashlib.sha256(blob).hexdigest() == (
        "2f79e54d107e006d6f53de8f18617fe91c3b3e6bc10a65e6c2d90263487a323e"
    )
    blob = json.dumps([t.to_json() for t in load_suite(None)], ensure_ascii=False).encode()
    assert hashlib.sha256(blob).hexdigest() == (
        "d8a29a4cb6e21f91afe7e6c7bb1f78414cf4a93639237af7e46bb80b3c30a242"
    )
    assert search_suite.VERSION == "v1"


def test_corpus_size_and_shape():
    passages = corpus()
    assert 2000 <= len(passages) <= 5000
    assert [p.id for p in passages] == [f"p{i:05d}" for i in range(len(passages))]
    for p in passages:
        assert p.title and p.title == p.title.strip()
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", p.text) if s]
        assert 1 <= len(sentences) <= 4, p
        assert p.contents == f'"{p.title}"\n{p.text}'
    titles = collections.Counter(p.title for p in passages)
    assert len(titles) > 1500  # many entities, most with 2-3 passages


def test_generation_and_indexing_are_fast(tmp_path):
    start = time.perf_counter()
    passages, _ = render(generate_world(777))  # a seed nothing has cached
    search_suite.build_index(passages, tmp_path / "fresh.sqlite")
    assert time.perf_counter() - start < 2.0


# ----------------------------------------------------------------------------- questions


def test_suite_size_splits_and_fields():
    suite = load_suite(None)
    assert len(suite) >= 600
    assert len({t.id for t in suite}) == len(suite)
    assert len({t.prompt for t in suite}) == len(suite)
    splits = {s: load_suite(s) for s in search_suite.SPLITS}
    assert sum(len(v) for v in splits.values()) == len(suite)
    assert len(splits["dev"]) >= 60 and len(splits["test"]) >= 60
    hops = collections.Counter(t.metadata["hops"] for t in suite)
    assert set(hops) == {1, 2, 3} and hops[1] >= 300 and hops[2] >= 200
    for split, tasks in splits.items():
        assert {t.metadata["hops"] for t in tasks} == {1, 2, 3}, split
    for t in suite:
        assert t.env == "search" and t.prompt.endswith("?")
        assert isinstance(t.answer, list) and all(isinstance(a, str) and a for a in t.answer)
        assert t.metadata["difficulty"] == {1: "easy", 2: "medium", 3: "hard"}[t.metadata["hops"]]
        assert len(t.metadata["gold_passages"]) == t.metadata["hops"]
        assert not any(a.lower() in t.prompt.lower() for a in t.answer), t  # nothing leaks
    with pytest.raises(ValueError, match="unknown split"):
        load_suite("validation")


def test_every_answer_is_stated_by_the_last_gold_passage_and_each_bridge_by_the_one_before():
    by_id = {p.id: p for p in corpus()}
    for t in load_suite(None):
        gold = [by_id[pid] for pid in t.metadata["gold_passages"]]
        assert t.answer[0] in gold[-1].text, t
        for earlier, later in zip(gold, gold[1:], strict=False):
            assert later.title in earlier.text, (t.id, earlier, later)


def test_single_hop_gold_passage_is_in_the_top_3_for_the_question_itself():
    conn = open_index(index_path())
    missed = [
        t.id
        for t in load_suite(None)
        if t.metadata["hops"] == 1
        and t.metadata["gold_passages"][0] not in [h.pid for h in search_index(conn, t.prompt, 3)]
    ]
    conn.close()
    assert not missed


def test_every_later_hop_is_found_by_its_bridge_entity_and_a_relation_word():
    role_of = {pid: key[2] for key, pid in fact_passages().items()}
    by_id = {p.id: p for p in corpus()}
    conn = open_index(index_path())
    missed = []
    for t in load_suite(None):
        for pid in t.metadata["gold_passages"][1:]:
            query = f"{by_id[pid].title} {ROLE_WORDS[role_of[pid]]}"
            if pid not in [h.pid for h in search_index(conn, query, 3)]:
                missed.append((t.id, query))
    conn.close()
    assert not missed


# ----------------------------------------------------------------------------- index


def test_index_is_built_once_atomically_and_keyed_by_version_and_seed(cache):
    path = index_path()
    assert path.parent == cache / "search"
    assert path.name == f"corpus-{search_suite.VERSION}-s{search_suite.SEED}.sqlite"
    stamp = path.stat().st_mtime_ns
    assert index_path() == path and path.stat().st_mtime_ns == stamp  # not rebuilt
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".build-")]
    conn = open_index(path)
    count = conn.execute("SELECT COUNT(*) FROM passages").fetchone()[0]
    conn.close()
    assert count == len(corpus())
    other = index_path(seed=5)
    assert other != path and other.name.endswith("-s5.sqlite")
