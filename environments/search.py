"""`skyrl/Search-v0`: answer a question by searching a passage index, then `<answer>`.

Action grammar (the model's text; `stop_strings` end generation at a closing tag):

    <search>keywords</search>   the top-k passages (default 3), numbered, with titles
    <answer>short text</answer>  ends the episode; graded against the accepted answers

Tag rule (as in the SQL environment): the FIRST opening `<search>` or `<answer>` is the
action; text before it (reasoning) and after its closing tag is ignored. An unclosed tag,
a tag inside the body or an empty body is malformed: an error observation, reward 0, and
the turn is spent.

Retrieval is local by default: the bundled corpus's SQLite FTS5 index (`tasks.search`),
ranked by bm25, or any index built with `tasks.search.build_index` (`index=PATH`). A query
is never handed to FTS5 as syntax: its words are quoted one by one and joined with OR, so
quotes, `*`, `NEAR(`, `-` and column filters are plain text. With `retriever_url=...` the
environment POSTs Search-R1's `/retrieve` JSON instead (`environments.search_server`
serves our index in that shape); network failures are observations too.

Rewards: `<answer>` scores the normalised exact match (SQuAD rule: lowercase, no
punctuation, no articles, collapsed whitespace) against any accepted answer, or the best
token F1 with `reward="f1"`; `info` carries both. Searches and malformed turns score 0.
Running out of turns without an answer truncates with reward `-format_penalty`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import string
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from environments import text_env
from environments.spaces import ActionError as ActionError  # re-exported: parse_action raises it
from tasks.task import Task

MAX_OBSERVATION_CHARS = 100_000
MAX_QUERY_TERMS = 32
"""Words of a query beyond this many are ignored (keeps every search sub-millisecond)."""
MAX_TOP_K = 50
GRAMMAR = "Use <search>keywords</search> to search or <answer>short answer</answer> to answer."
TITLE_WEIGHT = 2.0
"""bm25 weight of the title column relative to the text column."""

TAGS = text_env.Tags("search", "answer")
_TERM = re.compile(r"[^\W_]+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_STOPWORD_TEXT = (
    "a an and are as at be by did do does for from had has have how in into is it its of "
    "on or that the this to was were what when where which who whom whose why with"
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
"""Question words dropped from queries (kept when a query holds nothing else)."""


class SearchError(RuntimeError):
    """A search could not run: an empty query, a broken index, an unreachable server."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    title: str
    text: str
    score: float
    """Higher is better (the negated bm25 locally; the server's score over HTTP)."""
    pid: str = ""
    """Passage id when the retriever reports one."""


# ---------------------------------------------------------------------------- grading


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised accepted answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """Best SQuAD token F1 of the prediction against the accepted answers."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


# ---------------------------------------------------------------------------- parsing


def parse_action(text: str) -> tuple[str, str]:
    """Return (tag, body) of the first `<search>` / `<answer>` tag; ActionError if malformed."""
    return TAGS.parse(text)


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression that can never be a syntax error: the query's words, each
    quoted, joined with OR (bm25 ranks passages holding more and rarer words first).
    None when the text holds no word."""
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(text)))
    content = [t for t in terms if t not in STOPWORDS] or terms
    if not content:
        return None
    return " OR ".join(f'"{t}"' for t in content[:MAX_QUERY_TERMS])


# ---------------------------------------------------------------------------- retrieval


def open_index(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to an FTS5 index built by `tasks.search.build_index`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"search index {path} does not exist")
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)


def search_index(conn: sqlite3.Connection, query: str, k: int) -> list[Hit]:
    """The top-k passages for a free-text query, best first; SearchError if it cannot run."""
    match = fts_query(query)
    if match is None:
        raise SearchError("the query has no searchable words")
    try:
        rows = conn.execute(
            f"SELECT title, text, bm25(passages, {TITLE_WEIGHT}, 1.0) AS rank, pid "
            "FROM passages WHERE passages MATCH ? ORDER BY rank LIMIT ?",
            (match, max(1, min(k, MAX_TOP_K))),
        ).fetchall()
    except sqlite3.Error as e:  # a broken or foreign index file; never the query's syntax
        raise SearchError(f"the search index failed ({e})") from None
    return [Hit(title, text, -rank, pid) for title, text, rank, pid in rows]


def _hit_from_json(item: Any) -> Hit:
    """A Search-R1 result item: {"document": {"contents": '"Title"\\ntext'}, "score": s},
    or the bare document when scores are off; `title`/`text` keys are accepted too."""
    document = item.get("document", item) if isinstance(item, dict) else None
    if not isinstance(document, dict):
        raise SearchError("the retriever returned an item that is not a JSON object")
    if "contents" in document:
        title, _, text = str(document["contents"]).partition("\n")
        title = title.strip().strip('"')
    else:
        title, text = str(document.get("title", "")), str(document.get("text", ""))
    score = item.get("score", 0.0)
    score = float(score) if isinstance(score, int | float) else 0.0
    return Hit(_clean(title), _clean(text), score, str(document.get("id", "")))


def retrieve_http(url: str, query: str, k: int, timeout_s: float) -> list[Hit]:
    """POST one query to a Search-R1-style `/retrieve` endpoint; SearchError on any failure."""
    if fts_query(query) is None:
        raise SearchError("the query has no searchable words")
    body = json.dumps({"queries": [query], "topk": k, "return_scores": True}).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            payload = json.loads(response.read(10_000_000))
        results = payload["result"][0]
        if not isinstance(results, list):
            raise TypeError("result[0] is not a list")
    except urllib.error.HTTPError as e:
        raise SearchError(f"the retriever answered HTTP {e.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise SearchError(f"the retriever at {url} is unreachable ({e})") from None
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise SearchError(f"the retriever's reply is not Search-R1 JSON ({e})") from None
    return [_hit_from_json(item) for item in results[:k]]


def format_hits(hits: Sequence[Hit], max_passage_chars: int) -> str:
    """Numbered passages, `Doc 1 (Title: ...) text`, each text cut at max_passage_chars."""
    lines = []
    for i, hit in enumerate(hits, 1):
        text = " ".join(hit.text.split())
        if len(text) > max_passage_chars:
            text = text[: max(0, max_passage_chars - 3)] + "..."
        lines.append(f"Doc {i} (Title: {hit.title}) {text}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- helpers


def _clean(text: str) -> str:
    """Text safe to log and tokenize: lone surrogates (from JSON escapes) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _answers(task: Task) -> list[str]:
    answer = task.answer
    answers = [answer] if isinstance(answer, str) else answer
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise ValueError(f"task {task.id!r}: `answer` must be a string or a list of strings")
    if not any(normalize_answer(a) for a in answers):
        raise ValueError(f"task {task.id!r} has no non-empty accepted answer")
    return answers


def _bundled_index() -> Path:
    from tasks.search import index_path

    return index_path()


# ---------------------------------------------------------------------------- environment


class SearchEnv(gym.Env):
    """Search a passage index for evidence, then answer in a few words."""

    grammar = "<search>query</search> shows the top-k passages; <answer>text</answer> answers"
    stop_strings = TAGS.stop_strings
    report_by = ("hops", "difficulty")  # metadata keys evaluation reports break accuracy down by

    def __init__(
        self,
        max_turns: int = 4,
        top_k: int = 3,
        format_penalty: float = 0.1,
        reward: str = "em",
        index: str | None = None,
        retriever_url: str | None = None,
        timeout_s: float = 5.0,
        max_passage_chars: int = 300,
        **kwargs: Any,
    ) -> None:
        self.max_turns = text_env.turn_limit(max_turns)
        """Turns per episode, the answer included."""
        if retriever_url is not None and not retriever_url.startswith(("http://", "https://")):
            raise ValueError(f"retriever_url must start with http:// or https://: {retriever_url}")
        self.top_k = text_env.in_range("top_k", top_k, 1, MAX_TOP_K)
        """Passages shown per search."""
        self.format_penalty = format_penalty
        """Reward (negated) of an episode that ends without an <answer>."""
        self.reward_kind = text_env.one_of("reward", reward, ("em", "f1"))
        """`em`: normalised exact match; `f1`: best token F1."""
        self.index = index
        """FTS5 index path; else the task's `metadata.index`; else the bundled corpus."""
        self.retriever_url = retriever_url
        """Search-R1-style `/retrieve` URL; when set, it replaces the local index."""
        self.timeout_s = timeout_s
        """HTTP timeout per search."""
        self.max_passage_chars = max_passage_chars
        """Each passage's text is cut to this many characters in observations."""
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self._connections: dict[Path, sqlite3.Connection] = {}
        self._conn: sqlite3.Connection | None = None
        self._task: Task | None = None
        self._answers: list[str] = []
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on `options["task"]`, or on a task drawn from the bundled train suite.

        A broken task (no accepted answer, a missing index) raises ValueError here, so
        that `step` never has to."""
        super().reset(seed=seed)
        task = text_env.episode_task(self, options, lambda: text_env.train_suite("search"))
        self._answers = _answers(task)
        if self.retriever_url is None:
            index = self.index or task.metadata.get("index")
            path = Path(index).expanduser().resolve() if index else _bundled_index()
            if path not in self._connections:
                self._connections[path] = open_index(path)
            self._conn = self._connections[path]
        self._task, self._turns_left = task, self.max_turns
        observation = (
            "Answer the question using a search engine over a knowledge base.\n"
            f"Question: {text_env.user_text(task)}\n"
            f"Send <search>keywords</search> to see the top {self.top_k} passages, and reply "
            "with a short answer inside <answer></answer>, e.g. <answer>Paris</answer>. "
            f"Turns left: {self._turns_left}"
        )
        info = {"turns_left": self._turns_left, "error": None, "task_id": task.id}
        return observation[:MAX_OBSERVATION_CHARS], info

    @text_env.tag_step(parse_action, GRAMMAR)
    def step(self, action: tuple[str, str]) -> text_env.Step:
        tag, body = action
        if tag == "answer":
            return self._grade(body)
        try:
            hits = self.search(body)
        except SearchError as e:
            return self._next_turn(f"Error: {e}. {GRAMMAR}", str(e))
        if not hits:
            return self._next_turn("No passages match that query; try other keywords.", None)
        return self._next_turn(format_hits(hits, self.max_passage_chars), None)

    def search(self, query: str) -> list[Hit]:
        """The top-k hits for a query from the configured retriever; SearchError on failure."""
        if self.retriever_url is not None:
            return retrieve_http(self.retriever_url, query, self.top_k, self.timeout_s)
        if self._conn is None:
            raise SearchError("no index is open; call reset() first")
        return search_index(self._conn, query, self.top_k)

    def demonstration(self, task: Task) -> list[str] | None:
        """A search for each gold passage in turn, by its title (the entity the question or
        the passage before names), then the first accepted answer: what a model that
        searches well writes, for the supervised warm-up (`warmup.sft_steps`). None unless
        every search shows its gold passage and the last one shows the answer within the
        cut passages, so the demonstration never teaches a guess. Needs the local index
        (called after `reset` on `task`) and `metadata.gold_passages`; one search per turn
        with a turn left for the answer."""
        gold = task.metadata.get("gold_passages")
        if self._conn is None or not isinstance(gold, list) or not gold:
            return None
        if len(gold) >= self.max_turns or not all(isinstance(pid, str) for pid in gold):
            return None
        answer = _answers(task)[0]
        actions, shown = [], ""
        for pid in gold:
            row = self._conn.execute("SELECT title FROM passages WHERE pid = ?", (pid,)).fetchone()
            if row is None:
                return None
            try:
                hits = self.search(row[0])
            except SearchError:
                return None
            if pid not in {hit.pid for hit in hits}:
                return None
            actions.append(f"<search>{row[0]}</search>")
            shown = format_hits(hits, self.max_passage_chars)
        if normalize_answer(answer) not in normalize_answer(shown):
            return None
        return [*actions, f"<answer>{answer}</answer>"]

    def _next_turn(self, body: str, error: str | None) -> text_env.Step:
        """An observation for a turn that did not end the episode, unless it was the last one."""
        if self._turns_left > 0:
            return text_env.next_turn(body, error, self._turns_left, "use it for <answer>")
        self._task = None
        return text_env.out_of_turns(body, error, self.format_penalty, "an <answer>")

    def _grade(self, prediction: str) -> text_env.Step:
        self._task = None
        em, f1 = exact_match(prediction, self._answers), token_f1(prediction, self._answers)
        reward = em if self.reward_kind == "em" else f1
        return text_env.verdict(em == 1.0, self._turns_left, reward, em=em, f1=f1)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._conn = self._task = None
