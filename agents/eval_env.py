"""Environment evaluation: a model on an environment's tasks (accuracy, pass@k), as
`skyrl eval --env` runs it.

    ref = ModelRef("tiny")                   # or a run's checkpoint (skyrl_cli.eval_run resolves)
    report, records, out = evaluate_env(opts, cfg, ref, progress)

No Ray: the policy runs in this process behind a `SamplingClient` (`HFEngine`, or
`OpenAIEngine` for a server), and the episodes go through the same agent loop and
`agents.evaluate.evaluate` as training. Writes `report.json` and `results.jsonl` (one
trajectory per line) to the output folder; the caller files the report under a run's `eval/`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from agents.agent_loop import Budget, GenerateFn
from agents.chat import ChatFormat
from agents.engine import GenRequest, GenResult
from agents.sampling import Local, SamplingClient
from tasks.task import Task, load_tasks, select_split


@dataclass
class ModelRef:
    """What `--model` named, resolved."""

    spec: str
    """As the user typed it."""
    path: Path | None = None
    """Local HF folder to load (None for an `openai:` model)."""
    run_dir: Path | None = None
    """The run the checkpoint belongs to, when the model is a run or one of its checkpoints."""
    step: int | None = None
    """The checkpoint's training step."""
    openai: tuple[str, str] | None = None
    """(model name, base URL) of an OpenAI-compatible server."""


@dataclass
class Policy:
    """A loaded model, as the agent loop needs it."""

    chat: ChatFormat
    sample: Callable[[list[GenRequest], float, float], list[GenResult]]
    """(requests, temperature, top_p) -> results."""
    chars_per_token: int = 1
    """1 for token engines; the `openai` engine counts characters (budgets are scaled)."""

    def generate_fn(self, temperature: float, top_p: float = 1.0) -> GenerateFn:
        return lambda reqs: self.sample(reqs, temperature, top_p)


@dataclass
class EnvEvalOptions:
    """The flags of `skyrl eval --env`."""

    model: str
    env: str | None = None
    split: str | None = None
    tasks: Path | None = None
    n_samples: int = 1
    temperature: float | None = None
    limit: int | None = None
    output: Path | None = None
    max_turns: int | None = None
    seed: int = 0
    tracking: bool = True
    sets: list[str] = field(default_factory=list)


class EvalBar(Protocol):
    """A live progress line over an evaluation's episodes: called with each batch's size."""

    def __call__(self, n: int) -> None: ...

    def done(self) -> None: ...


def load_policy(ref: ModelRef, threads: int = 0, engine: str = "hf") -> Policy:
    """Load the model behind `ref` in this process, on `engine` (a row of the engine table;
    an `openai:` model is always the `openai` engine, evaluation only)."""
    from agents import engines

    if ref.openai is not None:
        from agents.engine_openai import CHARS_PER_TOKEN

        api = engines.build("openai", ref.spec)
        sampler = SamplingClient(Local(api))
        return Policy(
            ChatFormat(api.tokenizer),
            lambda r, t, p: sampler.generate(r, t, p).result(),
            CHARS_PER_TOKEN,
        )
    engines.require(engine, weights=True)  # not installed: one sentence before the load
    from transformers.utils import logging as hf_logging

    from agents.models import resolve_model

    hf_logging.disable_progress_bar()  # our own progress line follows; no tqdm bars
    path = ref.path or resolve_model(ref.spec)
    local = engines.build(engine, path, threads=engines.torch_threads(threads))
    sampler = SamplingClient(Local(local))
    return Policy(ChatFormat(local.tokenizer), lambda r, t, p: sampler.generate(r, t, p).result())


def load_eval_tasks(cfg: Any, opts: EnvEvalOptions) -> tuple[list[Task], str]:
    """The tasks to score and the label of where they came from (split or file name)."""
    from environments import registry

    spec = registry.resolve(cfg.env.name, cfg.environments)
    split = opts.split or cfg.eval.split
    if opts.tasks is not None:
        tasks, label = load_tasks(opts.tasks), opts.tasks.stem
        if opts.split and any(t.split for t in tasks):
            tasks = [t for t in tasks if t.split == opts.split]
    elif cfg.env.tasks:
        path = Path(cfg.env.tasks)
        if not path.is_absolute() and cfg.project_dir:
            path = Path(cfg.project_dir) / path
        tasks, label = load_tasks(path), split  # a run's held-out part with eval.holdout
        tasks = select_split(tasks, split, holdout=cfg.eval.holdout, eval_split=cfg.eval.split)
    else:
        # dev, test and train are every suite's; a suite with more (sql's `transfer-*`)
        # refuses an unknown one itself, naming those it accepts
        tasks, label = registry.bundled_tasks(spec, split), split
    tasks = tasks[: opts.limit] if opts.limit else tasks
    if not tasks:
        raise ValueError(f"no tasks to evaluate for env {cfg.env.name!r} ({label})")
    return tasks, label


def evaluate_env(
    opts: EnvEvalOptions, cfg: Any, ref: ModelRef, progress: Callable[[int, str], EvalBar]
) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    """Load the policy, run every episode, write the output folder. `cfg` is the run
    configuration to evaluate under; `progress(episodes, label)` makes the live line.
    Returns the report, one record per trajectory, and the output folder. ValueError (one
    sentence) for bad input."""
    from agents.evaluate import evaluate
    from environments import registry

    tasks, label = load_eval_tasks(cfg, opts)
    spec = registry.resolve(cfg.env.name, cfg.environments)
    project = Path(cfg.project_dir) if cfg.project_dir else None
    spec.check(cfg.env.kwargs, project)  # env.kwargs as train checks them, before the model loads
    temperature = opts.temperature
    if temperature is None:
        temperature = 1.0 if opts.n_samples > 1 else 0.0
    note(f"loading {opts.model} ...")
    policy = load_policy(ref, cfg.trainer.threads, cfg.rollout.engine)
    make_env = partial(
        registry.make_env, spec, project, max_turns=cfg.env.max_turns, **cfg.env.kwargs
    )
    cpt = policy.chars_per_token
    budget = Budget(cfg.rollout.max_new_tokens * cpt, cfg.rollout.max_total_tokens * cpt)
    n_episodes = len(tasks) * opts.n_samples
    mode = "greedy" if temperature == 0 else f"temperature {temperature:g}"
    note(f"evaluating {len(tasks)} {cfg.env.name} tasks ({label}) x {opts.n_samples} ({mode})")
    start = time.time()
    bar = progress(n_episodes, label)  # one live line with our ETA, as in training
    with ThreadPoolExecutor(cfg.rollout.env_workers) as pool:
        report, trajs = evaluate(
            policy.generate_fn(temperature),
            make_env,
            policy.chat,
            tasks,
            budget,
            pool,
            opts.seed,
            samples=opts.n_samples,
            on_done=bar,
        )
    bar.done()
    step = ref.step or 0
    name = f"{label}-step-{step:06d}" + (f"-k{opts.n_samples}" if opts.n_samples > 1 else "")
    report.update(
        name=name,
        step=step,
        split=label,
        env=cfg.env.name,
        model=opts.model,
        temperature=temperature,
        wall_s=round(time.time() - start, 2),
    )
    records = [
        {**t.to_record(step), "sample": i % opts.n_samples, "correct": _correct(t)}
        for i, t in enumerate(trajs)
    ]
    out = opts.output or Path("evals") / f"{cfg.env.name}-{label}-{_stamp()}"
    write_outputs(out, report, records)
    return report, records, out


def _correct(traj: Any) -> bool:
    from agents.evaluate import is_correct

    return is_correct(traj)


def _stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    os.replace(tmp, path)


def write_outputs(out: Path, report: dict[str, Any], records: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    write_jsonl(out / "results.jsonl", records)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
