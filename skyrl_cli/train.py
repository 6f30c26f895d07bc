"""`skyrl train`: turn flags into a RunConfig, make the run directory, call the recipe."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from skyrl_cli.errors import fail

EXAMPLES = """
\b
Examples:
  skyrl train --env sql                     # bundled SQL suite, smollm2-135m, ~20 min on 2 cores
  skyrl train --env math --model tiny --max-steps 5     # seconds: a smoke test
  skyrl train --env my_env --tasks my_tasks.jsonl       # your env (named in skyrl.yaml)
  skyrl train --config skyrl.yaml --set rollout.group_size=8 --set optim.lr=1e-6
  skyrl train --env math --set algorithm.name=ppo       # any algorithm by configuration
  skyrl train --config sql_dapo                         # a built-in recipe (--list-recipes)
  skyrl train --resume runs/sql-20261130-101500         # continue where it stopped
"""


def train(
    env: Annotated[
        str | None, typer.Option("--env", help="Environment: sql, math, or a plugin name.")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model preset (tiny, smollm2-135m), HF folder or id."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="YAML config file or built-in recipe name (default: ./skyrl.yaml if present).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a config key: --set rollout.group_size=8 (repeatable)."
        ),
    ] = None,
    tasks: Annotated[
        Path | None, typer.Option("--tasks", help="JSONL task file instead of the bundled suite.")
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Training steps.", min=1)
    ] = None,
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="Where run directories go.")] = Path(
        "runs"
    ),
    run_name: Annotated[
        str | None, typer.Option("--run-name", help="Run id prefix (default: the env name).")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option("--resume", help="A run directory to continue from its last checkpoint."),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed.")] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Join an existing Ray cluster.")
    ] = None,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Train in the background and open the live UI on the run."),
    ] = False,
    list_recipes: Annotated[
        bool, typer.Option("--list-recipes", help="List the built-in recipes and exit.")
    ] = False,
) -> None:
    """Train a policy with RL (GRPO by default; sync schedule) on an environment's tasks."""
    from trainers.config import ConfigError

    if list_recipes:
        from trainers.recipes import recipes

        width = max(map(len, recipes()))
        for name, line in recipes().items():
            typer.echo(f"{name:<{width}}  {line}")
        typer.echo("\nUse one with: skyrl train --config NAME [--set KEY=VALUE ...]")
        return

    try:
        cfg, run = _prepare(
            env,
            model,
            config,
            set_ or [],
            tasks,
            max_steps,
            runs_dir,
            run_name,
            resume,
            seed,
            ray_address,
        )
    except (ConfigError, ValueError) as e:
        fail(str(e))
    if watch:
        _train_in_background_and_watch(run, ray_address)
        return
    _run(cfg, run, resume is not None)


train.__doc__ = (train.__doc__ or "") + "\n" + EXAMPLES


def _prepare(
    env, model, config, sets, tasks, max_steps, runs_dir, run_name, resume, seed, ray_address
) -> tuple[Any, Any]:
    from agents.models import PRESETS
    from environments import registry
    from trainers.config import (
        ConfigError,
        build_config,
        load_saved_config,
        parse_set,
        read_yaml,
        save_config,
    )
    from trainers.recipes import recipe_path, recipes
    from trainers.rundir import RunDir, new_run_id

    if resume is not None:
        changed = [
            n
            for n, v in (
                ("--env", env),
                ("--model", model),
                ("--config", config),
                ("--tasks", tasks),
                ("--seed", seed),
                ("--run-name", run_name),
            )
            if v is not None
        ] + (["--set"] if sets else [])
        if changed:
            raise ConfigError(
                f"--resume reuses the run's saved config, so {', '.join(changed)} cannot change; "
                "only --max-steps and --ray-address can"
            )
        if not (resume / "config.yaml").exists():
            raise ConfigError(
                f"{resume} is not a run directory (no config.yaml); pass a folder under runs/"
            )
        cfg = load_saved_config(resume / "config.yaml")
        if max_steps is not None:
            cfg.trainer.max_steps = max_steps
        if ray_address is not None:
            cfg.ray.address = ray_address
        run = RunDir(resume)
        run.status = run.read_status()
        if run.status.get("state") == "running" and _alive(run.status.get("pid")):
            raise ConfigError(
                f"run {resume} is still running (pid {run.status['pid']}); stop it first"
            )
        save_config(cfg, resume / "config.yaml")
        return cfg, run

    layers: list[dict[str, Any]] = []
    project_dir = Path.cwd()
    if config is None and Path("skyrl.yaml").exists():
        config = Path("skyrl.yaml")
    if config is not None and not config.exists() and (recipe := recipe_path(str(config))):
        layers.append(read_yaml(recipe))  # a built-in recipe: paths stay relative to the cwd
    elif config is not None:
        if not config.exists():
            raise ConfigError(
                f"config file {config} does not exist, and it is no built-in recipe "
                f"({', '.join(recipes())})"
            )
        layers.append(read_yaml(config))
        project_dir = config.resolve().parent
    layers += [parse_set(s) for s in sets]
    flags: dict[str, Any] = {"project_dir": str(project_dir)}
    if model is not None:
        flags["model"] = {"name": model}
    if tasks is not None:
        flags.setdefault("env", {})["tasks"] = str(tasks.resolve())
    if max_steps is not None:
        flags["trainer"] = {"max_steps": max_steps}
    if seed is not None:
        flags.setdefault("trainer", {})["seed"] = seed
    if ray_address is not None:
        flags["ray"] = {"address": ray_address}
    layers.append(flags)
    cfg = build_config(layers, env_name=env)

    # Check names now, before minutes of setup, with the accepted values in the message.
    registry.resolve(cfg.env.name, cfg.environments)
    name = cfg.model.name
    if name not in PRESETS and not Path(name).exists() and name.count("/") != 1:
        raise ConfigError(
            f"unknown model {name!r}; use a preset ({', '.join(PRESETS)}), a local HF folder, or an HF id"
        )
    if cfg.env.tasks and not (project_dir / cfg.env.tasks).exists():
        raise ConfigError(f"task file {cfg.env.tasks} does not exist")

    runs_dir.mkdir(parents=True, exist_ok=True)
    run = RunDir(runs_dir / new_run_id(run_name or cfg.env.name, runs_dir))
    run.create()
    save_config(cfg, run.path / "config.yaml")
    return cfg, run


def _train_in_background_and_watch(run: Any, ray_address: str | None) -> None:
    """Start `skyrl train --resume RUN` detached (closing the UI leaves it running), then watch."""
    import subprocess

    log = run.path / "train.log"
    cmd = [sys.executable, "-m", "skyrl_cli.main", "train", "--resume", str(run.path)]
    if ray_address:
        cmd += ["--ray-address", ray_address]
    with open(log, "ab") as out:
        child = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    from tui.app import WatchApp

    WatchApp(runs_dir=run.path.parent, run_dir=run.path).run()
    print(f"training continues in the background (pid {child.pid}); log: {log}")
    print(f"follow it with: skyrl watch {run.path}   stop it with: kill -INT {child.pid}")


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return pid != os.getpid()


def _run(cfg: Any, run: Any, resume: bool) -> None:
    from trainers import sync
    from trainers.config import ConfigError

    run.start_heartbeat()
    print(f"run directory: {run.path}", file=sys.stderr)
    try:
        summary = sync.main(cfg, run, resume=resume)
    except KeyboardInterrupt:
        run.set_status(state="stopped", error="interrupted")
        print(f"\nstopped; continue with: skyrl train --resume {run.path}", file=sys.stderr)
        raise typer.Exit(130) from None
    except (ConfigError, ValueError) as e:
        run.set_status(state="failed", error=str(e))
        fail(str(e))
    except Exception as e:  # noqa: BLE001 - the traceback goes to a file, the user gets one line
        (run.path / "error.log").write_text(traceback.format_exc(), encoding="utf-8")
        run.set_status(state="failed", error=f"{type(e).__name__}: {e}")
        fail(
            f"training failed: {type(e).__name__}: {e} (traceback in {run.path / 'error.log'}; "
            f"resume with skyrl train --resume {run.path})",
            code=1,
        )
    finally:
        run.stop_heartbeat()
    _print_summary(cfg, summary)


def _print_summary(cfg: Any, summary: dict[str, Any]) -> None:
    b, a = summary.get("eval_before"), summary.get("eval_after")
    w = summary.get("eval_warmup")
    print(f"finished: {summary['run_dir']}")
    if b and a and w:
        print(
            f"{cfg.eval.split} accuracy: {b['accuracy']:.1%} before -> {w['accuracy']:.1%} "
            f"after warm-up -> {a['accuracy']:.1%} after RL ({a['n']} tasks)"
        )
    elif b and a:
        print(
            f"{cfg.eval.split} accuracy: {b['accuracy']:.1%} before -> {a['accuracy']:.1%} after ({a['n']} tasks)"
        )
    elif a:
        print(f"{cfg.eval.split} accuracy after training: {a['accuracy']:.1%} ({a['n']} tasks)")
    if summary.get("final_checkpoint"):
        print(f"final model: {summary['final_checkpoint']}/model")
