"""The run directory: the single source of truth for watch, resume and eval.

Layout (documented for outside readers in docs/run-format.md):

    runs/<run-id>/
      config.yaml                 resolved RunConfig
      status.json                 state, step, pid, heartbeat, error
      metrics.jsonl               one JSON object per training step
      rollouts/step-NNNNNN.jsonl  that step's trajectories
      checkpoints/step-NNNNNN/    model/ (HF folder), optimizer.pt, trainer_state.json, manifest.json
      eval/                       evaluation reports
      train.lock                  flock'ed by the one training process that holds the run
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HEARTBEAT_S = 5.0
LOCK_FILE = "train.lock"
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class RunDirError(ValueError):
    """A run directory that cannot be made, held or read, worded as one sentence."""


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def check_run_name(name: str, flag: str = "--run-name") -> None:
    """A run name becomes one folder under the runs dir: one path component, no `..`."""
    if not _RUN_NAME.fullmatch(name):
        raise RunDirError(
            f"{flag} {name!r} is not a plain name; use letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, at most 100 characters)"
        )


def run_stem(env: str) -> str:
    """A run's default name from its environment's: `skyrl_gym:gsm8k` -> `skyrl_gym-gsm8k`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", env).strip("-._")[:60] or "run"


def new_run_id(name: str | None, runs_dir: Path) -> str:
    """`<name or 'run'>-YYYYmmdd-HHMMSS`, made unique within runs_dir."""
    stem = name or "run"
    check_run_name(stem)
    base = f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_id, n = base, 1
    while (runs_dir / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


class RunDir:
    """Writes a run's files; every write leaves complete files behind."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.status: dict[str, Any] = {}
        self._hb: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._lock_fd: int | None = None

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def create(self) -> None:
        try:
            for sub in ("rollouts", "checkpoints", "eval"):
                (self.path / sub).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(
                f"cannot create the run directory {self.path} ({e.strerror or e}); "
                "pass a writable --runs-dir"
            ) from None

    # -- one training process per run ----------------------------------------------

    def hold(self) -> None:
        """Take the run for this process: an exclusive flock on train.lock, kept until the
        process ends (the kernel drops it on any exit, kill -9 included). RunDirError,
        naming the holder's pid, when another process has it."""
        path = self.path / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise RunDirError(f"cannot open {path} ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = ""
            for _ in range(50):  # the holder writes its pid right after locking
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                if holder:
                    break
                time.sleep(0.02)
            os.close(fd)
            raise RunDirError(
                f"run {self.path} is held by another training process (pid {holder or '?'}); "
                "stop it first or wait for it to end"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def release(self) -> None:
        """Let go of the run (before handing it to a child process)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- status --------------------------------------------------------------------

    def read_status(self) -> dict[str, Any]:
        """status.json as a dict ({} before the first write); RunDirError when it is broken."""
        p = self.path / "status.json"
        if not p.exists() and not p.is_symlink():
            return {}
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            data = None
        if not isinstance(data, dict):
            raise RunDirError(f"{p} is not a JSON object as skyrl writes it; repair or remove it")
        return data

    def check_resumable(self) -> None:
        """Refuse (RunDirError) a run whose files are not what a training process wrote:
        nothing is rewritten or trained on top of a broken run directory."""
        config = self.path / "config.yaml"
        if not config.exists() and not config.is_symlink():
            raise RunDirError(
                f"{self.path} is not a run directory (no config.yaml); pass a folder under runs/"
            )
        for name in ("config.yaml", "metrics.jsonl", "status.json"):
            p = self.path / name
            if (p.exists() or p.is_symlink()) and not p.is_file():
                raise RunDirError(f"{p} is not a regular file; repair or remove it")
        for name in ("rollouts", "checkpoints", "eval"):
            p = self.path / name
            if (p.exists() or p.is_symlink()) and not p.is_dir():
                raise RunDirError(f"{p} is not a folder; repair or remove it")

    def set_status(self, **fields: Any) -> None:
        with self._lock:
            self.status.update(fields)
            self.status["heartbeat"] = time.time()
            _atomic_write(self.path / "status.json", json.dumps(self.status, indent=1))

    def start_heartbeat(self) -> None:
        """Refresh status.json's heartbeat in the background, so readers can tell a dead run."""
        self.set_status(pid=os.getpid(), host=socket.gethostname())

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                self.set_status()

        self._hb = threading.Thread(target=beat, daemon=True, name="skyrl-heartbeat")
        self._hb.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()

    # -- metrics and rollouts ------------------------------------------------------

    def append_metrics(self, record: dict[str, Any]) -> None:
        with open(self.path / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_rollouts(self, step: int, records: list[dict[str, Any]]) -> None:
        final = self.path / "rollouts" / f"step-{step:06d}.jsonl"
        _atomic_write(final, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def write_eval(self, name: str, report: dict[str, Any]) -> Path:
        path = self.path / "eval" / f"{name}.json"
        _atomic_write(path, json.dumps(report, indent=1))
        return path

    def truncate_after(self, step: int) -> None:
        """Forget everything logged after `step` (resume redoes those steps)."""
        mpath = self.path / "metrics.jsonl"
        if mpath.exists():
            keep = []
            for line in mpath.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line).get("step", 0) <= step:
                        keep.append(line + "\n")
                except json.JSONDecodeError:
                    break  # a torn last line from a kill -9
            _atomic_write(mpath, "".join(keep))
        for f in (self.path / "rollouts").glob("step-*.jsonl"):
            if int(f.stem.split("-")[1]) > step:
                f.unlink()

    # -- checkpoints ---------------------------------------------------------------

    def checkpoint_tmp(self, step: int) -> Path:
        tmp = self.checkpoints / f".tmp-step-{step:06d}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        return tmp

    def commit_checkpoint(self, tmp: Path, step: int, state: dict[str, Any], keep: int) -> Path:
        """Finish a checkpoint written into `tmp`: state file, manifest (fsync), rename, prune."""
        from trainers.checkpoint import write_manifest

        _atomic_write(tmp / "trainer_state.json", json.dumps(state, indent=1))
        write_manifest(tmp)
        final = self.checkpoints / f"step-{step:06d}"
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        for old in self.list_checkpoints()[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def checkpoint_dirs(self) -> list[Path]:
        """Every checkpoint folder, complete or not, oldest first (temp dirs are not)."""
        if not self.checkpoints.is_dir():
            return []
        return sorted(
            (p for p in self.checkpoints.glob("step-*") if p.is_dir()), key=lambda p: p.name
        )

    def list_checkpoints(self) -> list[Path]:
        """Complete checkpoints (trainers/checkpoint.py says which count), oldest first."""
        from trainers.checkpoint import problem

        return [p for p in self.checkpoint_dirs() if problem(p) is None]

    def latest_checkpoint(self) -> Path | None:
        ckpts = self.list_checkpoints()
        return ckpts[-1] if ckpts else None


# Sections every config.yaml skyrl has written holds (later ones may be absent in old runs).
_SAVED_SECTIONS = ("model", "env", "rollout", "algorithm", "optim", "trainer")


def read_saved_config(path: Path) -> Any:
    """A run's saved RunConfig, refused (RunDirError) when it is not what skyrl wrote: an
    empty or cut-short file must not turn into "all defaults" on resume."""
    import yaml

    from trainers.config import load_saved_config

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        data = None
    missing = [k for k in _SAVED_SECTIONS if not isinstance(data, dict) or k not in data]
    if missing:
        raise RunDirError(
            f"{path} is not a complete saved config (no {missing[0]}: section); restore it "
            "from a copy, or start a new run"
        )
    return load_saved_config(path)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
