"""The source form of swe-bench-mini: plain files under `tasks/swe/repos/<name>/`.

One folder per small repository:

    meta.toml            repo name, author, the commits and the instances (format below)
    commits/<dir>/...    one overlay per commit: files written over the previous tree
    issues/<number>.md   the issue text of an instance (its `problem_statement`)

Every file in an overlay carries an extra `.txt` suffix (`textkit/slug.py.txt` is committed as
`textkit/slug.py`), so that our own linters, type checker and test collector never mistake a
mini repository's code for skyrl's.

`meta.toml` holds `author`, `email`, a `[[commits]]` list (`dir`, `version`, `date`,
`message`) and an `[[instances]]` list (`number`, `base`: the commit dir it starts from,
`created_at`, `issue`, optional `hints`, and `fix` / `tests` edit lists). An edit names a
`path` and either `old` + `new` (replace exactly one occurrence), `append` (add text at the
end, creating the file if needed) or `content` (the whole file). `fix` edits become the gold
`patch` and may only touch source files; `tests` edits become the `test_patch` and may only
touch test files.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

OWNER = "skyrl-mini"
"""The owner part of every repo name (`skyrl-mini/<name>`)."""
REPOS_DIR = Path(__file__).parent / "repos"
"""Where the source folders of the mini repositories live."""
SUFFIX = ".txt"
"""Extra suffix every overlay file carries in our tree (dropped when committed)."""


@dataclass(frozen=True)
class Commit:
    """One commit of a mini repository's history."""

    dir: str
    """The overlay folder under `commits/`."""
    version: str
    """The package version at this commit (an instance's `version`)."""
    date: str
    """ISO 8601 author and committer date, fixed so the commit hash is reproducible."""
    message: str
    """The commit message."""


@dataclass(frozen=True)
class Edit:
    """One change to one file: replace, append or write whole."""

    path: str
    """Repository-relative POSIX path."""
    old: str | None = None
    """Text that must occur exactly once; replaced by `new`."""
    new: str | None = None
    """Replacement for `old`."""
    append: str | None = None
    """Text added at the end of the file (created if missing)."""
    content: str | None = None
    """The whole new file."""

    def __post_init__(self) -> None:
        kinds = [self.old is not None, self.append is not None, self.content is not None]
        if sum(kinds) != 1 or (self.old is not None) != (self.new is not None):
            raise ValueError(f"edit of {self.path} needs old+new, append or content")


@dataclass(frozen=True)
class InstanceSource:
    """One task instance: a bug at `base`, its issue, its fix and the tests that show it."""

    number: int
    """The instance number (the `<n>` of `skyrl-mini__<name>-<n>`)."""
    base: str
    """The commit dir the instance starts from."""
    created_at: str
    """When the issue was filed (ISO 8601, `Z`)."""
    problem_statement: str
    """The issue text."""
    hints_text: str
    """Maintainer comments before the fix (may be empty)."""
    fix: tuple[Edit, ...]
    """Edits of source files: the gold patch."""
    tests: tuple[Edit, ...]
    """Edits of test files: the test patch."""


@dataclass(frozen=True)
class RepoSource:
    """A mini repository as written in our tree."""

    author: str
    """Author and committer name of every commit."""
    email: str
    """Author and committer email of every commit."""
    root: Path
    """The source folder."""
    commits: tuple[Commit, ...]
    """The history, oldest first."""
    instances: tuple[InstanceSource, ...]
    """The task instances on this repository."""

    def overlay(self, commit: Commit) -> dict[str, bytes]:
        """The files of one commit's overlay: repository path -> content."""
        folder = self.root / "commits" / commit.dir
        files = {}
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                rel = path.relative_to(folder).as_posix()
                if not rel.endswith(SUFFIX):
                    raise ValueError(f"{path} lacks the {SUFFIX} suffix every overlay file carries")
                files[rel[: -len(SUFFIX)]] = path.read_bytes()
        return files

    def commit(self, dir: str) -> Commit:
        """The commit whose overlay folder is `dir`."""
        for c in self.commits:
            if c.dir == dir:
                return c
        raise ValueError(f"{self.root / 'meta.toml'}: no commit with dir {dir!r}")

    @property
    def name(self) -> str:
        """The folder's name, also the repository's (`skyrl-mini/<name>`)."""
        return self.root.name

    @property
    def repo(self) -> str:
        """`owner/name` as SWE-bench writes it; the built repository's folder is the same
        with `__` for `/`, which is how the environment finds it."""
        return f"{OWNER}/{self.name}"


def is_test_path(path: str) -> bool:
    """True for test files (the SWE-bench split: a `tests`/`test` folder or a `test_` file)."""
    parts = PurePosixPath(path).parts
    return any(p in ("test", "tests", "testing") for p in parts[:-1]) or parts[-1].startswith(
        "test_"
    )


def _edits(raw: list[dict], where: str) -> tuple[Edit, ...]:
    try:
        return tuple(Edit(**item) for item in raw)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def load_repo(root: Path) -> RepoSource:
    """Read one source folder's `meta.toml`; ValueError names what is wrong."""
    meta_path = root / "meta.toml"
    meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
    commits = tuple(Commit(**c) for c in meta["commits"])
    instances = []
    for raw in meta["instances"]:
        where = f"{meta_path} instance {raw['number']}"
        fix, tests = _edits(raw["fix"], where), _edits(raw["tests"], where)
        if any(is_test_path(e.path) for e in fix) or not all(is_test_path(e.path) for e in tests):
            raise ValueError(f"{where}: fix edits must touch source files, tests edits test files")
        issue = (root / "issues" / raw["issue"]).read_text(encoding="utf-8")
        instances.append(
            InstanceSource(
                number=int(raw["number"]),
                base=str(raw["base"]),
                created_at=str(raw["created_at"]),
                problem_statement=issue,
                hints_text=str(raw.get("hints", "")),
                fix=fix,
                tests=tests,
            )
        )
    source = RepoSource(
        author=str(meta["author"]),
        email=str(meta["email"]),
        root=root,
        commits=commits,
        instances=tuple(instances),
    )
    for inst in source.instances:
        source.commit(inst.base)
    return source


def load_all(repos_dir: Path = REPOS_DIR) -> list[RepoSource]:
    """Every mini repository, in name order."""
    return [load_repo(p) for p in sorted(repos_dir.iterdir()) if (p / "meta.toml").is_file()]


def apply_edits(worktree: Path, edits: tuple[Edit, ...], where: str) -> None:
    """Apply edits to the files of a checked-out tree; ValueError if an `old` is not unique."""
    for edit in edits:
        path = worktree / edit.path
        if edit.content is not None:
            text = edit.content
        elif edit.append is not None:
            text = (path.read_text(encoding="utf-8") if path.exists() else "") + edit.append
        else:
            assert edit.old is not None and edit.new is not None
            text = path.read_text(encoding="utf-8")
            if text.count(edit.old) != 1:
                raise ValueError(
                    f"{where}: the `old` text of the edit of {edit.path} occurs "
                    f"{text.count(edit.old)} times, not once"
                )
            text = text.replace(edit.old, edit.new)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def fingerprint(repos_dir: Path = REPOS_DIR) -> str:
    """SHA-256 over every source file and the builder's own modules, so that a change to
    either rebuilds the cached suite."""
    digest = hashlib.sha256()
    builder = sorted(Path(__file__).parent.glob("*.py"))
    for path in [*builder, *sorted(repos_dir.rglob("*"))]:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
