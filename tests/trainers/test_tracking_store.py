"""Issue 13, item 16: MLflow's default store lives in runs/.mlflow/; older runs folders keep theirs."""

from __future__ import annotations

import os
import sqlite3

from trainers.tracking import MLflowTracker, default_store


def test_a_new_runs_folder_gets_its_store_in_a_dot_folder(tmp_path):
    uri, artifacts = default_store(tmp_path)
    assert uri == f"sqlite:///{tmp_path.resolve() / '.mlflow' / 'mlflow.db'}"
    assert artifacts == tmp_path / ".mlflow" / "artifacts"
    assert os.listdir(tmp_path) == [".mlflow"]


def test_a_runs_folder_from_before_keeps_its_store(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"")
    uri, artifacts = default_store(tmp_path)
    assert uri == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    assert artifacts == tmp_path / "mlartifacts"
    assert not (tmp_path / ".mlflow").exists()


def test_a_run_id_the_store_does_not_have_starts_a_new_mlflow_run(tmp_path):
    uri, artifacts = default_store(tmp_path)
    first = MLflowTracker(uri, "skyrl", "r", artifacts, None)
    first.close("FINISHED")
    again = MLflowTracker(uri, "skyrl", "r", artifacts, first.run_id)  # resumed into the same
    assert again.run_id == first.run_id
    moved = MLflowTracker(uri, "skyrl", "r", artifacts, "0123456789abcdef0123456789abcdef")
    assert moved.run_id not in (None, first.run_id)


def _schema(db) -> list[tuple]:
    """Every table, index and the migration head; a definition's lines sorted, since MLflow's
    own migrations write a table's constraints in an order that varies from build to build."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        head = con.execute("SELECT * FROM alembic_version").fetchall()
    con.close()
    lines = lambda sql: sorted(ln.strip().rstrip(",") for ln in (sql or "").splitlines())  # noqa: E731
    return [(kind, name, lines(sql)) for kind, name, sql in rows] + head


def test_a_new_store_is_a_copy_of_an_empty_one_built_once(tmp_path, monkeypatch):
    """MLflow migrates a new store's schema step by step (seconds); skyrl builds the empty
    store once per MLflow version in the cache and copies it for each new runs folder. The
    copy has the schema MLflow builds itself, and works as one."""
    import mlflow
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runs_a, runs_b = tmp_path / "a", tmp_path / "b"
    uri_a, art_a = default_store(runs_a)
    a = MLflowTracker(uri_a, "skyrl", "r", art_a, None)
    template = tmp_path / "cache" / "mlflow" / f"empty-{mlflow.__version__}.db"
    assert template.is_file()
    built_at = template.stat().st_mtime_ns
    uri_b, art_b = default_store(runs_b)
    b = MLflowTracker(uri_b, "skyrl", "r", art_b, None)
    assert template.stat().st_mtime_ns == built_at  # built once, copied twice
    b.log_metrics({"reward/mean": 0.25}, 3)
    b.close("FINISHED")
    run = MlflowClient(uri_b).get_run(b.run_id)
    assert run.data.metrics["reward/mean"] == 0.25 and run.info.status == "FINISHED"
    assert a.run_id != b.run_id

    own = tmp_path / "own.db"  # the store MLflow builds itself, the slow way
    MlflowClient(f"sqlite:///{own}").search_experiments()
    assert _schema(runs_b / ".mlflow" / "mlflow.db") == _schema(own)
    with sqlite3.connect(runs_b / ".mlflow" / "mlflow.db") as con:
        (where,) = con.execute("SELECT artifact_location FROM experiments WHERE experiment_id = 0")
    con.close()
    assert where == (str(tmp_path / "mlruns" / "0"),)  # where MLflow would put it from here
