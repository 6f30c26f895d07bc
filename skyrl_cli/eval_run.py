"""`skyrl eval --env`: score a model on an environment's tasks (accuracy, pass@k).

    skyrl eval --env math --model tiny --split dev --limit 20
    skyrl eval --model runs/<id>                      # the run's env, config and last checkpoint
    skyrl eval --env sql --model openai:gpt-4o-mini@https://api.openai.com/v1 --n-samples 4

No Ray: the policy runs in this process behind a `SamplingClient` (`HFEngine`, or
`OpenAIEngine` for a server), and the episodes go through the same agent loop and
`agents.evaluate.evaluate` as training.
Writes `report.json` and `results.jsonl` (one trajectory per line) to the output folder,
logs to MLflow, and, when the model is a run, files the report under the run's `eval/`.
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
from typing import Any

from agents.agent_loop import Budget, GenerateFn
from agents.chat import ChatFormat
from agents.engine import GenRequest, GenResult
from agents.sampling import Local, SamplingClient
from tasks.task import Task, load_tasks, select_split

SPLITS = ("dev", "test", "train")


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


def resolve_eval_model(spec: str) -> ModelRef:
    """A run dir (latest checkpoint), a checkpoint dir, `openai:M@URL`, a preset, a folder or
    an HF id; ValueError in one sentence when it names nothing usable."""
    from agents.models import PRESETS

    if spec.startswith("openai:"):
        from agents.engine_openai import parse_spec

        return ModelRef(spec, openai=parse_spec(spec))
    path = Path(spec).expanduser()
    if (path / "config.yaml").is_file() and (path / "checkpoints").is_dir():
        from trainers.rundir import RunDir

        ckpt = RunDir(path).latest_checkpoint()
        if ckpt is None:
            raise ValueError(
                f"run {spec} has no complete checkpoint yet; train it for a step first"
            )
        if (ckpt / "model" / "adapter_config.json").is_file():  # LoRA: the merged final model
            if not (path / "model" / "config.json").is_file():
                raise ValueError(f"run {spec} trains LoRA and has not finished; its merged model is written to {path / 'model'} when it does")  # fmt: skip # the one-sentence message stays on one line
            return ModelRef(spec, path / "model", path, _step_of(ckpt))
        return ModelRef(spec, ckpt / "model", path, _step_of(ckpt))
    if (path / "model" / "adapter_config.json").is_file():
        raise ValueError(f"checkpoint {spec} holds a LoRA adapter; evaluate its run (merged model) instead")  # fmt: skip # the one-sentence message stays on one line
    if (path / "trainer_state.json").is_file() and (path / "model").is_dir():
        return ModelRef(spec, path / "model", path.parent.parent, _step_of(path))
    if not path.exists() and spec not in PRESETS and _looks_local(path):
        raise ValueError(
            f"{spec} does not exist (no run directory, checkpoint or model folder there)"
        )
    if spec not in PRESETS and not path.exists() and spec.count("/") != 1:
        raise ValueError(
            f"unknown model {spec!r}; use a run directory, a checkpoint, a preset "
            f"({', '.join(PRESETS)}), an HF folder or id, or openai:MODEL@BASE_URL"
        )
    return ModelRef(spec, path=None)


def _step_of(ckpt: Path) -> int:
    return int(json.loads((ckpt / "trainer_state.json").read_text())["step"])


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
    local = engines.build(engine, path, threads=threads or os.cpu_count() or 1)
    sampler = SamplingClient(Local(local))
    return Policy(ChatFormat(local.tokenizer), lambda r, t, p: sampler.generate(r, t, p).result())


def eval_config(opts: EnvEvalOptions, ref: ModelRef) -> Any:
    """The run's saved config (when the model is a run and --env is absent or the same), else
    the embedded defaults for --env (plus ./skyrl.yaml's user environments), plus --set."""
    from trainers.config import build_config, load_saved_config, parse_set, read_yaml

    layers: list[dict[str, Any]] = []
    if ref.run_dir is not None:
        saved = load_saved_config(ref.run_dir / "config.yaml")
        if opts.env is None or opts.env == saved.env.name:
            layers.append(saved.model_dump(mode="json"))
    if not layers:
        if opts.env is None:
            raise ValueError("pass --env NAME (or a run directory as --model, which knows its env)")
        if Path("skyrl.yaml").exists():
            user = read_yaml(Path("skyrl.yaml"))
            layers.append({"environments": user.get("environments") or {}})
        layers.append({"project_dir": str(Path.cwd())})
    layers += [parse_set(s) for s in opts.sets]
    if opts.max_turns is not None:
        layers.append({"env": {"max_turns": opts.max_turns}})
    return build_config(layers, env_name=opts.env or layers[0]["env"]["name"])


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
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; accepted: {', '.join(SPLITS)}")
        tasks, label = registry.bundled_tasks(spec, split), split
    tasks = tasks[: opts.limit] if opts.limit else tasks
    if not tasks:
        raise ValueError(f"no tasks to evaluate for env {cfg.env.name!r} ({label})")
    return tasks, label


def run_env_eval(opts: EnvEvalOptions) -> dict[str, Any]:
    """Evaluate; print the table; write the output folder (and the run's eval/). Returns the
    report. ValueError (one sentence) for bad input."""
    from agents.evaluate import evaluate
    from environments import registry

    if opts.n_samples < 1:
        raise ValueError(f"--n-samples must be at least 1, got {opts.n_samples}")
    ref = resolve_eval_model(opts.model)
    cfg = eval_config(opts, ref)
    tasks, label = load_eval_tasks(cfg, opts)
    spec = registry.resolve(cfg.env.name, cfg.environments)
    temperature = opts.temperature
    if temperature is None:
        temperature = 1.0 if opts.n_samples > 1 else 0.0
    note(f"loading {opts.model} ...")
    policy = load_policy(ref, cfg.trainer.threads, cfg.rollout.engine)
    project = Path(cfg.project_dir) if cfg.project_dir else None
    make_env = partial(
        registry.make_env, spec, project, max_turns=cfg.env.max_turns, **cfg.env.kwargs
    )
    cpt = policy.chars_per_token
    budget = Budget(cfg.rollout.max_new_tokens * cpt, cfg.rollout.max_total_tokens * cpt)
    n_episodes = len(tasks) * opts.n_samples
    mode = "greedy" if temperature == 0 else f"temperature {temperature:g}"
    note(f"evaluating {len(tasks)} {cfg.env.name} tasks ({label}) x {opts.n_samples} ({mode})")
    start = time.time()
    from trainers.progress import StepProgress

    bar = StepProgress(0).eval_bar(n_episodes, label)  # one live line with our ETA, as in training
    with ThreadPoolExecutor(cfg.rollout.env_workers) as pool:
        report, trajs = evaluate(
            policy.generate_fn(temperature), make_env, policy.chat, tasks, budget, pool,
            opts.seed, samples=opts.n_samples, on_done=bar,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    bar.done()
    step = ref.step or 0
    name = f"{label}-step-{step:06d}" + (f"-k{opts.n_samples}" if opts.n_samples > 1 else "")
    report.update(
        name=name, step=step, split=label, env=cfg.env.name, model=opts.model,
        temperature=temperature, wall_s=round(time.time() - start, 2),
    )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    records = [
        {**t.to_record(step), "sample": i % opts.n_samples, "correct": _correct(t)}
        for i, t in enumerate(trajs)
    ]
    out = opts.output or Path("evals") / f"{cfg.env.name}-{label}-{_stamp()}"
    write_outputs(out, report, records)
    if ref.run_dir is not None:
        from trainers.rundir import RunDir

        run = RunDir(ref.run_dir)
        run.write_eval(name, report)
        write_jsonl(ref.run_dir / "eval" / f"{name}.jsonl", records)
        report["run_eval"] = str(ref.run_dir / "eval" / f"{name}.json")
    if opts.tracking and cfg.tracking.enabled:
        log_to_mlflow(cfg, ref, report, out)
    print_table(report, cfg.env.name, label)
    note(f"wrote {out}/report.json and {out}/results.jsonl" + (
        f"; filed under {ref.run_dir}/eval/{name}.json" if ref.run_dir else ""))  # fmt: skip # arguments grouped by meaning, as a reader scans them
    return report


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


def log_to_mlflow(cfg: Any, ref: ModelRef, report: dict[str, Any], out: Path) -> None:
    """One MLflow run per evaluation, in the run's store (or ./runs/.mlflow/mlflow.db)."""
    from trainers.tracking import MLflowTracker, default_store

    runs_dir = ref.run_dir.parent if ref.run_dir is not None else Path("runs")
    runs_dir.mkdir(parents=True, exist_ok=True)
    uri, artifacts = default_store(runs_dir)  # runs/.mlflow/, out of the listing of runs
    uri = cfg.tracking.uri or uri
    run_name = f"eval-{ref.run_dir.name if ref.run_dir else cfg.env.name}-{report['name']}"
    tracker = MLflowTracker(uri, cfg.tracking.experiment, run_name, artifacts, None)
    keys = ("env", "model", "split", "temperature", "samples", "n", "step")
    tracker.log_params({f"eval.{k}": report[k] for k in keys if k in report})
    metrics = {
        f"eval/{report['split']}/{k}": float(v)
        for k, v in report.items()
        if k in ("accuracy", "mean_reward", "errors") or k.startswith("pass@")
    }
    tracker.log_metrics(metrics, int(report["step"]))
    tracker.log_artifacts(out, "eval")
    tracker.close("FINISHED")


def print_table(report: dict[str, Any], env: str, label: str) -> None:
    """Overall and per-metadata-group accuracy (and pass@k) as a table on stdout."""
    from rich.table import Table
    from rich.text import Text

    from skyrl_cli.style import console
    from tui.reader import terminal_safe

    def safe(text: str) -> Text:  # group names come from task data: escaped, never markup
        return Text(terminal_safe(text))

    ks = sorted(int(k[5:]) for k in report if k.startswith("pass@"))
    ks = ks or [1]
    table = Table(title=safe(f"{env} / {label}: {report['model']}"), box=None)
    for col in ["group", "tasks", *(f"pass@{k}" for k in ks), "mean reward", "errors"]:
        table.add_column(col, justify="left" if col == "group" else "right")
    tasks_n = report.get("tasks", report["n"])
    overall = [f"{report.get(f'pass@{k}', report['accuracy']):.1%}" for k in ks]
    table.add_row(
        "all", str(tasks_n), *overall, f"{report['mean_reward']:+.3f}", str(report["errors"])
    )
    for key, groups in report.get("breakdown", {}).items():
        for value, row in groups.items():
            cells = [f"{row.get(f'pass@{k}', 0.0):.1%}" for k in ks]
            table.add_row(safe(f"{key}={value}"), str(row["tasks"]), *cells, "", "")
    console(width=120).print(table)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _looks_local(path: Path) -> bool:
    """A path meant on this disk: absolute, ./ or ~/, or under a folder that exists here
    (`runs/nope`), where an HF id (`org/name`) names no local folder."""
    text = str(path)
    return (
        path.is_absolute()
        or text.startswith((".", "~"))
        or (len(path.parts) > 1 and path.parent.is_dir())
    )
