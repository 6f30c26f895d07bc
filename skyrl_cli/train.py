"""`skyrl train`: turn flags into a RunConfig, make the run directory, call the recipe."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from skyrl_cli.errors import exit_now, fail

EXAMPLES = """
\b
Examples:
  skyrl train --env sql                     # bundled SQL suite, smollm2-135m, ~20-25 min on 2 cores
  skyrl train --env math --model tiny --max-steps 5     # seconds: a smoke test
  skyrl train --env my_env --tasks my_tasks.jsonl       # your env (named in skyrl.yaml)
  skyrl train --config skyrl.yaml --set rollout.group_size=8 --set optim.lr=1e-6
  skyrl train --env math --set algorithm.name=ppo       # any algorithm by configuration
  skyrl train --config sql_grpo                         # a built-in recipe (--list-recipes)
  skyrl train --resume runs/sql-20261130-101500         # continue where it stopped
"""


def train(
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="Environment: a built-in or a plugin named in ./skyrl.yaml.",
        ),
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
    """Train a policy with RL (DAPO on the default `sql` env, GRPO on the others; sync schedule)."""
    from trainers.config import ConfigError

    if list_recipes:
        from trainers.recipes import recipes

        width = max(map(len, recipes()))
        for name, line in recipes().items():
            typer.echo(f"{name:<{width}}  {line}")
        typer.echo("\nUse one with: skyrl train --config NAME [--set KEY=VALUE ...]")
        return

    from trainers import progress, stopping
    from trainers.progress import phase

    stopping.install()  # from here on a signal is a stop (exit 128+N), never a traceback
    phase("checking the configuration, tasks and environment", plain=False)
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
    except RunFinished as e:
        typer.echo(str(e))
        raise typer.Exit(0) from None
    except (ConfigError, ValueError) as e:
        fail(str(e))
    except KeyboardInterrupt:
        raise typer.Exit(stopping.STOP.exit_code()) from None
    if watch and not progress.has_terminal():
        print("--watch needs a terminal; training here with plain progress", file=sys.stderr)
        watch = False
    if watch:
        progress.close_live()  # the spinner must not draw over the full-screen UI
        run.release()  # the background child takes the run
        stopping.uninstall()
        _train_in_background_and_watch(run, ray_address)
        return
    _run(cfg, run, resume is not None)


train.__doc__ = (train.__doc__ or "") + "\n" + EXAMPLES


def _prepare(
    env, model, config, sets, tasks, max_steps, runs_dir, run_name, resume, seed, ray_address
) -> tuple[Any, Any]:
    from trainers.config import (
        ConfigError,
        build_config,
        parse_set,
        read_yaml,
        save_config,
    )
    from trainers.recipes import recipe_path, recipes
    from trainers.rundir import RunDir, check_run_name, new_run_id, read_saved_config, run_stem

    if resume is not None:
        # the learner's worker count may change: checkpoints hold full tensors by name
        workers = [s for s in sets if s.replace(" ", "").startswith("learner.num_workers=")]
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
        ] + (["--set"] if len(sets) > len(workers) else [])
        if changed:
            raise ConfigError(
                f"--resume reuses the run's saved config, so {', '.join(changed)} cannot change; "
                "only --max-steps, --ray-address and --set learner.num_workers=N can"
            )
        # Hold the run before reading it: two resumes of one run never both train. The
        # saved config is read, never rewritten (changed steps/address live in status.json).
        run = RunDir(resume)
        run.check_resumable()
        run.hold()
        run.status = run.read_status()
        cfg = read_saved_config(resume / "config.yaml")
        check_not_finished(run, max_steps)
        _check_env(cfg)
        saved_max = run.status.get("max_steps")
        if max_steps is not None:
            cfg.trainer.max_steps = max_steps
        elif type(saved_max) is int and saved_max >= 1:
            cfg.trainer.max_steps = saved_max  # a step count a previous resume extended to
        if ray_address is not None:
            cfg.ray.address = ray_address
        for item in workers:
            n = parse_set(item)["learner"]["num_workers"]
            if type(n) is not int or n < 1:
                raise ConfigError(f"--set {item!r}: learner.num_workers must be an integer >= 1")
            cfg.learner.num_workers = n
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

    preflight(cfg)
    if run_name is not None:
        check_run_name(run_name)
    run = RunDir(runs_dir / new_run_id(run_name or run_stem(cfg.env.name), runs_dir))
    run.create()
    run.hold()
    save_config(cfg, run.path / "config.yaml")
    return cfg, run


# ------------------------------------------------------------------ pre-flight (issue 13)
# Everything that can be checked without Ray or the model is checked before the run
# directory exists, in about a second: a run that cannot start leaves nothing behind.

RESET_TIMEOUT_S = 60.0
"""How long the pre-flight waits for one environment's `reset`."""


class RunFinished(Exception):
    """`--resume` on a run that already reached its last step: nothing to do (exit 0)."""


def preflight(cfg: Any) -> None:
    """Model, task file and environment (built and reset on the first training task), each
    refused with one sentence (ConfigError) before anything heavy starts."""
    _check_model(cfg.model.name)
    env = _build_env(cfg)
    try:
        first = _check_tasks(cfg)
        if first is not None:
            _reset_once(env, first, cfg.env.name)
    finally:
        _close(env)


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}".rstrip(": ")


def _check_model(name: str) -> None:
    """A preset, a local HF folder with config.json, or an HF id the cache or the hub has
    (presets are built later, with the run's progress on screen)."""
    from agents.models import PRESETS, resolve_model
    from trainers.config import ConfigError

    if name in PRESETS:
        return
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        raise ConfigError(f"model folder {name} does not exist; pass a Hugging Face model folder")
    if not Path(name).exists() and name.count("/") != 1:
        raise ConfigError(
            f"unknown model {name!r}; use a preset ({', '.join(PRESETS)}), a local HF folder, or an HF id"
        )
    try:
        resolve_model(name, quiet=True)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_tasks(cfg: Any) -> Any:
    """The training split of the user's task file, read and non-empty; its first task (None
    for a bundled suite: the project's own, and some take a while to build)."""
    from environments import registry
    from tasks.task import load_tasks, select_split
    from trainers.config import ConfigError

    spec = registry.resolve(cfg.env.name, cfg.environments)
    if not cfg.env.tasks:
        if spec.suite is None:
            raise ConfigError(
                f"environment {spec.name!r} has no bundled tasks; pass --tasks FILE "
                "(or set env.tasks in skyrl.yaml)"
            )
        return None
    path = Path(cfg.env.tasks)
    if not path.is_absolute() and cfg.project_dir:
        path = Path(cfg.project_dir) / path
    if not path.exists():
        raise ConfigError(f"task file {cfg.env.tasks} does not exist")
    tasks = load_tasks(path)  # ValueError naming the bad line
    pick = partial(select_split, tasks, holdout=cfg.eval.holdout, eval_split=cfg.eval.split)
    train = pick(cfg.env.train_split)
    splits = sorted({t.split for t in tasks if t.split})
    if not train:
        raise ConfigError(
            f"no tasks in split {cfg.env.train_split!r} of {path.name} (its splits: "
            f"{', '.join(splits)}); set env.train_split, or the tasks' split fields"
        )
    if cfg.eval.limit and not splits and not cfg.eval.holdout:
        print(
            f"note: {path.name} has no `split` field, so {cfg.eval.split} accuracy is measured "
            "on the training tasks; --set eval.holdout=0.1 holds out 10% of them instead",
            file=sys.stderr,
        )
    elif cfg.eval.limit and not pick(cfg.eval.split):
        print(
            f"note: {path.name} has no {cfg.eval.split!r} tasks, so there is no evaluation "
            f"(its splits: {', '.join(splits)}; set eval.split)",
            file=sys.stderr,
        )
    return train[0]


def _check_env(cfg: Any) -> None:
    """The environment loads and takes env.kwargs: built once, here, not minutes later."""
    _close(_build_env(cfg))


def _build_env(cfg: Any) -> Any:
    """One environment as the run would build it (`EnvSpec.build`); ConfigError (one
    sentence) when its module does not load, env.kwargs names no parameter of it, or the
    constructor refuses."""
    from environments import registry
    from trainers.config import ConfigError

    spec = registry.resolve(cfg.env.name, cfg.environments)
    project = Path(cfg.project_dir) if cfg.project_dir else None
    try:
        return spec.build(cfg.env.max_turns, cfg.env.kwargs, project)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


def _reset_once(env: Any, task: Any, name: str) -> None:
    """`reset` on one task, in a daemon thread: an environment that hangs is named, not waited on."""
    from trainers.config import ConfigError

    outcome: list[BaseException | None] = []

    def reset() -> None:
        try:
            env.reset(seed=0, options={"task": task})
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - reported below, as one line
            outcome.append(e)

    worker = threading.Thread(target=reset, daemon=True, name="skyrl-preflight-reset")
    worker.start()
    worker.join(RESET_TIMEOUT_S)
    if not outcome:
        raise ConfigError(
            f"env {name!r} did not return from reset on task {task.id!r} "
            f"within {RESET_TIMEOUT_S:.0f} s"
        )
    if outcome[0] is not None:
        raise ConfigError(
            f"env {name!r} fails on task {task.id!r}: reset raised {_one_line(outcome[0])}"
        )


def check_not_finished(run: Any, max_steps: int | None) -> None:
    """RunFinished when `--resume` would only repeat a finished run's final evaluation."""
    status = run.status
    done = status.get("step")
    if status.get("state") != "finished" or type(done) is not int:
        return
    if max_steps is None or max_steps <= done:
        raise RunFinished(
            f"{run.path} is finished (step {done}/{done}); nothing to do. Train it further "
            f"with: skyrl train --resume {run.path} --max-steps N (N > {done})"
        )


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


def _run(cfg: Any, run: Any, resume: bool) -> None:
    from trainers.progress import phase

    phase("loading the trainer (torch)")  # seconds on a cold disk: said, not silent
    from trainers import async_loop, stopping, sync
    from trainers.config import ConfigError
    from trainers.steps import EpisodesFailed

    stop = stopping.install()
    run.start_heartbeat()
    print(f"run directory: {run.path}", file=sys.stderr)
    try:
        loop = async_loop if cfg.trainer.schedule == "async" else sync
        summary = loop.main(cfg, run, resume=resume)
    except (KeyboardInterrupt, SystemExit) as e:
        if isinstance(e, SystemExit):  # Ray's own SIGTERM handler, before ours was back
            stopping.mark_signal(e.code if isinstance(e.code, int) and e.code > 0 else 15)
        _stopped(run, stop)
    except (ConfigError, ValueError) as e:
        run.set_status(state="failed", error=str(e))
        stopping.end_processes()
        fail(str(e))
    except EpisodesFailed as e:  # the environment's failure, not ours: no traceback to keep
        run.set_status(state="failed", error=str(e))
        stopping.end_processes()
        fail(f"{e}; its rollouts are in {run.path / 'rollouts'}", code=1)
    except Exception as e:  # noqa: BLE001 - the traceback goes to a file, the user gets one line
        (run.path / "error.log").write_text(traceback.format_exc(), encoding="utf-8")
        run.set_status(state="failed", error=f"{type(e).__name__}: {e}")
        stopping.end_processes()
        fail(
            f"training failed: {type(e).__name__}: {e} (traceback in {run.path / 'error.log'}; "
            f"resume with skyrl train --resume {run.path})",
            code=1,
        )
    finally:
        run.stop_heartbeat()
    _print_summary(cfg, summary)
    exit_now(0)  # all is written: skip the interpreter's slow teardown of torch and Ray


def _stopped(run: Any, stop: Any) -> None:
    """A signal stopped the run: record it, end every process it started, exit 128+N.

    The exit is os._exit: Ray is already shut down, and the interpreter's own teardown
    (non-daemon pool threads blocked on the engine, Ray's C++ threads) must not hang or
    abort past the state just written. A watchdog bounds the whole of it.
    """
    import signal

    from trainers import stopping
    from trainers.progress import close_live

    for signum in stopping.STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    close_live()  # the live line ends here: the stop message and the prompt go below it
    code = stop.exit_code()
    watchdog = threading.Timer(60.0, os._exit, (code,))
    watchdog.daemon = True
    watchdog.start()
    run.stop_heartbeat()
    with contextlib.suppress(OSError):  # a full disk must not keep the processes alive
        run.set_status(state="stopped", error=f"stopped by {stop.name()}")
    stopping.end_processes()
    with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
        print(f"\nstopped; continue with: skyrl train --resume {run.path}", file=sys.stderr)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


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
    if summary.get("final_model"):  # LoRA: checkpoints hold adapters, this the merged model
        print(f"final model: {summary['final_model']}")
    elif summary.get("final_checkpoint"):
        print(f"final model: {summary['final_checkpoint']}/model")
