"""pass@k by hand, the metadata breakdown, and the openai engine's character codec."""

from __future__ import annotations

import pytest

from agents.chat import ChatFormat
from agents.engine_openai import TextTokenizer, parse_chatml, parse_spec
from trainers.evaluate import ks_for, pass_at_k


def test_pass_at_k_matches_hand_computation() -> None:
    # n=5 samples, c=2 correct, k=1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4 (= c/n)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # k=3: 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    # k=4: n-c=3 < 4, so every draw of 4 holds a correct one: 1.0
    assert pass_at_k(5, 2, 4) == 1.0
    # n=10, c=1, k=5: 1 - C(9,5)/C(10,5) = 1 - 126/252 = 0.5
    assert pass_at_k(10, 1, 5) == pytest.approx(0.5)
    # nothing correct: 0 for every k
    assert pass_at_k(4, 0, 4) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_reported_ks() -> None:
    assert ks_for(1) == [1]
    assert ks_for(3) == [1, 2, 3]
    assert ks_for(8) == [1, 2, 4, 8]


def test_text_tokenizer_round_trips_a_chat_through_chat_format() -> None:
    chat = ChatFormat(TextTokenizer())
    ids = chat.prompt_ids(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    )
    reply = "<answer>4</answer>"
    ids += [ord(c) for c in reply]
    ids += chat.observation_ids("Wrong format.", model_ended_turn=False)
    messages = parse_chatml(chat.tokenizer.decode(ids))
    assert messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Wrong format."},
    ]


def test_openai_spec() -> None:
    assert parse_spec("openai:gpt-4o-mini@https://api.openai.com/v1") == (
        "gpt-4o-mini",
        "https://api.openai.com/v1",
    )
    assert parse_spec("openai:org/m@http://127.0.0.1:8000/") == (
        "org/m",
        "http://127.0.0.1:8000/v1",
    )
    with pytest.raises(ValueError, match="openai:MODEL@BASE_URL"):
        parse_spec("openai:gpt-4o")
