"""SWE-bench evaluation: an agent on SWE-bench-format instances, its patches graded, as
`skyrl eval --suite` runs it.

    rep, out = run_swe_eval(SweEvalOptions("swe-bench-mini", agent="gold"), policy_for)

Agents: `shell` runs the model in `skyrl/SWE-v0` (bash in the checked-out repo, the patch is
its `git diff`, graded by the harness) through the same agent loop as training; `gold`
grades the instance's own patch; `empty` grades no change. The output folder holds the
official `predictions.jsonl` and `report.json`, and `logs/<instance_id>/` (the result, the
patch, the test output and, for `shell`, the trajectory). An instance is finished when its
`logs/<id>/result.json` exists; `--resume` skips those.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from agents.eval_env import Policy, note
from environments.swe_harness import GradeResult, grade, prediction, report
from environments.swe_official import BuildOptions
from tasks.swe.suites import load_suite, reachable, select

AGENTS = ("shell", "gold", "empty")
RESULT_FIELDS = ("instance_id", "model_patch", "resolved", "empty_patch", "patch_applied", "error")
EXTRA_FIELDS = ("python_specified", "python_used", "python_mismatch", "note", "env_build_s",
                "test_s", "duration_s")  # fmt: skip # one list of names

Record = Callable[..., None]
"""Saves one finished instance: `record(result, trajectory=None)` (from any worker thread)."""


@dataclass
class SweEvalOptions:
    """The flags of `skyrl eval --suite`."""

    suite: str
    model: str | None = None
    agent: str = "shell"
    instances: str | None = None
    slice: str | None = None
    repos: Path | None = None
    output: Path | None = None
    workers: int = 4
    resume: bool = False
    max_turns: int = 10
    max_new_tokens: int = 384
    max_total_tokens: int = 8192
    seed: int = 0
    sample: int | None = None
    build_network: bool = False
    pip_index: str | None = None
    pip_find_links: Path | None = None
    test_network: bool = False
    backend: str = "local"

    def build(self) -> BuildOptions:
        """What official environment builds and test runs may use (flags over env vars)."""
        return BuildOptions.from_env(
            network=self.build_network or None,
            index_url=self.pip_index,
            find_links=str(self.pip_find_links.resolve()) if self.pip_find_links else None,
            test_network=self.test_network or None,
        )


_repo_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def ensure_repo(repos_dir: Path, repo: str) -> str | None:
    """Make `repos_dir/owner__name` exist (cloned from GitHub when the network allows);
    None when it is there, else why not (one sentence). One clone per repo at a time."""
    with _locks_lock:
        lock = _repo_locks.setdefault(repo, threading.Lock())
    with lock:
        return _ensure_repo(repos_dir, repo)


def _ensure_repo(repos_dir: Path, repo: str) -> str | None:
    from tasks.swe.build import run_git
    from tasks.swe.checks import COMPONENT

    if len(repo.split("/")) != 2 or not all(COMPONENT.fullmatch(p) for p in repo.split("/")):
        return f"the repo {repo!r} is not owner/name"
    dest = repos_dir / repo.replace("/", "__")
    if (dest / ".git").exists() or (dest / "HEAD").exists():
        return None
    if repo.startswith("skyrl-mini/") or not reachable("github.com"):
        return f"no repository {dest.name} under {repos_dir}, and it cannot be cloned from here"
    repos_dir.mkdir(parents=True, exist_ok=True)
    proc = run_git(repos_dir, "clone", "-q", "--", f"https://github.com/{repo}.git", str(dest))
    if proc.returncode != 0:
        return f"cloning {repo} failed: {proc.stderr.strip()[-300:]}"
    return None


def run_swe_eval(
    opts: SweEvalOptions,
    policy_for: Callable[[str], Policy],
    recorder: Callable[[Path, int], Record] | None = None,
) -> tuple[dict[str, Any], Path]:
    """Run the agent on the selected instances; write predictions.jsonl and report.json.
    `policy_for(model)` loads the `shell` agent's model (only when an instance is ready);
    `recorder(out, total)` saves each finished instance (default: `save_result`, silently).
    Returns the report and the output folder. ValueError (one sentence) for bad input."""
    if opts.agent not in AGENTS:
        raise ValueError(f"unknown agent {opts.agent!r}; known: {', '.join(AGENTS)}")
    if opts.agent == "shell" and opts.model is None:
        raise ValueError("--agent shell needs --model (or use --agent gold / --agent empty)")
    suite_name = Path(opts.suite).stem if Path(opts.suite).is_file() else opts.suite
    suite_name = suite_name.replace("/", "__")  # a hub id names one output folder
    instances = select(load_suite(opts.suite), opts.instances, opts.slice, opts.sample, opts.seed)
    if opts.backend == "docker":
        from environments.swe_docker import docker_missing

        why = docker_missing()
        if why:
            raise ValueError(why)
    repos = opts.repos
    if repos is None:
        from tasks.cache import cache_dir
        from tasks.swe import SUITE_NAME, suite_repos_dir

        repos = suite_repos_dir() if opts.suite == SUITE_NAME else cache_dir() / "swe-repos"
    out = output_dir(opts, suite_name)
    done = finished(out) if opts.resume else {}
    todo = [i for i in instances if str(i["instance_id"]) not in done]
    note(
        f"{suite_name}: {len(instances)} instances, agent {opts.agent}"
        + (f" ({len(instances) - len(todo)} already finished)" if done else "")
        + f"; output {out}"
    )
    start = time.time()
    model_name = opts.model or opts.agent
    saver = (recorder or (lambda out, total: partial(save_result, out)))(out, len(todo))
    if opts.agent == "shell":
        run_shell_agent(opts, todo, repos, saver, policy_for)
    else:
        run_patch_agent(opts.agent, todo, repos, opts.workers, saver, opts.build(), opts.backend)
    wall = time.time() - start
    results = finished(out)
    graded = [results[str(i["instance_id"])] for i in instances if str(i["instance_id"]) in results]
    preds = [prediction(r.instance_id, model_name, r.model_patch) for r in graded]
    (out / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    rep = report(graded, instances)
    if any(r.python_specified for r in graded):  # official rows: which ran on another Python
        rep["python_mismatch_ids"] = sorted(r.instance_id for r in graded if r.python_mismatch)
    rep.update(
        suite=suite_name,
        agent=opts.agent,
        model_name_or_path=model_name,
        wall_time_s=round(wall, 1),
    )
    (out / "report.json").write_text(json.dumps(rep, indent=1), encoding="utf-8")
    return rep, out


def output_dir(opts: SweEvalOptions, suite_name: str) -> Path:
    """--output, else the newest earlier folder of this suite and agent (--resume), else a
    new `./swe-eval/<suite>-<agent>-<timestamp>`."""
    if opts.output is not None:
        opts.output.mkdir(parents=True, exist_ok=True)
        return opts.output
    base, prefix = Path("swe-eval"), f"{suite_name}-{opts.agent}-"
    if opts.resume:
        earlier = sorted(p for p in base.glob(prefix + "*") if p.is_dir()) if base.exists() else []
        if earlier:
            return earlier[-1]
    out = base / (prefix + datetime.now().strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def finished(out: Path) -> dict[str, GradeResult]:
    """Instance id -> result of every instance finished in `out`."""
    results = {}
    for path in sorted((out / "logs").glob("*/result.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # torn by a crash: the instance runs again
        results[rec["instance_id"]] = GradeResult(
            **{k: rec[k] for k in RESULT_FIELDS},
            **{k: rec[k] for k in EXTRA_FIELDS if k in rec},
            tests_status=rec.get("tests_status") or {},
        )
    return results


def save_result(out: Path, result: GradeResult, trajectory: dict[str, Any] | None = None) -> None:
    """Write `logs/<id>/`: patch.diff, test_output.txt, trajectory.json, then result.json last
    (its presence marks the instance finished). ValueError for an id that is not one plain
    path component (it would name a folder outside `logs/`)."""
    from tasks.swe.checks import COMPONENT

    if not COMPONENT.fullmatch(result.instance_id):
        raise ValueError(f"instance_id {result.instance_id!r} is not one plain path component")
    logs = out / "logs" / result.instance_id
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "patch.diff").write_text(result.model_patch, encoding="utf-8")
    (logs / "test_output.txt").write_text(result.log, encoding="utf-8")
    if result.build_log:
        (logs / "env_build.txt").write_text(result.build_log, encoding="utf-8")
    if trajectory is not None:
        (logs / "trajectory.json").write_text(json.dumps(trajectory, indent=1), encoding="utf-8")
    skip = ("log", "build_log", "workdir", "test_results")
    rec = {k: v for k, v in asdict(result).items() if k not in skip}
    rec["report"] = result.to_report()
    tmp = logs / ".result.json.tmp"
    tmp.write_text(json.dumps(rec, indent=1), encoding="utf-8")
    os.replace(tmp, logs / "result.json")


def run_patch_agent(
    agent: str,
    todo: list[dict[str, Any]],
    repos: Path,
    workers: int,
    save: Callable[[GradeResult], None],
    build: BuildOptions | None = None,
    backend: str = "local",
) -> None:
    """gold / empty: grade the instance's own patch, or none, `workers` at a time."""

    def one(inst: dict[str, Any]) -> None:
        iid = str(inst["instance_id"])
        try:
            patch = str(inst["patch"]) if agent == "gold" else ""
            if backend == "docker":
                from environments.swe_docker import grade_docker

                save(grade_docker(inst, patch))
                return
            why = ensure_repo(repos, str(inst["repo"]))
            result = (
                GradeResult(iid, patch, error=why)
                if why
                else grade(inst, patch, repos_dir=repos, build=build)
            )
        except Exception as e:  # noqa: BLE001 - one instance's crash is its own error
            result = GradeResult(iid, "", error=f"{type(e).__name__}: {e}")
        save(result)

    with ThreadPoolExecutor(workers, thread_name_prefix="skyrl-swe") as pool:
        list(pool.map(one, todo))


def run_shell_agent(
    opts: SweEvalOptions,
    todo: list[dict[str, Any]],
    repos: Path,
    save: Callable[..., None],
    policy_for: Callable[[str], Policy],
) -> None:
    """The model in `skyrl/SWE-v0`, `workers` instances per batch of the agent loop."""
    from agents.agent_loop import Budget, episode_seed, run_episodes
    from environments.swe import SWEEnv, instance_task

    assert opts.model is not None
    ready = []
    for inst in todo:
        why = ensure_repo(repos, str(inst["repo"]))
        if why:
            save(GradeResult(str(inst["instance_id"]), "", error=why))
        else:
            ready.append(inst)
    if not ready:
        return
    note(f"loading {opts.model} ...")
    policy = policy_for(opts.model)
    cpt = policy.chars_per_token
    budget = Budget(opts.max_new_tokens * cpt, opts.max_total_tokens * cpt)
    make_env = partial(SWEEnv, max_turns=opts.max_turns, repos_dir=repos)
    greedy = policy.generate_fn(0.0)
    turn = [0]

    def generate(reqs: list[Any]) -> list[Any]:  # greedy, with a line per turn of the batch
        turn[0] += 1
        t0 = time.time()
        out = greedy(reqs)
        note(f"  turn {turn[0]}: {len(reqs)} live episode(s), {time.time() - t0:.0f}s generating")
        return out

    with ThreadPoolExecutor(opts.workers, thread_name_prefix="skyrl-swe") as pool:
        for i in range(0, len(ready), opts.workers):
            chunk = ready[i : i + opts.workers]
            turn[0] = 0
            tasks = [instance_task(inst) for inst in chunk]
            seeds = [episode_seed(opts.seed, "swe", t.id) for t in tasks]
            trajs = run_episodes(
                generate, make_env, policy.chat, tasks, list(range(len(tasks))), seeds, budget, pool
            )
            for inst, traj in zip(chunk, trajs, strict=True):
                save(to_result(inst, traj), _trajectory_record(traj))


def to_result(instance: dict[str, Any], traj: Any) -> GradeResult:
    """The grade the environment reported at the end of the episode (an error if none)."""
    info, iid = traj.info, str(instance["instance_id"])
    if "resolved" not in info:  # the episode broke before grading (reset failed, crash)
        return GradeResult(
            iid, "", error=traj.error or f"the episode ended ({traj.stop_reason}) ungraded"
        )
    return GradeResult(
        iid,
        str(info.get("model_patch") or ""),
        resolved=bool(info["resolved"]),
        empty_patch=bool(info.get("empty_patch")),
        patch_applied=bool(info.get("patch_applied")),
        error=info.get("grade_error"),
        tests_status=json.loads(info.get("tests_status") or "{}"),
        log=str(info.get("test_output") or ""),
    )


def _trajectory_record(traj: Any) -> dict[str, Any]:
    """The trajectory as text (turns, reward, stop reason), without the token arrays."""
    rec = traj.to_record(0)
    for key in ("token_ids", "loss_mask", "logprobs", "step"):
        rec.pop(key, None)
    rec["info"] = {k: v for k, v in rec["info"].items() if k not in ("test_output",)}
    return rec
