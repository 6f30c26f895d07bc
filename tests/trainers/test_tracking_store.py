"""Issue 13, item 16: MLflow's default store lives in runs/.mlflow/; older runs folders keep theirs."""

from __future__ import annotations

import os

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
