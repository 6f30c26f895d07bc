"""`skyrl eval --env`: score a model on an environment's tasks (accuracy, pass@k).

    skyrl eval --env math --model tiny --split dev --limit 20
    skyrl eval --model runs/<id>                      # the run's env, config and last checkpoint
    skyrl eval --env sql --model openai:gpt-4o-mini@https://api.openai.com/v1 --n-samples 4

Resolves `--model` and the configuration, calls `agents.eval_env.evaluate_env` (which
writes `report.json` and `results.jsonl` to the output folder), then logs to MLflow, files
the report under the run's `eval/` when the model is a run, and prints the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.eval_env import EnvEvalOptions, ModelRef, evaluate_env, note, write_jsonl


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
                raise ValueError(
                    f"run {spec} trains LoRA and has not finished; its merged model is written to {path / 'model'} when it does"
                )
            return ModelRef(spec, path / "model", path, _step_of(ckpt))
        return ModelRef(spec, ckpt / "model", path, _step_of(ckpt))
    if (path / "model" / "adapter_config.json").is_file():
        raise ValueError(
            f"checkpoint {spec} holds a LoRA adapter; evaluate its run (merged model) instead"
        )
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


def run_env_eval(opts: EnvEvalOptions) -> dict[str, Any]:
    """Evaluate; print the table; write the output folder (and the run's eval/). Returns the
    report (`errors`: episodes that did not run to the end, each named on stderr). ValueError
    (one sentence) for bad input."""
    if opts.n_samples < 1:
        raise ValueError(f"--n-samples must be at least 1, got {opts.n_samples}")
    ref = resolve_eval_model(opts.model)
    cfg = eval_config(opts, ref)

    def progress(n_episodes: int, label: str) -> Any:
        from trainers.progress import StepProgress

        return StepProgress(0).eval_bar(n_episodes, label)

    report, records, out = evaluate_env(opts, cfg, ref, progress)
    name, label = report["name"], report["split"]
    if ref.run_dir is not None:
        from trainers.rundir import RunDir

        run = RunDir(ref.run_dir)
        run.write_eval(name, report)
        write_jsonl(ref.run_dir / "eval" / f"{name}.jsonl", records)
        report["run_eval"] = str(ref.run_dir / "eval" / f"{name}.json")
    if opts.tracking and cfg.tracking.enabled:
        log_to_mlflow(cfg, ref, report, out)
    print_table(report, cfg.env.name, label)
    note(
        f"wrote {out}/report.json and {out}/results.jsonl"
        + (f"; filed under {ref.run_dir}/eval/{name}.json" if ref.run_dir else "")
    )
    failed = [r for r in records if r.get("error")]
    if failed:  # never a quiet 0: the caller exits non-zero
        note(
            f"{len(failed)} of {len(records)} episodes did not run to the end (first: "
            f"{failed[0]['error']}); each one's error is in {out}/results.jsonl"
        )
    return report


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


def _looks_local(path: Path) -> bool:
    """A path meant on this disk: absolute, ./ or ~/, or under a folder that exists here
    (`runs/nope`), where an HF id (`org/name`) names no local folder."""
    text = str(path)
    return (
        path.is_absolute()
        or text.startswith((".", "~"))
        or (len(path.parts) > 1 and path.parent.is_dir())
    )
