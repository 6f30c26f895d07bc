"""The run directory: the single source of truth for watch, resume and eval.

Layout (documented for outside readers in docs/run-format.md):

    runs/<run-id>/
      config.yaml                 resolved RunConfig
      status.json                 state, step, pid, heartbeat, error
      metrics.jsonl               one JSON object per training step
      rollouts/step-NNNNNN.jsonl  that step's trajectories
      checkpoints/step-NNNNNN/    model/ (HF folder), optimizer.pt, trainer_state.json
      eval/                       evaluation reports
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HEARTBEAT_S = 5.0


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def new_run_id(name: str | None, runs_dir: Path) -> str:
    """`<name or 'run'>-YYYYmmdd-HHMMSS`, made unique within runs_dir."""
    stem = name or "run"
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

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def create(self) -> None:
        for sub in ("rollouts", "checkpoints", "eval"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)

    # -- status --------------------------------------------------------------------

    def read_status(self) -> dict[str, Any]:
        p = self.path / "status.json"
        return json.loads(p.read_text()) if p.exists() else {}

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
        """Finish a checkpoint written into `tmp`: state file, fsync, rename, prune old ones."""
        _atomic_write(tmp / "trainer_state.json", json.dumps(state, indent=1))
        final = self.checkpoints / f"step-{step:06d}"
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        for old in self.list_checkpoints()[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def list_checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first (temp dirs from a crash are ignored)."""
        if not self.checkpoints.exists():
            return []
        done = [p for p in self.checkpoints.glob("step-*") if (p / "trainer_state.json").exists()]
        return sorted(done, key=lambda p: p.name)

    def latest_checkpoint(self) -> Path | None:
        ckpts = self.list_checkpoints()
        return ckpts[-1] if ckpts else None


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
