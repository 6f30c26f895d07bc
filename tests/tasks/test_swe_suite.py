"""swe-bench-mini: the suite builds reproducibly, offline, in the official SWE-bench format."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.swe import SUITE_NAME, build_suite, load_instances
from tasks.swe.build import build_repo
from tasks.swe.source import Edit, apply_edits, is_test_path, load_all, load_repo
from tasks.swe.testrun import directives

COLUMNS = [
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The suite, built once per session into a private cache (shared with the harness tests)."""
    cache = tmp_path_factory.getbasetemp() / "swe-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYRL_CACHE_DIR", str(cache))
        yield build_suite()


@pytest.fixture(scope="module")
def rows(suite: Path) -> list[dict]:
    lines = (suite / "instances.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def _diff_files(patch: str) -> list[str]:
    return re.findall(r"^diff --git a/(\S+) b/", patch, flags=re.MULTILINE)


def test_suite_has_enough_distinct_instances_on_several_repos(rows: list[dict]) -> None:
    assert len(rows) >= 12
    assert len({r["instance_id"] for r in rows}) == len(rows)
    assert len({r["repo"] for r in rows}) >= 4
    shared = [r["repo"] for r in rows]
    assert any(shared.count(repo) > 1 for repo in shared), "some repos carry several instances"


def test_rows_have_the_official_columns_and_encodings(rows: list[dict], suite: Path) -> None:
    for row in rows:
        assert list(row) == COLUMNS
        assert re.fullmatch(r"skyrl-mini__[a-z]+-\d+", row["instance_id"])
        assert row["repo"].startswith("skyrl-mini/")
        assert re.fullmatch(r"[0-9a-f]{40}", row["base_commit"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["created_at"])
        assert isinstance(row["version"], str) and row["problem_statement"].strip()
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            assert isinstance(row[key], str), "stored JSON-encoded, as the official dataset"
            tests = json.loads(row[key])
            assert all(re.fullmatch(r"tests/test_\w+\.py::test_\w+", t) for t in tests)
        f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        assert f2p and not set(f2p) & set(p2p)
        repo = suite / "repos" / row["repo"].replace("/", "__")
        for commit in (row["base_commit"], row["environment_setup_commit"]):
            assert _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def test_patch_touches_source_only_and_test_patch_tests_only(rows: list[dict]) -> None:
    for row in rows:
        assert row["patch"].startswith("diff --git a/")
        assert _diff_files(row["patch"]) and not any(map(is_test_path, _diff_files(row["patch"])))
        assert _diff_files(row["test_patch"]) and all(
            map(is_test_path, _diff_files(row["test_patch"]))
        )
        # every FAIL_TO_PASS test lives in a file the test patch touches (the test directives)
        files = set(directives(row["test_patch"]))
        assert {t.split("::")[0] for t in json.loads(row["FAIL_TO_PASS"])} <= files


def test_patches_apply_to_base_commit(rows: list[dict], suite: Path, tmp_path: Path) -> None:
    row = rows[0]
    work = tmp_path / "w"
    repo = suite / "repos" / row["repo"].replace("/", "__")
    assert _git(tmp_path, "clone", "-q", str(repo), "w").returncode == 0
    assert _git(work, "checkout", "-q", row["base_commit"]).returncode == 0
    for key in ("patch", "test_patch"):
        (tmp_path / key).write_text(row[key])
        proc = _git(work, "apply", "--check", str(tmp_path / key))
        assert proc.returncode == 0, proc.stderr


def test_base_commits_are_reproducible(rows: list[dict], tmp_path: Path) -> None:
    """Two fresh builds of every repository give the hashes the suite recorded."""
    recorded = {r["base_commit"] for r in rows}
    for attempt in ("a", "b"):
        built: set[str] = set()
        for source in load_all():
            built |= set(build_repo(source, tmp_path / attempt / source.name).values())
        assert recorded <= built


def test_build_suite_is_idempotent(suite: Path) -> None:
    jsonl = suite / "instances.jsonl"
    before = jsonl.stat().st_mtime_ns
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYRL_CACHE_DIR", str(suite.parent))
        assert build_suite() == suite
    assert jsonl.stat().st_mtime_ns == before
    assert not [p for p in suite.parent.iterdir() if p.name.startswith(".")], "no temp left"


def test_load_instances_by_name_decodes_test_lists(suite: Path, rows: list[dict]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYRL_CACHE_DIR", str(suite.parent))
        instances = load_instances(SUITE_NAME)
    assert [i["instance_id"] for i in instances] == [r["instance_id"] for r in rows]
    assert instances[0]["FAIL_TO_PASS"] == json.loads(rows[0]["FAIL_TO_PASS"])
    assert load_instances(suite / "instances.jsonl") == instances


def test_load_instances_reads_an_official_parquet_copy(
    suite: Path, rows: list[dict], tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert load_instances(path) == load_instances(suite / "instances.jsonl")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", '{"instance_id": "x"\n', "line 1 is not valid JSON"),
        ("short.jsonl", '{"instance_id": "x", "repo": "a/b"}\n', "lacks the SWE-bench column"),
        ("empty.jsonl", "\n", "holds no SWE-bench instances"),
        ("data.csv", "a,b\n", "accepted: .jsonl, .json, .parquet"),
        ("broken.parquet", "not parquet", "not a readable Parquet file"),
    ],
)
def test_load_instances_rejects_bad_files(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_instances(path)


def test_load_instances_rejects_bad_test_lists_and_unknown_names(
    rows: list[dict], tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**rows[0], "FAIL_TO_PASS": "tests/x.py::t"}) + "\n")
    with pytest.raises(ValueError, match="FAIL_TO_PASS is not a JSON-encoded list"):
        load_instances(path)
    with pytest.raises(ValueError, match="neither a known suite"):
        load_instances("swe-bench-huge")


def test_an_ambiguous_edit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    with pytest.raises(ValueError, match="occurs 2 times"):
        apply_edits(tmp_path, (Edit(path="m.py", old="x = 1", new="x = 2"),), "here")


@pytest.mark.parametrize(
    "fields",
    [{"old": "x = 1"}, {"append": "y\n", "content": "z\n"}, {}, {"new": "x = 2"}],
)
def test_an_edit_that_is_not_exactly_one_kind_is_refused(fields: dict) -> None:
    with pytest.raises(ValueError, match="edit of m.py needs old\\+new, append or content"):
        Edit(path="m.py", **fields)


def test_a_mini_repository_is_named_by_its_folder_alone(tmp_path: Path) -> None:
    """`repo`, and with it the built repository's folder (`skyrl-mini__<name>`, where the
    environment looks), follows from the source folder's name: meta.toml does not repeat it,
    so the two cannot disagree."""
    shutil.copytree(load_all()[0].root, tmp_path / "renamed")
    source = load_repo(tmp_path / "renamed")
    assert (source.name, source.repo) == ("renamed", "skyrl-mini/renamed")
