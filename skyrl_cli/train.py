"""`skyrl train`: turn flags into a RunConfig, make the run directory, call the recipe."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from skyrl_cli.errors import exit_now, fail

EXAMPLES = """
\b
Examples:
  skyrl train --env sql                     # bundled SQL suite, smollm2-135m, ~20-28 min on 2 cores
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
        str | None,
        typer.Option(
            "--ray-address",
            help="Join an existing Ray cluster. With SKYRL_REUSE_WORKERS=1 a run takes the "
            "worker a finished run left there instead of starting one (docs/scaling.md).",
        ),
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
    from trainers.launch import RunFinished, prepare_run
    from trainers.progress import phase

    stopping.install()  # from here on a signal is a stop (exit 128+N), never a traceback
    phase("checking the configuration, tasks and environment", plain=False)
    try:
        cfg, run = prepare_run(
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
