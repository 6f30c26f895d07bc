"""The multi-turn agent loop: the model acts, the environment answers, until done.

All episodes of a step advance together, one turn at a time: every live episode's next
model turn is one batched `generate` call, then the environments step in parallel
threads. Token-in/token-out: each trajectory's `token_ids` are the prompt, then exactly
the ids the engine sampled (loss mask 1), then the template's ids for each observation
(loss mask 0).

An environment that raises is recorded on its trajectory (`error`) and the episode ends;
the caller excludes it from the update. It never fails the step.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agents.chat import ChatFormat
from agents.engine import GenRequest, GenResult
from agents.trajectory import Trajectory, Turn
from environments.contract import Extras
from tasks.task import Task

GenerateFn = Callable[[list[GenRequest]], list[GenResult]]


@dataclass
class Budget:
    """Limits of one episode."""

    max_new_tokens: int
    """Per model turn."""
    max_total_tokens: int
    """Prompt plus every turn."""


def episode_seed(*parts: int | str) -> int:
    """A stable 63-bit seed from (run seed, step, task, sample, turn...)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass
class _Episode:
    traj: Trajectory
    env: gym.Env
    seed: int
    done: bool = False


def run_episodes(
    generate: GenerateFn,
    make_env: Callable[[], gym.Env],
    chat: ChatFormat,
    tasks: list[Task],
    group_ids: list[int],
    seeds: list[int],
    budget: Budget,
    pool: ThreadPoolExecutor,
) -> list[Trajectory]:
    """Run one episode per task (tasks may repeat: a group is the same task G times)."""
    episodes = list(
        pool.map(lambda a: _start(make_env, chat, *a), zip(tasks, group_ids, seeds, strict=True))
    )
    turn = 0
    while live := [e for e in episodes if not e.done]:
        requests = []
        for e in live:
            _add_prefix(chat, e)
            room = budget.max_total_tokens - len(e.traj.token_ids)
            requests.append(
                GenRequest(
                    prompt_ids=list(e.traj.token_ids),
                    max_new_tokens=max(1, min(budget.max_new_tokens, room)),
                    seed=episode_seed(e.seed, turn),
                    stop=Extras.of(e.env).stop_strings,
                )
            )
            e.traj.turn_limits.append(requests[-1].max_new_tokens)
        t0 = time.perf_counter()
        results = generate(requests)
        gen_s = (time.perf_counter() - t0) / len(live)
        list(
            pool.map(
                lambda a: _advance(chat, budget, *a),
                zip(live, results, [gen_s] * len(live), strict=True),
            )
        )
        turn += 1
    for e in episodes:
        if e.env is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                e.env.close()
    return [e.traj for e in episodes]


def _start(
    make_env: Callable[[], gym.Env], chat: ChatFormat, task: Task, group: int, seed: int
) -> _Episode:
    traj = Trajectory(task_id=task.id, group_id=group)
    env: Any = None
    try:
        env = make_env()
        obs, info = env.reset(seed=seed % 2**31, options={"task": task})
        system = Extras.of(env).system_prompt
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": obs}
        ]
        traj.turns = [Turn(m["role"], m["content"]) for m in messages]
        traj.token_ids = chat.prompt_ids(messages)
        traj.prompt_len = len(traj.token_ids)
        traj.loss_mask = [0] * traj.prompt_len
        traj.logprobs = [0.0] * traj.prompt_len
        return _Episode(traj, env, seed)
    except Exception as e:  # noqa: BLE001 - a broken env fails its episode, not the step
        traj.error = f"reset failed: {type(e).__name__}: {e}"
        traj.stop_reason = "error"
        return _Episode(traj, env, seed, done=True)


def demonstration(
    make_env: Callable[[], gym.Env], chat: ChatFormat, task: Task, seed: int
) -> tuple[list[int], list[int], int] | None:
    """A supervised example for `task`: (token ids, loss mask, prompt length), laid out
    exactly as an episode would be (the same prompt and response prefix), with the
    environment's reference answer as the model's tokens (mask 1). None when the
    environment cannot write one (it has no `demonstration`, or returns None).

    A demonstration may be several turns (a list of actions, such as a search and then the
    answer): they are replayed through the environment, so the observations between them
    are its own (mask 0), exactly as a sampled episode would hold them. A replay that ends
    before its last action, or whose last action does not end the episode with a positive
    reward, is no demonstration (None)."""
    e = _start(make_env, chat, task, 0, seed)
    try:
        write = Extras.of(e.env).demonstration if e.env is not None else None
        if e.done or write is None or (written := write(task)) is None:
            return None
        replay = not isinstance(written, str)  # a list of turns; a string is one answer
        actions: list[str] = [written] if isinstance(written, str) else list(written)
        if not actions:
            return None
        ids, mask = e.traj.token_ids, e.traj.loss_mask
        prefix = Extras.of(e.env).response_prefix
        for i, action in enumerate(actions):
            _add_prefix(chat, e)
            action_ids = chat.tokenizer(action, add_special_tokens=False)["input_ids"]
            ids += action_ids
            mask += [1] * len(action_ids)
            if not replay:
                break
            try:
                obs, reward, terminated, truncated, _ = e.env.step(prefix + action)
            except Exception:  # noqa: BLE001 - as in an episode: this example fails, not the run
                return None
            last = i == len(actions) - 1
            if (terminated or truncated) != last or (last and float(reward) <= 0):
                return None
            if not last:
                obs_ids = chat.observation_ids(obs, model_ended_turn=False)
                ids += obs_ids
                mask += [0] * len(obs_ids)
        return ids, mask, e.traj.prompt_len
    finally:
        if e.env is not None:
            with contextlib.suppress(Exception):
                e.env.close()


def _add_prefix(chat: ChatFormat, e: _Episode) -> None:
    """An environment may start each model turn with fixed text (e.g. an opening tag).

    Those tokens are the environment's (mask 0); the action the environment sees is the
    prefix plus what the model wrote."""
    prefix = Extras.of(e.env).response_prefix
    if prefix:
        ids = chat.tokenizer(prefix, add_special_tokens=False)["input_ids"]
        e.traj.token_ids.extend(ids)
        e.traj.loss_mask.extend([0] * len(ids))
        e.traj.logprobs.extend([0.0] * len(ids))


def _advance(chat: ChatFormat, budget: Budget, e: _Episode, res: GenResult, gen_s: float) -> None:
    traj = e.traj
    traj.timings["generate"] = traj.timings.get("generate", 0.0) + gen_s
    traj.token_ids.extend(res.token_ids)
    traj.loss_mask.extend([1] * len(res.token_ids))
    traj.logprobs.extend(res.logprobs)
    traj.versions.append(res.version)
    traj.token_versions.extend(res.token_versions or [res.version] * len(res.token_ids))
    traj.turn_tokens.append(len(res.token_ids))
    traj.num_turns += 1
    traj.cut_off = traj.cut_off or res.finish_reason == "length"
    text = Extras.of(e.env).response_prefix + chat.tokenizer.decode(
        res.token_ids, skip_special_tokens=True
    )
    traj.turns.append(Turn("assistant", text))
    t0 = time.perf_counter()
    try:
        obs, reward, terminated, truncated, info = e.env.step(text)
    except Exception as err:  # noqa: BLE001 - recorded, excluded from the update
        traj.error = f"step failed: {type(err).__name__}: {err}"
        traj.stop_reason = "error"
        e.done = True
        return
    finally:
        traj.timings["env"] = traj.timings.get("env", 0.0) + time.perf_counter() - t0
    traj.reward += float(reward)
    traj.info = {
        k: v for k, v in info.items() if isinstance(v, str | int | float | bool | type(None))
    }
    if terminated or truncated:
        traj.stop_reason = "terminated" if terminated else "truncated"
        if obs:
            traj.turns.append(Turn("user", obs))
        e.done = True
        return
    obs_ids = chat.observation_ids(obs, model_ended_turn=res.finish_reason == "eos")
    if len(traj.token_ids) + len(obs_ids) + 1 >= budget.max_total_tokens:
        traj.stop_reason = "token_budget"
        e.done = True
        return
    traj.turns.append(Turn("user", obs))
    traj.token_ids.extend(obs_ids)
    traj.loss_mask.extend([0] * len(obs_ids))
    traj.logprobs.extend([0.0] * len(obs_ids))
