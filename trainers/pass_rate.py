"""The pass-rate-filtered train set (`warmup.pass_rate_samples`): after the warm-up, G
sampled answers per train task with the warm-up checkpoint, and only the tasks whose pass
rate is strictly between 0 and 1 stay in the train set. A task every sample gets right, or
none does, gives GRPO's group nothing to compare (all advantages 0); SkyRL-SQL trains on
questions of intermediate difficulty for its model for that reason. DAPO's dynamic sampling
is the online form of the same filter (it drops such groups after sampling them, step by
step); this one pays once, before step 1.

The rates are cached in the cache dir (`tasks.cache.cache_dir()/pass-rate/KEY.json`), KEY
the sha256 of the checkpoint's model files, the task ids, G and the seed: a repeated run
whose warm-up ends in the same weights reads them instead of sampling. A run records what
it kept in `warmup/pass_rate.json`, which a resumed run reads.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.agent_loop import GenerateFn
from agents.evaluate import evaluate, is_correct
from agents.sampling import SamplingClient
from tasks.cache import cache_dir
from tasks.task import Task
from trainers.steps import Acting

if TYPE_CHECKING:
    from trainers.progress import StepProgress

RECORD = "pass_rate.json"
"""The run's record of the filter, in its `warmup/` folder."""


def checkpoint_digest(model_dir: Path) -> str:
    """sha256 of a checkpoint's model files: their relative paths and bytes, in name order."""
    h = hashlib.sha256()
    for f in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        h.update(f.relative_to(model_dir).as_posix().encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def cache_key(digest: str, task_ids: list[str], samples: int, seed: int) -> str:
    """What the rates depend on: the weights, the tasks (in order), G and the seed."""
    text = json.dumps({"model": digest, "tasks": task_ids, "samples": samples, "seed": seed})
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def pass_rates(
    generate: GenerateFn,
    ac: Acting,
    model_dir: Path,
    samples: int,
    seed: int,
    progress: StepProgress,
) -> tuple[str, dict[str, float]]:
    """(cache key, pass rate of each train task over `samples` answers from `generate`),
    read from the cache when this checkpoint, these tasks, G and seed were sampled before.
    The sampling shows a bar of its episodes with an ETA, as an evaluation does."""
    tasks = ac.train_tasks
    key = cache_key(checkpoint_digest(model_dir), [t.id for t in tasks], samples, seed)
    path = cache_dir() / "pass-rate" / f"{key}.json"
    if path.is_file():
        progress.note(f"pass-rate filter: rates of this warm-up checkpoint reused from {path}")
        return key, json.loads(path.read_text(encoding="utf-8"))["rates"]
    progress.note(
        f"pass-rate filter: sampling {samples} answers for each of {len(tasks)} train tasks..."
    )
    bar = progress.eval_bar(len(tasks) * samples, "pass-rate")
    _, trajs = evaluate(
        generate, ac.make_env, ac.chat, tasks, ac.budget, ac.pool, seed,
        samples=samples, on_done=bar, by=(),
    )  # fmt: skip # evaluate's own argument order
    bar.done()
    rates = {
        t.id: sum(map(is_correct, trajs[i * samples : (i + 1) * samples])) / samples
        for i, t in enumerate(tasks)
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, {"samples": samples, "seed": seed, "rates": rates})
    return key, rates


def _write(path: Path, obj: dict[str, Any]) -> None:
    """JSON, complete or absent (a temp file renamed), as checkpoints are."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n", "utf-8")
    tmp.replace(path)


def keep(tasks: list[Task], rates: dict[str, float]) -> list[Task]:
    """The tasks whose pass rate is strictly between 0 and 1."""
    return [t for t in tasks if 0.0 < rates.get(t.id, 0.0) < 1.0]


def summary(kept: int, rates: dict[str, float], samples: int) -> str:
    """The run log's line on what the filter kept."""
    always = sum(r >= 1.0 for r in rates.values())
    never = sum(r <= 0.0 for r in rates.values())
    line = (
        f"pass-rate filter: kept {kept} of {len(rates)} train tasks (pass rate strictly "
        f"between 0 and 1 over {samples} samples; {always} always right, {never} never)"
    )
    if not kept:
        line += f"; none has a rate between, so training on all {len(rates)}"
    return line


def filter_train_set(
    ac: Acting,
    sampler: SamplingClient,
    warmup_dir: Path,
    ckpt: Path | None,
    progress: StepProgress,
) -> None:
    """Train only on the tasks the warm-up checkpoint sometimes, but not always, gets right:
    `ac.train_tasks` becomes those (unless none is), and the run log says how many. A
    resumed run reads what its first process kept (`warmup_dir/RECORD`); one that stopped
    before writing it samples again from `step-000000` (`ckpt`; or reads the cache).
    `sampler` is the policy's sampling client, holding the warm-up checkpoint's weights."""
    cfg = ac.cfg
    samples, record = cfg.warmup.pass_rate_samples, warmup_dir / RECORD
    if record.is_file():
        rates = json.loads(record.read_text(encoding="utf-8"))["rates"]
    elif ckpt is not None and ckpt.name == "step-000000":
        r = cfg.rollout
        sample = lambda reqs: sampler.generate(reqs, r.temperature, r.top_p).result()  # noqa: E731
        key, rates = pass_rates(sample, ac, ckpt / "model", samples, cfg.trainer.seed, progress)
        kept_ids = [t.id for t in keep(ac.train_tasks, rates)]
        _write(record, {"key": key, "samples": samples, "kept": kept_ids, "rates": rates})
    else:
        raise ValueError(
            f"{warmup_dir.parent} filters its train set by pass rate but has no "
            f"warmup/{RECORD} and no step-000000 checkpoint to sample it from; start a new run"
        )
    kept = keep(ac.train_tasks, rates)
    progress.note(summary(len(kept), rates, samples))
    if kept:
        ac.train_tasks = kept
