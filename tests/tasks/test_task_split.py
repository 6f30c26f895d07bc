"""Issue 13, item 4: a task file without `split`, and `eval.holdout`'s seeded held-out part."""

from __future__ import annotations

import pytest

from tasks.task import Task, select_split


def _tasks(n: int, split: str | None = None) -> list[Task]:
    return [Task(id=f"t{i}", env="math", prompt=f"q{i}", split=split) for i in range(n)]


def test_a_split_file_is_filtered_by_split():
    tasks = _tasks(3, "train") + _tasks(2, "dev")
    assert len(select_split(tasks, "train")) == 3
    assert [t.split for t in select_split(tasks, "dev")] == ["dev", "dev"]
    with pytest.raises(ValueError, match="eval.holdout"):
        select_split(tasks, "train", holdout=0.2)


def test_an_unsplit_file_is_every_split_without_holdout():
    tasks = _tasks(5)
    assert select_split(tasks, "train") == tasks == select_split(tasks, "dev")


def test_holdout_is_disjoint_sized_and_independent_of_order():
    tasks = _tasks(20)
    train = select_split(tasks, "train", holdout=0.1, eval_split="dev")
    dev = select_split(tasks, "dev", holdout=0.1, eval_split="dev")
    assert len(dev) == 2 and len(train) == 18
    assert {t.id for t in train}.isdisjoint({t.id for t in dev})
    shuffled = tasks[::-1]
    dev_again = select_split(shuffled, "dev", holdout=0.1, eval_split="dev")
    assert {t.id for t in dev_again} == {t.id for t in dev}
    # a file that grows keeps most of its held-out tasks: the choice is per id, not per index
    grown = select_split(_tasks(40), "dev", holdout=0.1, eval_split="dev")
    assert len(grown) == 4


def test_holdout_keeps_at_least_one_task_on_each_side():
    tasks = _tasks(3)
    assert len(select_split(tasks, "dev", holdout=0.01, eval_split="dev")) == 1
    assert len(select_split(tasks, "train", holdout=0.99, eval_split="dev")) == 1
