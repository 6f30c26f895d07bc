"""The multi-turn agent loop on the real tiny model and HF engine with real environments."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

from agents.agent_loop import Budget, demonstration, episode_seed, run_episodes
from agents.chat import ChatFormat
from agents.engine import GenRequest, GenResult
from agents.engine_hf import HFEngine
from agents.models import resolve_model
from environments.spaces import TextSpace
from tasks.task import Task


@pytest.fixture(scope="module")
def engine():
    return HFEngine(resolve_model("tiny", quiet=True))


class EchoEnv(gym.Env):
    """Three turns; the observation says which turn it is; turn n earns reward n."""

    stop_strings = ()
    response_prefix = ""

    def __init__(self, max_turns=3, crash_on=None, **_):
        self.observation_space = self.action_space = TextSpace(10_000)
        self.max_turns, self.crash_on, self.n = max_turns, crash_on, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return options["task"].prompt, {}

    def step(self, action):
        self.n += 1
        if self.crash_on == self.n:
            raise RuntimeError("sandbox died")
        done = self.n >= self.max_turns
        return f"observation {self.n}", float(self.n), done, False, {"turn": self.n}


def _run(engine, make_env, n=2, budget=Budget(8, 4096)):
    chat = ChatFormat(engine.tokenizer)
    tasks = [Task(id=f"t{i}", env="echo", prompt=f"hello {i}") for i in range(n)]
    gen = lambda reqs: engine.generate(reqs, temperature=1.0)  # noqa: E731
    with ThreadPoolExecutor(2) as pool:
        return run_episodes(
            gen,
            make_env,
            chat,
            tasks,
            list(range(n)),
            [episode_seed(0, i) for i in range(n)],
            budget,
            pool,
        )


def test_multi_turn_tokens_masks_and_text_line_up(engine):
    trajs = _run(engine, EchoEnv)
    for t in trajs:
        assert (
            t.error is None
            and t.num_turns == 3
            and t.stop_reason == "terminated"
            and t.reward == 6.0
        )  # 1 + 2 + 3
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        assert t.loss_mask[: t.prompt_len] == [0] * t.prompt_len
        # environment observations are in the token stream with mask 0
        env_text = engine.tokenizer.decode(
            [i for i, m in zip(t.token_ids, t.loss_mask, strict=True) if m == 0]
        )
        assert "observation 1" in env_text and "observation 2" in env_text
        # model tokens are exactly what was sampled: their log-probs are real (< 0)
        assert all(lp < 0 for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m == 1)
        assert [turn.role for turn in t.turns] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]


def test_same_seeds_same_episodes(engine):
    a, b = _run(engine, EchoEnv), _run(engine, EchoEnv)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]


def test_a_crashing_environment_fails_its_episode_only(engine):
    envs = iter([EchoEnv(crash_on=2), EchoEnv()])
    trajs = _run(engine, lambda: next(envs))
    assert (
        trajs[0].error == "step failed: RuntimeError: sandbox died"
        and trajs[0].stop_reason == "error"
    )
    assert trajs[1].error is None and trajs[1].reward == 6.0


def test_token_budget_ends_the_episode(engine):
    (t,) = _run(engine, EchoEnv, n=1, budget=Budget(8, 40))
    assert t.stop_reason == "token_budget" and len(t.token_ids) < 40


def test_each_model_turn_records_its_tokens_and_its_limit(engine):
    """The limit is max_new_tokens, or the room max_total_tokens leaves (DAPO's overlong
    penalty judges each turn against the limit that bounded it)."""
    chat = ChatFormat(engine.tokenizer)
    prompt_len = len(chat.prompt_ids([{"role": "user", "content": "hello 0"}]))
    obs_len = len(chat.observation_ids("observation 1", model_ended_turn=False))
    # room for the prompt, a full turn of 8, the observation and 3 tokens: the second turn's
    # limit is 3
    total = prompt_len + 8 + obs_len + 3
    never_ends = lambda reqs: [  # noqa: E731
        GenResult([50] * r.max_new_tokens, [-1.0] * r.max_new_tokens, "length", 0) for r in reqs
    ]
    with ThreadPoolExecutor(1) as pool:
        (t,) = run_episodes(
            never_ends,
            lambda: EchoEnv(max_turns=2),
            chat,
            [Task(id="t", env="echo", prompt="hello 0")],
            [0],
            [1],
            Budget(8, total),
            pool,
        )
    assert t.turn_tokens == [8, 3] and t.turn_limits == [8, 3] and t.cut_off


def test_response_prefix_is_environment_text_before_each_model_turn():
    class Recorder:
        version = 0

        def __init__(self, tok):
            self.tok, self.prompts = tok, []

        def __call__(self, reqs: list[GenRequest]) -> list[GenResult]:
            self.prompts += [r.prompt_ids for r in reqs]
            ids = self.tok("7</answer>", add_special_tokens=False)["input_ids"]
            return [GenResult(ids, [-0.5] * len(ids), "stop", 0) for _ in reqs]

    class Prefixed(EchoEnv):
        response_prefix = "<answer>"

        def step(self, action):
            self.seen = action
            return "", 1.0, True, False, {"action": action}

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny", quiet=True))
    gen = Recorder(tok)
    with ThreadPoolExecutor(1) as pool:
        (t,) = run_episodes(
            gen,
            Prefixed,
            ChatFormat(tok),
            [Task(id="a", env="x", prompt="q")],
            [0],
            [1],
            Budget(8, 512),
            pool,
        )
    prefix_ids = tok("<answer>", add_special_tokens=False)["input_ids"]
    assert gen.prompts[0][-len(prefix_ids) :] == prefix_ids  # the model continues after the tag
    assert t.info["action"] == "<answer>7</answer>"  # the environment sees prefix + model text
    start = t.prompt_len
    assert t.loss_mask[start : start + len(prefix_ids)] == [0] * len(prefix_ids)
    assert t.loss_mask[start + len(prefix_ids) :] == [1] * (
        len(t.token_ids) - start - len(prefix_ids)
    )


def test_a_multi_turn_demonstration_is_replayed_with_the_environments_observations():
    """The warm-up's example for a list of actions: the actions are the model's tokens
    (mask 1), the observations between them the environment's own (mask 0), laid out as
    `run_episodes` lays out a sampled episode; a replay that ends early is no example."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny", quiet=True))
    chat = ChatFormat(tok)

    class Demonstrating(EchoEnv):
        response_prefix = "<a>"

        def demonstration(self, task):
            return ["1</a>", "2</a>", "3</a>"]

    task = Task(id="d", env="echo", prompt="count")
    ids, mask, prompt_len = demonstration(Demonstrating, chat, task, 5)
    want = chat.prompt_ids([{"role": "user", "content": "count"}])
    assert prompt_len == len(want) and ids[:prompt_len] == want
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for n in (1, 2):
        want += enc("<a>") + enc(f"{n}</a>")
        want += chat.observation_ids(f"observation {n}", model_ended_turn=False)
    want += enc("<a>") + enc("3</a>")
    assert ids == want
    trained = [t for t, m in zip(ids, mask, strict=True) if m]
    assert trained == enc("1</a>") + enc("2</a>") + enc("3</a>")
    # two turns in a three-action demonstration: the episode ends before its last action
    assert demonstration(lambda: Demonstrating(max_turns=2), chat, task, 5) is None
    assert demonstration(lambda: Demonstrating(crash_on=2), chat, task, 5) is None

    class Unrewarded(Demonstrating):
        def step(self, action):
            obs, _, *rest = super().step(action)
            return (obs, 0.0, *rest)

    assert demonstration(Unrewarded, chat, task, 5) is None
