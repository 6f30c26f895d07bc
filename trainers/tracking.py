"""Experiment trackers. The loop always has one, so it never asks "is logging on?".

`MLflowTracker` logs to a local SQLite-backed store inside the runs dir by default
(`sqlite:///<runs>/.mlflow/mlflow.db`, artifacts in `<runs>/.mlflow/artifacts`), or to any
tracking URI.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any, Protocol


class Tracker(Protocol):
    run_id: str | None

    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_artifacts(self, local_dir: Path, artifact_path: str) -> None: ...
    def close(self, status: str) -> None: ...


class NullTracker:
    """Does nothing; used when tracking is disabled."""

    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> None:
        pass

    def close(self, status: str) -> None:
        pass


STORE_DIR = ".mlflow"
"""The default store's folder inside the runs dir: a dot-folder, out of the listing of runs."""


def default_store(runs_dir: Path) -> tuple[str, Path]:
    """The default tracking URI and artifacts folder of a runs dir: `<runs>/.mlflow/mlflow.db`
    and `<runs>/.mlflow/artifacts/`. A runs dir written before the store moved there
    (`<runs>/mlflow.db`, `<runs>/mlartifacts/`) keeps its store, so its runs resume into
    their MLflow runs."""
    if (runs_dir / "mlflow.db").is_file() and not (runs_dir / STORE_DIR).exists():
        return f"sqlite:///{(runs_dir / 'mlflow.db').resolve()}", runs_dir / "mlartifacts"
    store = runs_dir / STORE_DIR
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(store / 'mlflow.db').resolve()}", store / "artifacts"


def _seed_sqlite_store(uri: str) -> None:
    """Start a new SQLite store as a copy of an empty one already built by this MLflow version.

    MLflow builds a new store by running its whole chain of schema migrations, several
    seconds each time (7 s at load 8 on 2 cores); every new project (and every test's runs
    dir) paid that on its first run. The empty store is built once into the cache
    (`~/.cache/skyrl/mlflow/`, one per MLflow version) and copied; the copy's Default
    experiment then points where MLflow itself would have put it. Anything unexpected here
    leaves the store to MLflow."""
    import mlflow

    db = Path(uri.removeprefix("sqlite:///"))
    if not uri.startswith("sqlite:///") or db.exists():
        return
    from tasks.cache import cache_dir

    try:
        template = cache_dir() / "mlflow" / f"empty-{mlflow.__version__}.db"
        if not template.is_file():
            template.parent.mkdir(parents=True, exist_ok=True)
            part = template.with_name(f"{template.name}.{uuid.uuid4().hex}.part")
            from mlflow.tracking import MlflowClient

            MlflowClient(tracking_uri=f"sqlite:///{part}").search_experiments()
            os.replace(part, template)  # whole or absent, whoever builds it at the same time
        db.parent.mkdir(parents=True, exist_ok=True)
        part = db.with_name(f"{db.name}.{uuid.uuid4().hex}.part")
        shutil.copyfile(template, part)
        now = int(time.time() * 1000)
        with sqlite3.connect(part) as con:  # as MLflow would: ./mlruns/0 from here, made now
            con.execute(
                "UPDATE experiments SET artifact_location = ?, creation_time = ?, "
                "last_update_time = ? WHERE experiment_id = 0",
                (str(Path.cwd() / "mlruns" / "0"), now, now),
            )
        con.close()
        os.replace(part, db)
    except (OSError, sqlite3.Error):
        return


class MLflowTracker:
    """Logs params, per-step metrics and artifacts to one MLflow run (resumed by id)."""

    def __init__(
        self, uri: str, experiment: str, run_name: str, artifacts_dir: Path, run_id: str | None
    ) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("DO_NOT_TRACK", "true")
        import logging

        import mlflow

        for name in ("mlflow", "alembic"):  # table creation chatter on a new store
            logging.getLogger(name).setLevel(logging.WARNING)
        from mlflow.tracking import MlflowClient

        _seed_sqlite_store(uri)
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            location = artifacts_dir.resolve().as_uri() if uri.startswith("sqlite:") else None
            exp_id = self.client.create_experiment(experiment, artifact_location=location)
        else:
            exp_id = exp.experiment_id
        if run_id is not None:
            from mlflow.exceptions import MlflowException

            try:
                self.client.update_run(run_id, status="RUNNING")
            except MlflowException:  # the run lives in another store (a moved one): start anew
                run_id = None
        if run_id is None:
            run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        self.run_id = run_id
        self._mlflow = mlflow

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:500]) for k, v in params.items()]
        existing = self.client.get_run(self.run_id).data.params
        new = [p for p in items if p.key not in existing]
        for i in range(0, len(new), 100):
            self.client.log_batch(self.run_id, params=new[i : i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k.replace("@", "_at_"), float(v), ts, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=items)

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> None:
        self.client.log_artifacts(self.run_id, str(local_dir), artifact_path)

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)


def flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
