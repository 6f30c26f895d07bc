"""Starting a run and resuming one: the policy `skyrl train` follows before any training.

    cfg, run = prepare_run(env, model, config, sets, tasks, max_steps, runs_dir, run_name,
                           resume, seed, ray_address)

A new run: the configuration built from its layers (file or recipe, --set, flags), checked
by the pre-flight (model, task file, environment built and reset once) before its run
directory exists, then the directory created, held and its config saved. A resume: only
the step count, the Ray address and the learner's worker count may change; the run is held
before its saved config is read (never rewritten), and a finished run is RunFinished.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any


def prepare_run(
    env: str | None,
    model: str | None,
    config: Path | None,
    sets: list[str],
    tasks: Path | None,
    max_steps: int | None,
    runs_dir: Path,
    run_name: str | None,
    resume: Path | None,
    seed: int | None,
    ray_address: str | None,
) -> tuple[Any, Any]:
    """The run's configuration and its run directory, held: a new run (after the pre-flight)
    or the one `resume` names. ConfigError / ValueError (one sentence) for bad input,
    RunFinished when a resume has nothing to do."""
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
