"""SearchEnv: answer grading, grammar, FTS5 query safety, episodes, HTTP retrieval."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

import tasks.search as search_suite
from environments.search import (
    ActionError,
    SearchEnv,
    exact_match,
    fts_query,
    normalize_answer,
    parse_action,
    token_f1,
)
from environments.search_server import serve_index
from tasks.task import Task

SLACK_S = 1.0  # two shared cores: leave room for a busy machine


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private cache dir for this module, so the user's ~/.cache is never touched."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("skyrl-cache")
        mp.setenv("SKYRL_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def server():
    srv = serve_index(search_suite.index_path())
    yield srv
    srv.shutdown()
    srv.server_close()


def by_template(name: str) -> Task:
    return next(t for t in search_suite.load_suite("train") if t.metadata["template"] == name)


def task(answer: str | list[str] = "Oren River", question: str = "Which river?") -> Task:
    return Task(id="s1", env="search", prompt=question, answer=answer)


# ---------------------------------------------------------------------------- grading


def test_normalize_answer_follows_squad():
    assert normalize_answer("  The Oren-River!  ") == "orenriver"
    assert normalize_answer("An apple, a pear and THE plum.") == "apple pear and plum"
    assert normalize_answer("theatre Anna") == "theatre anna"  # articles only as words


def test_exact_match_by_hand():
    assert exact_match("the oren river.", ["Oren River"]) == 1.0
    assert exact_match("Oren", ["Oren River", "Oren"]) == 1.0
    assert exact_match("Oren River delta", ["Oren River"]) == 0.0
    assert exact_match("", ["Oren River"]) == 0.0


def test_token_f1_by_hand():
    # pred {oren}, gold {oren, river}: precision 1, recall 1/2 -> 2/3
    assert token_f1("Oren", ["Oren River"]) == pytest.approx(2 / 3)
    # pred {big, oren, river}: common 2, precision 2/3, recall 1 -> 0.8
    assert token_f1("the big Oren river", ["Oren River"]) == pytest.approx(0.8)
    # the best of the accepted answers counts
    assert token_f1("Velmora", ["Velmora, Ostrand", "Velmora"]) == 1.0
    assert token_f1("Ostrand", ["Velmora"]) == 0.0
    assert token_f1("river river", ["river"]) == pytest.approx(2 / 3)  # multiset overlap


# ---------------------------------------------------------------------------- grammar


def test_parse_action_takes_the_first_tag():
    assert parse_action("hmm <search> a b </search><answer>x</answer>") == ("search", "a b")
    assert parse_action("<answer>Oren</answer><search>x</search>") == ("answer", "Oren")


@pytest.mark.parametrize(
    "text",
    [
        "Oren River",
        "<search>query",
        "<search>q</answer>",
        "<search><search>q</search></search>",
        "<answer>a <search>q</search></answer>",
        "<answer>  </answer>",
        "<SEARCH>q</SEARCH>",
    ],
)
def test_parse_action_rejects_malformed(text):
    with pytest.raises(ActionError):
        parse_action(text)


def test_fts_query_quotes_every_word_and_drops_question_words():
    assert fts_query('Who founded "Brask Press"?') == '"founded" OR "brask" OR "press"'
    # "a" and "or" are question words: dropped like "who" (they are never FTS5 operators)
    assert fts_query("NEAR(a b) OR -c* title:d") == '"near" OR "b" OR "c" OR "title" OR "d"'
    assert fts_query("who is the") == '"who" OR "is" OR "the"'  # only stopwords: keep them
    assert fts_query('"* - ^ ( ) : _ ') is None
    assert fts_query("x " * 1000).count('"') == 2  # deduplicated
    assert fts_query(" ".join(f"w{i}" for i in range(100))).count(" OR ") == 31


# ---------------------------------------------------------------------------- episodes


def test_first_observation_names_the_question_the_tags_and_the_turns():
    env = SearchEnv()
    t = by_template("born_city")
    obs, info = env.reset(options={"task": t})
    assert t.prompt in obs and "<search>" in obs and "<answer>" in obs
    assert obs.endswith("Turns left: 4") and len(obs) < 500
    assert info == {"turns_left": 4, "error": None, "task_id": t.id}


def test_two_hop_episode_solved_by_scripted_actions():
    t = by_template("founder_birth_country")
    world = search_suite.world()
    company = t.prompt.removeprefix(
        "In which country is the city where the founder of "
    ).removesuffix(" was born?")
    founder = world.companies[company].founder
    env = SearchEnv()
    env.reset(options={"task": t})
    obs, reward, terminated, truncated, info = env.step(
        f"I need the founder. <search>{t.prompt}</search>"
    )
    assert founder in obs and obs.startswith("Doc 1 (Title: ") and obs.endswith("Turns left: 3")
    assert (reward, terminated, truncated, info) == (
        0.0,
        False,
        False,
        {"turns_left": 3, "error": None},
    )
    obs, reward, *_ = env.step(f"<search>{founder} born</search>")
    assert t.answer[0] in obs and obs.endswith("Turns left: 2") and reward == 0.0
    obs, reward, terminated, truncated, info = env.step(f"<answer>{t.answer[0]}</answer>")
    assert (obs, reward, terminated, truncated) == ("Correct.", 1.0, True, False)
    assert info == {"turns_left": 1, "error": None, "correct": True, "em": 1.0, "f1": 1.0}


def test_demonstration_searches_each_gold_passage_by_title_then_answers():
    """Every dev task gets one, one search per hop, and replayed it earns full reward; a
    demonstration that could only guess (the answer cut from the passages, too few turns,
    a gold passage the index does not hold) is None."""
    env = SearchEnv()
    for t in search_suite.load_suite("dev"):
        env.reset(options={"task": t})
        actions = env.demonstration(t)
        assert actions is not None and len(actions) == t.metadata["hops"] + 1, t.id
        assert all(a.startswith("<search>") for a in actions[:-1])
        assert actions[-1] == f"<answer>{t.answer[0]}</answer>"
        env.reset(options={"task": t})
        for i, action in enumerate(actions):
            obs, reward, terminated, truncated, _ = env.step(action)
            assert (terminated, truncated) == (i == len(actions) - 1, False)
            if i == len(actions) - 2:
                assert t.answer[0] in obs  # the last search shows the answer
        assert reward == 1.0
    t = by_template("founder_birth_country")
    company = t.prompt.removeprefix("In which country is the city where the founder of ")
    env.reset(options={"task": t})
    first = env.demonstration(t)[0]
    assert first == f"<search>{company.removesuffix(' was born?')}</search>"
    cut = SearchEnv(max_passage_chars=12)
    cut.reset(options={"task": t})
    assert cut.demonstration(t) is None
    short = SearchEnv(max_turns=2)  # two hops need three turns
    short.reset(options={"task": t})
    assert short.demonstration(t) is None
    lost = Task(
        id="x", env="search", prompt="q", answer="Oren", metadata={"gold_passages": ["p99999"]}
    )
    env.reset(options={"task": lost})
    assert env.demonstration(lost) is None
    env.reset(options={"task": task()})  # a user task without gold passages
    assert env.demonstration(task()) is None


def test_wrong_and_partial_answers_em_versus_f1():
    env = SearchEnv()
    env.reset(options={"task": task()})
    obs, reward, terminated, _, info = env.step("<answer>the Oren delta</answer>")
    assert (obs, reward, terminated) == ("Incorrect.", 0.0, True)
    assert info["em"] == 0.0 and info["f1"] == pytest.approx(0.5)  # P 1/2, R 1/2
    assert "Oren River" not in obs  # the gold answer is not leaked
    f1_env = SearchEnv(reward="f1")
    f1_env.reset(options={"task": task()})
    assert f1_env.step("<answer>the Oren delta</answer>")[1] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="reward"):
        SearchEnv(reward="bleu")


def test_turn_budget_truncates_with_penalty_and_reminds():
    env = SearchEnv(max_turns=3, format_penalty=0.25)
    env.reset(options={"task": task()})
    obs, reward, terminated, truncated, info = env.step("just text")
    assert obs.startswith("Error: no <search> or <answer> tag found") and info["error"]
    assert obs.endswith("Turns left: 2") and (reward, terminated, truncated) == (0.0, False, False)
    obs, *_ = env.step("<search>river</search>")
    assert obs.endswith("Turns left: 1 (use it for <answer>)")
    obs, reward, terminated, truncated, info = env.step("<search>river</search>")
    assert (reward, terminated, truncated) == (-0.25, False, True) and "Turns left: 0" in obs
    assert info == {"turns_left": 0, "error": None, "correct": False}
    obs, reward, terminated, *_ = env.step("<answer>Oren River</answer>")
    assert terminated and reward == 0.0 and "reset()" in obs


def test_top_k_and_passage_truncation():
    env = SearchEnv(top_k=5, max_passage_chars=40)
    env.reset(options={"task": task()})
    obs, *_ = env.step("<search>river flows sea</search>")
    docs = obs.splitlines()[:-1]
    assert [d.split(" (")[0] for d in docs] == [f"Doc {i}" for i in range(1, 6)]
    assert all(len(d.split(") ", 1)[1]) <= 40 for d in docs)


def test_reset_rejects_tasks_without_answers_and_missing_indexes(tmp_path):
    with pytest.raises(ValueError, match="answer"):
        SearchEnv().reset(options={"task": task(answer=None)})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not exist"):
        SearchEnv(index=str(tmp_path / "none.sqlite")).reset(options={"task": task()})


def test_gymnasium_check_env_and_seeded_reset():
    env = SearchEnv()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    assert not [w for w in caught if "not within the observation space" in str(w.message)]
    assert env.reset(seed=3)[0] == env.reset(seed=3)[0]
    env.close()


# ---------------------------------------------------------------------------- hostile input

HOSTILE_QUERIES = [
    '"',
    '"unbalanced',
    "*",
    "NEAR(",
    "NEAR(river sea, 2)",
    "OR",
    "AND OR NOT",
    "-",
    "-river",
    "title:river",
    "{title text}: river",
    "^river",
    "river*",
    "'); DROP TABLE passages; --",
    "\x00river\x00",
    "\u202e\u0000\ufeff",
    "\u6cb3\u6d41 \U0001f30a",
    "river " * 15_000,  # 90 kB, under the action limit
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
def test_hostile_queries_are_observations(query):
    env = SearchEnv()
    env.reset(options={"task": task()})
    start = time.monotonic()
    obs, reward, terminated, truncated, info = env.step(f"<search>{query}</search>")
    assert time.monotonic() - start < SLACK_S
    assert isinstance(obs, str) and obs.endswith("Turns left: 3")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs.startswith(("Doc 1", "Error: the query has no searchable words", "No passages"))


@pytest.mark.parametrize(
    "action",
    [
        "<search>" + "x" * 1_000_000 + "</search>",  # 1 MB
        "<answer>Oren River</answer>" + "x" * 1_000_000,
        "<search>\ud800 river</search>",  # a lone surrogate
        b"<search>caf\xff\xfe river</search>",  # not UTF-8
        "\udcff<search>river</search>",
        "<search>river",
        "<search><answer>Oren River</answer></search>",
        "<search></search>",
        "</search>",
        "",
        None,
        12345,
    ],
    ids=range(12),
)
def test_garbage_actions_are_observations(action):
    env = SearchEnv()
    env.reset(options={"task": task()})
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and obs.endswith("Turns left: 3")
    obs.encode("utf-8")  # no lone surrogates leak into what gets logged and tokenized
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert set(info) == {"turns_left", "error"}


# ---------------------------------------------------------------------------- HTTP mode


def test_http_mode_over_loopback_equals_local_mode(server):
    local, remote = SearchEnv(), SearchEnv(retriever_url=server.url)
    assert server.url.startswith("http://127.0.0.1:")
    t = by_template("inventor_birth_city")
    for query in [t.prompt, "river flows sea", "NEAR( * -", "who founded", "zzzqqq"]:
        local.reset(options={"task": t})
        remote.reset(options={"task": t})
        action = f"<search>{query}</search>"
        assert remote.step(action)[0] == local.step(action)[0], query


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_server_speaks_search_r1_json_and_refuses_bad_requests(server):
    body = {"queries": ["river flows sea", ""], "topk": 2, "return_scores": True}
    status, reply = _post(server.url, json.dumps(body).encode())
    assert status == 200 and len(reply["result"]) == 2 and reply["result"][1] == []
    first = reply["result"][0][0]
    assert set(first) == {"document", "score"} and first["document"]["contents"].startswith('"')
    status, reply = _post(server.url, json.dumps({"queries": ["sea"]}).encode())
    assert status == 200 and set(reply["result"][0][0]) == {"id", "contents"}  # no scores
    assert len(reply["result"][0]) == 3
    for bad in [b"not json", b"[]", b'{"queries": [1]}', b'{"queries": ["a"], "topk": 0}']:
        assert _post(server.url, bad)[0] == 400, bad
    assert _post(server.url.replace("/retrieve", "/other"), b"{}")[0] == 404


def test_http_failures_are_observations(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    silent = socket.socket()  # accepts connections (kernel backlog) but never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    urls = {
        f"http://127.0.0.1:{closed_port}/retrieve": "unreachable",
        f"http://127.0.0.1:{silent.getsockname()[1]}/retrieve": "unreachable",
        server.url.replace("/retrieve", "/nope"): "HTTP 404",
    }
    try:
        for url, message in urls.items():
            env = SearchEnv(retriever_url=url, timeout_s=0.3)
            env.reset(options={"task": task()})
            start = time.monotonic()
            obs, reward, terminated, truncated, info = env.step("<search>river</search>")
            assert time.monotonic() - start < 0.3 + SLACK_S
            assert message in obs and info["error"] and obs.endswith("Turns left: 3"), obs
            assert (reward, terminated, truncated) == (0.0, False, False)
    finally:
        silent.close()
    with pytest.raises(ValueError, match="http"):
        SearchEnv(retriever_url="file:///etc/passwd")


def test_environment_modules_import_no_heavy_frameworks():
    code = (
        "import sys, environments.search, environments.search_server, tasks.search\n"
        "print(sorted({'torch', 'ray', 'mlflow', 'vllm'} & set(sys.modules)))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() == "[]", out.stderr
