"""swe-bench-mini: SWE-bench-format instances on small repositories of our own, built offline.

    from tasks.swe import build_suite, load_instances
    suite = build_suite()                    # <cache>/swe-bench-mini-v1 (built once, ~15 s)
    instances = load_instances("swe-bench-mini")
    instances[0]["FAIL_TO_PASS"]             # ['tests/test_slug.py::test_...', ...]

The suite folder holds `instances.jsonl` (the official SWE-bench columns; FAIL_TO_PASS and
PASS_TO_PASS JSON-encoded as upstream stores them) and `repos/skyrl-mini__<name>/`, one git
repository per mini repo, the layout `environments.swe_harness` grades against.
`load_instances` also reads any official-format JSONL or Parquet file and returns the test
lists decoded, refusing a row whose `instance_id`, `repo`, `base_commit` or `version` is not
a plain name or commit id (`tasks.swe.checks.check_instance`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tasks.cache import cache_dir
from tasks.swe.build import build_instances
from tasks.swe.checks import check_instance
from tasks.swe.source import fingerprint, load_all

__all__ = ["SUITE_NAME", "VERSION", "build_suite", "load_instances", "suite_repos_dir"]

SUITE_NAME = "swe-bench-mini"
"""The name `skyrl eval --suite` and `load_instances` accept."""
VERSION = "v1"
"""Bump when the layout of the built suite changes (source edits rebuild on their own)."""
REQUIRED = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
"""Columns an instance file must have (`hints_text`, `created_at`, `version`,
`environment_setup_commit` are optional and default to empty strings)."""
_STAMP = "SOURCE"


def _suite_dir() -> Path:
    return cache_dir() / f"{SUITE_NAME}-{VERSION}"


def build_suite(*, force: bool = False) -> Path:
    """Build swe-bench-mini into the cache (once) and return its folder.

    Idempotent: a complete suite built from the same source files is returned as is.
    Atomic: the suite is built in a temp folder beside it and renamed into place, so a reader
    sees a complete suite or none; a racing builder's identical result is simply dropped.
    """
    final = _suite_dir()
    stamp = fingerprint()
    stamp_file = final / _STAMP
    if not force and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.build-", dir=final.parent))
    try:
        records = build_instances(tmp, load_all())
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        (tmp / "instances.jsonl").write_text(lines, encoding="utf-8")
        (tmp / _STAMP).write_text(stamp)
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, old / "suite")
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:  # another process renamed its (identical) build in first
            if not (final / _STAMP).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def suite_repos_dir() -> Path:
    """The folder of the suite's git repositories (`skyrl-mini__<name>`), built if needed."""
    return build_suite() / "repos"


def _test_list(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: {key} is not a JSON-encoded list of test ids") from None
    if hasattr(value, "tolist"):  # numpy arrays from pandas
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError(f"{where}: {key} must be a list of test ids (or its JSON encoding)")
    return value


def _instance(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ValueError(f"{where} is not a JSON object")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ValueError(f"{where} lacks the SWE-bench column(s) {', '.join(missing)}")
    out = dict(row)
    for key in ("hints_text", "created_at", "version", "environment_setup_commit"):
        value = out.get(key)
        out[key] = "" if value is None else str(value)
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        out[key] = _test_list(row[key], where, key)
    try:  # ids and commits reach git and the file system: refuse what is not plainly one
        check_instance(out)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return out


def load_instances(path_or_name: str | Path) -> list[dict[str, Any]]:
    """Instances from the suite name `swe-bench-mini`, or an official-format JSONL/Parquet
    file; FAIL_TO_PASS and PASS_TO_PASS come back as lists. ValueError for a bad input."""
    if str(path_or_name) == SUITE_NAME:
        path = build_suite() / "instances.jsonl"
    else:
        path = Path(path_or_name)
    if not path.is_file():
        raise ValueError(
            f"{path_or_name} is neither a known suite ({SUITE_NAME}) nor an existing "
            ".jsonl or .parquet file of SWE-bench instances"
        )
    rows: list[Any]
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # optional: only for Parquet input
        except ImportError:
            raise ValueError(f"reading {path} needs pyarrow (pip install pyarrow)") from None
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as e:
            raise ValueError(f"{path} is not a readable Parquet file ({e})") from None
    elif path.suffix in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} is not valid JSON ({e.msg})") from None
        else:
            rows = []
            for i, line in enumerate(text.splitlines()):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(
                            f"{path} line {i + 1} is not valid JSON ({e.msg})"
                        ) from None
    else:
        raise ValueError(
            f"{path} has the suffix {path.suffix!r}; accepted: .jsonl, .json, .parquet"
        )
    instances = [_instance(r, f"{path} row {i + 1}") for i, r in enumerate(rows)]
    if not instances:
        raise ValueError(f"{path} holds no SWE-bench instances")
    return instances
