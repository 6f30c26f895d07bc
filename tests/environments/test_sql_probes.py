"""`probe_when: unsure`: a warm-up demonstration looks first only where the question does
not name what the answer needs, and then at those tables (environments/sql_probes.py)."""

from __future__ import annotations

import pytest

from environments.sql import SQLEnv
from environments.sql_probes import named, question_words, tables_to_probe
from tasks.sql import load_suite
from tasks.task import Task


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYRL_CACHE_DIR", str(tmp_path_factory.mktemp("skyrl-cache")))
        yield


@pytest.mark.parametrize(
    ("identifier", "question", "expected"),
    [
        ("orderItems", "What is the highest quantity of any order item?", True),
        ("book", "What is the average price of all books?", True),
        ("cities", "List the distinct city of the shoppers.", True),
        ("cty", "List the distinct cities of the shoppers.", False),  # abbreviated
        ("n_food_kg", "Add up the amount of food in kilograms.", False),  # prefixed, unit
        ("alert", "How many warnings are about heat?", False),  # a synonym
        ("opened_yr", "an opening year greater than 1994", False),
    ],
)
def test_an_identifier_is_named_when_every_word_of_it_is_in_the_question(
    identifier: str, question: str, expected: bool
) -> None:
    assert named(identifier, question_words(question)) is expected


def test_the_tables_to_look_at_are_those_the_question_leaves_unsure() -> None:
    zoo = "SELECT SUM(n_food_kg) FROM t_feeding"
    assert tables_to_probe(zoo, "Add up the food of every one of the feedings.", "unsure") == [
        "t_feeding"
    ]
    join = "SELECT s.name FROM station AS s JOIN alert AS a ON a.station = s.name"
    # the alert table is unsure (the question says warnings); the station is named, and so
    # are its columns (station, name)
    assert tables_to_probe(join, "Name each station with a warning.", "unsure") == ["alert"]
    assert tables_to_probe(join, "Name each station with an alert.", "unsure") == []
    # an unqualified column of a join that the question does not name: its table is not
    # written, so both are looked at
    loose = "SELECT kind FROM station JOIN alert ON alert.station = station.name"
    assert tables_to_probe(loose, "Which station alert names?", "unsure") == ["station", "alert"]
    # random: every table of the gold query, whatever the question says
    assert tables_to_probe(join, "Name each station with an alert.", "random") == [
        "station",
        "alert",
    ]
    assert tables_to_probe("SELEC nothing", "?", "unsure") == []


def _task(question: str, answer: str) -> Task:
    return Task(
        id=question,
        env="sql",
        prompt=question,
        answer=answer,
        metadata={"database": "weather"},
    )


def test_an_unsure_demonstration_probes_the_unsure_table_and_a_named_one_answers_at_once() -> None:
    env = SQLEnv(max_turns=3, probe_share=1.0, probe_when="unsure")
    sure = _task("How many stations are there?", "SELECT COUNT(*) FROM station")
    assert env.demonstration(sure) == "<solution>SELECT COUNT(*) FROM station</solution>"
    unsure = _task(
        "How many warnings are about heat?", "SELECT COUNT(*) FROM alert WHERE kind = 'heat'"
    )
    assert env.demonstration(unsure) == [
        "<sql>SELECT * FROM alert LIMIT 3</sql>",
        "<solution>SELECT COUNT(*) FROM alert WHERE kind = 'heat'</solution>",
    ]
    # `random` (the default) probes the first kind too, with the same share
    assert isinstance(SQLEnv(max_turns=3, probe_share=1.0).demonstration(sure), list)
    with pytest.raises(ValueError, match="unknown probe_when 'always'; known: random, unsure"):
        SQLEnv(probe_when="always")


def test_unsure_probes_the_unseen_convention_databases_far_more_than_the_seen_ones() -> None:
    """The rule on the bundled transfer splits (what the lever's measurement rests on): the
    dev databases named unlike train (weather, zoo) are nearly all unsure, the seen ones
    about half."""
    by_db: dict[str, list[bool]] = {}
    for t in load_suite("transfer-dev"):
        unsure = bool(tables_to_probe(t.answer, str(t.prompt), "unsure"))
        by_db.setdefault(str(t.metadata["database"]), []).append(unsure)
    share = {db: sum(v) / len(v) for db, v in by_db.items()}
    assert share["weather"] > 0.9 and share["zoo"] > 0.9, share
    seen = [share[db] for db in ("airline", "bookshop", "hospital", "university")]
    assert max(seen) < 0.7, share
