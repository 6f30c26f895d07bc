"""`skyrl eval`: score a model on an environment's tasks, or on a SWE-bench-format suite."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from skyrl_cli.errors import fail

T = TypeVar("T")

EXAMPLES = """
\b
Environment tasks (accuracy; pass@k with --n-samples):
  skyrl eval --env math --model tiny --split dev --limit 20
  skyrl eval --model runs/math-20261130-101500          # the run's env, config, last checkpoint
  skyrl eval --model runs/<id>/checkpoints/step-000010 --split test --n-samples 8
  skyrl eval --env sql --model openai:gpt-4o-mini@https://api.openai.com/v1
  skyrl eval --env shell --agent oracle --tasks path/to/harbor-tasks   # each should score 1
  skyrl eval --env shell --agent oracle --tasks DIR --build-network   # base images built here

\b
SWE-bench-format suites (resolved rate, predictions.jsonl):
  skyrl eval --suite swe-bench-mini --agent gold        # every instance must resolve
  skyrl eval --suite swe-bench-mini --model smollm2-135m --max-turns 6 --workers 4
  skyrl eval --suite my_instances.jsonl --repos ./repos --slice 0:10 --model runs/<id>
  skyrl eval --suite swe-bench-lite --instances astropy__astropy-12907 --model M --resume
  skyrl eval --suite lite.jsonl --repos ./repos --agent gold --build-network --sample 20 --seed 1
  skyrl eval --suite lite.jsonl --agent gold --backend docker   # the official images (Docker)
"""


def eval_(
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="Environment to score on: a built-in or a plugin named in ./skyrl.yaml.",
        ),
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            "--suite",
            help="SWE-bench suite: swe-bench-mini, swe-bench-lite, swe-bench-verified, "
            "swe-bench (or their hub ids, e.g. princeton-nlp/SWE-bench_Lite), or a "
            "JSONL/Parquet file in the official format.",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="A run dir or checkpoint, a preset (tiny, smollm2-135m), an HF folder or id, "
            "or openai:MODEL@BASE_URL.",
        ),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="Bundled split: dev (default), test, or one a suite adds (sql: transfer-test).",
        ),
    ] = None,
    tasks: Annotated[
        Path | None, typer.Option("--tasks", help="A JSONL task file instead of a split.")
    ] = None,
    n_samples: Annotated[
        int, typer.Option("--n-samples", help="Samples per task; reports pass@1..pass@K.")
    ] = 1,
    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature", help="Sampling temperature (default 0 = greedy; 1.0 if K>1)."
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Score only the first N tasks.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", help="Output folder.")] = None,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", help="Model turns per episode (overrides config).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Config override, e.g. rollout.max_new_tokens=64."),
    ] = None,
    instances: Annotated[
        str | None, typer.Option("--instances", help="SWE: comma-separated instance ids.")
    ] = None,
    slice_: Annotated[
        str | None, typer.Option("--slice", help="SWE: START:END of the suite (Python slice).")
    ] = None,
    sample: Annotated[
        int | None,
        typer.Option("--sample", help="SWE: N instances drawn at random (with --seed)."),
    ] = None,
    build_network: Annotated[
        bool,
        typer.Option(
            "--build-network/--no-build-network",
            help="SWE and --env shell: environment builds may reach the package index and the "
            "Debian mirror (a Harbor task's RUN steps and its base image's root file system; "
            "off: offline, from --pip-find-links and what is cached).",
        ),
    ] = False,
    pip_index: Annotated[
        str | None,
        typer.Option("--pip-index", help="SWE: package index URL of environment builds."),
    ] = None,
    pip_find_links: Annotated[
        Path | None,
        typer.Option("--pip-find-links", help="SWE: a folder of wheels/sdists builds may use."),
    ] = None,
    test_network: Annotated[
        bool,
        typer.Option(
            "--test-network/--no-test-network",
            help="SWE: the tests may use the network, as in the official images (off).",
        ),
    ] = False,
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            help="SWE: local (sandboxed environments built here) or docker (the official "
            "per-instance images; needs Docker).",
        ),
    ] = "local",
    repos: Annotated[
        Path | None, typer.Option("--repos", help="SWE: folder of owner__name repositories.")
    ] = None,
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            help="SWE: shell (a model with bash), gold, or empty. --env shell: oracle (the "
            "tasks' solve.sh, as Harbor's oracle) or noop, without a model.",
        ),
    ] = "shell",
    workers: Annotated[int, typer.Option("--workers", help="SWE: instances in parallel.")] = 4,
    resume: Annotated[
        bool, typer.Option("--resume", help="SWE: skip instances already finished in --output.")
    ] = False,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", help="SWE: token budget of one model turn.")
    ] = 384,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    tracking: Annotated[
        bool, typer.Option("--tracking/--no-tracking", help="Log the result to MLflow.")
    ] = True,
) -> None:
    """Evaluate a model: accuracy and pass@k on an environment, or resolved rate on SWE-bench."""
    if env is not None and suite is not None:
        fail("pass either --env (environment tasks) or --suite (a SWE-bench suite), not both")
    if split is not None and tasks is not None:
        fail("pass either --split or --tasks, not both")
    if sum(x is not None for x in (instances, slice_, sample)) > 1:
        fail("pass at most one of --instances, --slice and --sample")
    if sample is not None and sample < 1:
        fail(f"--sample must be at least 1, got {sample}")
    if backend not in ("local", "docker"):
        fail(f"unknown --backend {backend!r}; known: local, docker")
    if n_samples < 1:
        fail(f"--n-samples must be at least 1, got {n_samples}")
    if workers < 1:
        fail(f"--workers must be at least 1, got {workers}")
    if suite is not None:
        from skyrl_cli.swe_eval import SweEvalOptions, run_swe_eval

        opts = SweEvalOptions(
            suite=suite, model=model, agent=agent, instances=instances, slice=slice_,
            repos=repos, output=output, workers=workers, resume=resume,
            max_turns=max_turns or 10, max_new_tokens=max_new_tokens, seed=seed,
            sample=sample, build_network=build_network, pip_index=pip_index,
            pip_find_links=pip_find_links, test_network=test_network, backend=backend,
        )  # fmt: skip # the command line reads as typed
        _guarded(lambda: run_swe_eval(opts))
        return
    if env == "shell" and agent != "shell":
        from skyrl_cli.eval_oracle import harbor_tasks, run_reference_agent
        from trainers.config import ConfigError, deep_merge, parse_set

        kwargs: dict[str, object] = {}
        for item in set_ or []:  # as train reads --set: dotted keys nest, values are YAML
            if item.startswith("env.kwargs."):
                try:
                    kwargs = deep_merge(kwargs, parse_set(item)["env"]["kwargs"])
                except ConfigError as e:
                    fail(str(e))
        if build_network:
            kwargs["build_network"] = True
        summary = _guarded(
            lambda: run_reference_agent(agent, *harbor_tasks(tasks, split), kwargs, output)
        )
        not_run = [k for k, v in summary["results"].items() if v["reward"] is None]
        if not_run:  # a task that did not run is never a quiet 0
            total = len(summary["results"])
            print(f"{len(not_run)} of {total} tasks did not run (see above)", file=sys.stderr)
            raise typer.Exit(1)
        return
    if model is None:
        fail(
            "--model is required: a run dir, a preset (tiny, smollm2-135m), an HF folder or id, "
            "or openai:MODEL@BASE_URL"
        )
    from skyrl_cli.eval_run import EnvEvalOptions, run_env_eval

    env_opts = EnvEvalOptions(
        model=model, env=env, split=split, tasks=tasks, n_samples=n_samples,
        temperature=temperature, limit=limit, output=output, max_turns=max_turns, seed=seed,
        tracking=tracking, sets=set_ or [],
    )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    report = _guarded(lambda: run_env_eval(env_opts))
    if report.get("errors"):  # a task that did not run is never a quiet 0, in any env
        raise typer.Exit(1)


eval_.__doc__ = (eval_.__doc__ or "") + "\n" + EXAMPLES


def _guarded(job: Callable[[], T]) -> T:
    """Run the evaluation: bad input is one sentence (exit 2), a crash one line (exit 1)."""
    try:
        return job()
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        print("\nstopped", file=sys.stderr)
        raise typer.Exit(130) from None
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    except Exception as e:  # noqa: BLE001 - the traceback goes to a file, the user gets one line
        log = Path("skyrl-eval-error.log")
        log.write_text(traceback.format_exc(), encoding="utf-8")
        fail(f"evaluation failed: {type(e).__name__}: {e} (traceback in {log})", code=1)
