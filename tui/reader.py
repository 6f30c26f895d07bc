"""Read run directories (docs/run-format.md) with nothing but JSON and YAML parsers.

The watch UI and `skyrl watch --once` read runs only through this module. It imports
nothing of skyrl's: the format document is the contract, so a run written by any version
of the trainer (or by hand, in a test) reads the same.

Every string read from a run passes through `terminal_safe`: episode text, errors and names
are attacker-controlled, and a raw ESC in them would drive the user's terminal (OSC 52
writes the clipboard, OSC 0 the title, CSI moves the cursor).

`RunReader.refresh()` is incremental: `metrics.jsonl` is tailed from a remembered byte
offset and only `rollouts/step-*.jsonl` files not seen before are parsed, so polling it
once a second costs a `stat` or two when nothing changed.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STALE_S = 60.0
"""A `running` run whose heartbeat is older than this died without saying so."""

KEEP_ROLLOUTS = 2000
"""Most recent trajectories kept in memory per run."""

ZERO_VARIANCE_FRACTION = 0.5
ZERO_VARIANCE_STEPS = 3
"""No learning signal: `groups/zero_variance` at least ZERO_VARIANCE_FRACTION on each of the
last ZERO_VARIANCE_STEPS steps (the rule the trainer's console warning uses too)."""

_HEAVY_KEYS = ("token_ids", "loss_mask", "logprobs", "token_versions")
"""Per-token arrays the UI never shows; dropped after parsing to keep memory flat."""


# C0 controls but newline and tab, DEL, C1 controls, bidi overrides/isolates, lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """`text` with every control character written out as an escape (`\\x1b`, `\\u202e`), so
    that printing it shows what was there and never drives the terminal. The one copy: the
    reader applies it to all it reads, and the CLI to run names and error messages."""
    return _UNSAFE.sub(lambda m: ascii(m.group())[1:-1], text)


def _safe(value: Any) -> Any:
    """`terminal_safe` applied to every string (keys included) of parsed JSON or YAML."""
    if isinstance(value, str):
        return terminal_safe(value)
    if isinstance(value, dict):
        return {_safe(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return value


def run_state(status: dict[str, Any]) -> str:
    """`running` only while the heartbeat is fresh and the pid lives; else `stale`.

    `skyrl runs` uses this same function.
    """
    state = str(status.get("state", "unknown"))
    if state != "running":
        return state
    try:
        heartbeat = float(status.get("heartbeat", 0))
    except (TypeError, ValueError):
        heartbeat = 0.0
    if time.time() - heartbeat > STALE_S:
        return "stale"
    pid = status.get("pid")
    if isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "stale"
        except PermissionError:
            pass
    return state


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return _safe(data) if isinstance(data, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return _safe(data) if isinstance(data, dict) else {}


def is_run_dir(path: Path) -> bool:
    """A run directory holds a `config.yaml` or a `status.json`."""
    return path.is_dir() and ((path / "config.yaml").exists() or (path / "status.json").exists())


@dataclass
class RunSummary:
    """One row of the runs list."""

    id: str
    path: Path
    env: str
    model: str
    state: str
    step: int
    max_steps: int | None
    last_reward: float | None
    error: str | None
    last_eval: str | None = None
    """The latest evaluation, e.g. `dev 12.5% @30` (accuracy of split at step)."""


def read_evals(path: Path) -> list[dict[str, Any]]:
    """Every `eval/*.json` report of a run (training's before/after/step-N and `skyrl eval`'s),
    with its file stem as `name`, ordered by step then file time."""
    out = []
    for f in (path / "eval").glob("*.json"):
        rec = _read_json(f)
        if isinstance(rec.get("accuracy"), int | float):
            out.append({**rec, "name": terminal_safe(f.stem), "_mtime": _mtime(f) or 0.0})
    out.sort(key=lambda r: (r.get("step") if isinstance(r.get("step"), int) else -1, r["_mtime"]))
    return out


def async_lines(m: dict[str, Any]) -> list[str]:
    """The async schedule's health in two short lines (none for a sync run's metrics):
    staleness (mean, max, histogram of samples by versions old) and dropped samples; buffer
    depth, engine and learner idle time."""
    if not isinstance(m.get("staleness/mean"), int | float):
        return []
    num = lambda k: m[k] if isinstance(m.get(k), int | float) else 0.0  # noqa: E731
    hist = sorted(
        (int(k.rsplit("/", 1)[1]), num(k))
        for k in m
        if k.startswith("staleness/hist/") and k.rsplit("/", 1)[1].isdigit()
    )
    return [
        f"staleness {num('staleness/mean'):.1f} max {num('staleness/max'):.0f} ("
        + " ".join(f"{s}:{n:.0f}" for s, n in hist)
        + f")  dropped {num('async/dropped'):.0f}",
        f"buffer {num('async/buffer_depth'):.0f} groups  engine idle "
        f"{num('perf/engine_idle'):.0%}  learner idle {num('perf/learner_idle'):.0%}",
    ]


def eval_line(rec: dict[str, Any]) -> str:
    """One evaluation in a few words: `dev 12.5% @30` (plus pass@k when sampled)."""
    text = f"{rec.get('split', '?')} {100 * rec['accuracy']:.1f}% @{rec.get('step', '?')}"
    passes = sorted((k for k in rec if k.startswith("pass@")), key=lambda k: int(k[5:]))
    if len(passes) > 1:
        text += f" ({passes[-1]} {100 * rec[passes[-1]]:.1f}%)"
    return text


def summarize(path: Path) -> RunSummary:
    """Read a run's status and config into one list row."""
    status = _read_json(path / "status.json")
    cfg = _read_yaml(path / "config.yaml")
    max_steps = status.get("max_steps", (cfg.get("trainer") or {}).get("max_steps"))
    return RunSummary(
        id=terminal_safe(path.name),
        path=path,
        env=str(status.get("env") or (cfg.get("env") or {}).get("name") or "?"),
        model=str(status.get("model") or (cfg.get("model") or {}).get("name") or "?"),
        state=run_state(status) if status else "unknown",
        step=int(status.get("step") or 0),
        max_steps=int(max_steps) if isinstance(max_steps, int) else None,
        last_reward=status.get("last_reward"),
        error=status.get("error"),
        last_eval=eval_line(evals[-1]) if (evals := read_evals(path)) else None,
    )


def list_runs(runs_dir: Path) -> list[RunSummary]:
    """Every run under `runs_dir`, oldest first (by folder mtime)."""
    if not runs_dir.is_dir():
        return []
    # dot-folders (MLflow's runs/.mlflow/) are never runs
    dirs = [p for p in runs_dir.iterdir() if not p.name.startswith(".") and is_run_dir(p)]
    return [summarize(p) for p in sorted(dirs, key=lambda p: (p.stat().st_mtime, p.name))]


def latest_run(runs_dir: Path) -> Path | None:
    """The most recently modified run under `runs_dir`, if any."""
    runs = list_runs(runs_dir)
    return runs[-1].path if runs else None


def parse_utc(stamp: Any) -> float | None:
    """`2026-11-30T15:42:44Z` -> Unix time; None for anything else."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def last_assistant_text(traj: dict[str, Any]) -> str:
    """The text of the trajectory's last model turn ('' when it has none)."""
    for turn in reversed(traj.get("turns") or []):
        if isinstance(turn, dict) and turn.get("role") == "assistant":
            return str(turn.get("text", ""))
    return ""


class RunReader:
    """The live state of one run directory, refreshed incrementally by `refresh()`."""

    def __init__(self, path: Path, keep: int = KEEP_ROLLOUTS) -> None:
        self.path = path
        self.keep = keep
        self.config: dict[str, Any] = {}
        self.status: dict[str, Any] = {}
        self.metrics: list[dict[str, Any]] = []
        """One dict per step, unique and increasing steps (a resume's rewrite replaces)."""
        self.rollouts: deque[dict[str, Any]] = deque(maxlen=keep)
        """The most recent `keep` trajectories, oldest first, without per-token arrays."""
        self.rollout_files = 0
        """How many `rollouts/step-*.jsonl` files have been seen."""
        self._metrics_offset = 0
        self._metrics_inode: int | None = None
        self._seen_files: set[str] = set()
        self._status_mtime: float | None = None
        self._config_mtime: float | None = None
        self.refresh()

    # -- derived views -------------------------------------------------------------------

    @property
    def state(self) -> str:
        return run_state(self.status) if self.status else "unknown"

    @property
    def step(self) -> int:
        step = self.status.get("step")
        if isinstance(step, int):
            return step
        return int(self.metrics[-1].get("step", 0)) if self.metrics else 0

    @property
    def max_steps(self) -> int | None:
        value = self.status.get("max_steps", (self.config.get("trainer") or {}).get("max_steps"))
        return value if isinstance(value, int) else None

    @property
    def last_metrics(self) -> dict[str, Any]:
        return self.metrics[-1] if self.metrics else {}

    @property
    def no_learning_signal(self) -> bool:
        """Most groups of the last few steps gave every sample the same reward (their
        advantages are 0: the policy barely learns). Rule: ZERO_VARIANCE_FRACTION/_STEPS."""
        recent = [m.get("groups/zero_variance") for m in self.metrics[-ZERO_VARIANCE_STEPS:]]
        return len(recent) == ZERO_VARIANCE_STEPS and all(
            isinstance(v, int | float) and v >= ZERO_VARIANCE_FRACTION for v in recent
        )

    def elapsed(self, now: float | None = None) -> float | None:
        """Seconds from `started` to `finished` (or now, while it runs)."""
        start = parse_utc(self.status.get("started"))
        if start is None:
            return None
        end = parse_utc(self.status.get("finished"))
        if end is None:
            end = now if now is not None else time.time()
        return max(0.0, end - start)

    def eta(self, window: int = 5) -> float | None:
        """Seconds left while `running`: remaining steps x mean `time/step` of the last
        `window` steps. None when not running or nothing to estimate from."""
        if self.state != "running" or self.max_steps is None:
            return None
        times = [
            float(v)
            for m in self.metrics[-window:]
            if isinstance(v := m.get("time/step"), int | float) and not isinstance(v, bool)
        ]
        if not times:
            return None
        return max(0, self.max_steps - self.step) * sum(times) / len(times)

    # -- refresh -------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read whatever changed since the last call; True when anything did."""
        changed = self._refresh_files()
        changed |= self._tail_metrics()
        changed |= self._load_new_rollouts()
        return changed

    def _refresh_files(self) -> bool:
        changed = False
        mtime = _mtime(self.path / "status.json")
        if mtime != self._status_mtime:
            self._status_mtime = mtime
            self.status = _read_json(self.path / "status.json")
            changed = True
        mtime = _mtime(self.path / "config.yaml")
        if mtime != self._config_mtime:
            self._config_mtime = mtime
            self.config = _read_yaml(self.path / "config.yaml")
            changed = True
        return changed

    def _tail_metrics(self) -> bool:
        path = self.path / "metrics.jsonl"
        try:
            st = path.stat()
        except OSError:
            return False
        # A replaced or truncated file (resume rewrites it) is read again from the start.
        if st.st_ino != self._metrics_inode or st.st_size < self._metrics_offset:
            self._metrics_inode = st.st_ino
            self._metrics_offset = 0
            self.metrics = []
        if st.st_size == self._metrics_offset:
            return False
        with path.open("rb") as f:
            f.seek(self._metrics_offset)
            data = f.read(st.st_size - self._metrics_offset)
        end = data.rfind(b"\n")
        if end < 0:
            return False  # only a torn (still being written) line so far
        self._metrics_offset += end + 1
        changed = False
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the torn tail of a killed writer, completed by a later newline
            if not isinstance(rec, dict):
                continue
            self._add_metric(_safe(rec))
            changed = True
        return changed

    def _add_metric(self, rec: dict[str, Any]) -> None:
        step = rec.get("step")
        if isinstance(step, int):
            # After a resume, steps are written again: drop what they replace.
            while self.metrics and int(self.metrics[-1].get("step", 0)) >= step:
                self.metrics.pop()
        self.metrics.append(rec)

    def _load_new_rollouts(self) -> bool:
        folder = self.path / "rollouts"
        try:
            names = [
                n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".jsonl")
            ]
        except OSError:
            return False
        new = sorted(n for n in names if n not in self._seen_files)
        if not new:
            return False
        self._seen_files.update(new)
        self.rollout_files = len(self._seen_files)
        # Newest first, stopping once `keep` are in hand: opening a long run parses only
        # the files whose trajectories we will actually keep.
        batches: list[list[dict[str, Any]]] = []
        wanted = self.keep
        for name in reversed(new):
            batch = _read_rollouts(folder / name)
            batches.append(batch[-wanted:])
            wanted -= len(batches[-1])
            if wanted <= 0:
                break
        for batch in reversed(batches):
            self.rollouts.extend(batch)
        return True


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return None


def _read_rollouts(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            for key in _HEAVY_KEYS:
                rec.pop(key, None)
            out.append(_safe(rec))
    return out
