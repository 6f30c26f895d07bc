"""What an SWE-bench instance, a patch or a requirements file may say before anything uses it.

Everything here is hostile input (a dataset row, a model's patch, a repository's
requirements): the checks turn a value that could be read as an option, a path outside its
folder, or a build of local code into a ValueError of one line that names the field.

    check_instance(instance)            # ids, repo, commits, version: safe names and hex only
    check_patch(text, "the model patch")  # every file it names stays inside the checkout
    safe_requirements(lines)            # package names only: no paths, URLs, VCS or options
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["check_instance", "check_patch", "check_relpath", "patch_paths", "safe_requirements"]

COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")
"""A commit id: 7 to 40 hex digits (never a ref name, never an option)."""
COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,199}")
"""One path component of our own naming (instance ids, repo owners and names, versions)."""
_FIELDS = {
    "instance_id": "one path component (letters, digits, '.', '_', '+', '-')",
    "version": "letters, digits, '.', '_', '+', '-' (or empty)",
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_instance(instance: dict[str, Any]) -> None:
    """ValueError (one line, naming the field) unless the instance's fields are safe to use
    as git arguments and path components."""
    base = instance.get("base_commit")
    if not isinstance(base, str) or not COMMIT.fullmatch(base):
        raise ValueError(f"base_commit {_show(base)} is not a commit id (7-40 hex digits)")
    setup = instance.get("environment_setup_commit") or ""
    if not isinstance(setup, str) or (setup and not COMMIT.fullmatch(setup)):
        raise ValueError(
            f"environment_setup_commit {_show(setup)} is not a commit id (7-40 hex digits)"
        )
    repo = instance.get("repo")
    parts = repo.split("/") if isinstance(repo, str) else []
    if len(parts) != 2 or not all(COMPONENT.fullmatch(p) for p in parts):
        raise ValueError(f"repo {_show(repo)} is not owner/name")
    iid = instance.get("instance_id")
    if not isinstance(iid, str) or not COMPONENT.fullmatch(iid):
        raise ValueError(f"instance_id {_show(iid)} is not {_FIELDS['instance_id']}")
    version = instance.get("version")
    version = "" if version is None else version
    if not isinstance(version, str) or (version and not COMPONENT.fullmatch(version)):
        raise ValueError(f"version {_show(version)} is not {_FIELDS['version']}")


def check_relpath(path: str, what: str, *, argument: bool = False) -> None:
    """ValueError unless `path` is relative, has no `..`, no `.git` and no empty component;
    with `argument` (it goes on a command line) it must not start with `-` either."""
    parts = path.split("/")
    bad = (
        "is absolute"
        if path.startswith("/")
        else "climbs out with '..'"
        if ".." in parts
        else "is inside .git"
        if any(p.lower() == ".git" for p in parts)
        else "starts with '-'"
        if argument and path.startswith("-")
        else "is not a plain relative path"
        if not path or "" in parts[:-1] or "\0" in path or "\\" in path
        else None
    )
    if bad:
        raise ValueError(f"{what} names the path {_show(path)}, which {bad}")


_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_HEADERS = ("diff --git ", "--- ", "+++ ", "*** ", "Index: ", "rename from ", "rename to ",
            "copy from ", "copy to ")  # fmt: skip # a table of values, laid out by hand
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f",
            "r": "\r", "v": "\v"}  # fmt: skip # a table of values, laid out by hand


def _unquote(name: str) -> str:
    """git's C-style quoted path (`"a/sp\\303\\251c"`), or the name as it is."""
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    out, raw, i = bytearray(), name[1:-1], 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            digits = raw[i + 1 : i + 4]
            if len(digits) == 3 and all(d in "01234567" for d in digits):
                out.append(int(digits, 8) & 0xFF)
                i += 4
                continue
            out += _ESCAPES.get(nxt, nxt).encode()
            i += 2
            continue
        out += ch.encode()
        i += 1
    return out.decode("utf-8", "replace")


def _strip(path: str) -> str:
    """`a/x` -> `x`: the prefix `-p1` drops (what is left is what a tool writes)."""
    return path[2:] if path[:2] in ("a/", "b/") else path


def _header_paths(line: str) -> list[str]:
    """The path(s) a header line names, as the tools would read them (after `-p1`)."""
    return [_strip(p) if p != "/dev/null" else p for p in _raw_header_paths(line)]


def _raw_header_paths(line: str) -> list[str]:
    if line.startswith("diff --git "):
        rest = line[len("diff --git ") :]
        if rest.startswith('"'):
            end = rest.find('"', 1)
            while end > 0 and rest[end - 1] == "\\":
                end = rest.find('"', end + 1)
            return [_unquote(rest[: end + 1]), _unquote(rest[end + 1 :].strip())]
        # unquoted names may hold spaces: every split at " b/" is a reading some tool may take
        cuts = [m.start() for m in re.finditer(" b/", rest)] or [rest.find(" ")]
        return [p for cut in cuts for p in (rest[:cut], rest[cut + 1 :]) if cut > 0] or [rest]
    for head in _HEADERS[1:]:
        if line.startswith(head):
            name = line[len(head) :]
            if not name.startswith('"'):
                name = name.split("\t")[0]
            return [_unquote(name.rstrip("\r"))]
    return []


def patch_paths(text: str) -> list[str]:
    """Every file path the headers of a patch name (hunk bodies skipped by their counts, so
    a removed line `--- x` is not taken for a header), `/dev/null` left out."""
    paths: list[str] = []
    old = new = 0
    for line in text.splitlines():
        if old > 0 or new > 0:  # inside a hunk: count its lines, read nothing as a header
            if line.startswith("\\"):
                continue
            tag = line[:1]
            old -= tag in (" ", "-", "")
            new -= tag in (" ", "+", "")
            if tag in (" ", "-", "+", ""):
                continue
            old = new = 0  # a line no hunk holds: the hunk was short; read it as a header
        hunk = _HUNK.match(line)
        if hunk:
            old = int(hunk.group(1) or 1)
            new = int(hunk.group(2) or 1)
            continue
        for path in _header_paths(line):
            if path != "/dev/null":
                paths.append(path)
    return paths


def check_patch(text: str, what: str) -> list[str]:
    """The paths a patch names (`patch_paths`), after checking each: relative, no `..`, not
    in `.git`, no option lookalike. ValueError (one line, naming `what`) otherwise."""
    paths = patch_paths(text)
    for path in paths:
        check_relpath(path, what)
    return paths


_REQUIREMENT = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*"  # name[extras]
    r"([<>=!~]=?=?\s*[A-Za-z0-9.*+!_-]+\s*(,\s*[<>=!~]=?=?\s*[A-Za-z0-9.*+!_-]+\s*)*)?"  # versions
    r"(;[A-Za-z0-9_.\s'\"<>=!~(),-]*)?"  # environment markers
)
_HASH = re.compile(r"\s--hash=[A-Za-z0-9]+:[0-9a-fA-F]+")


def safe_requirements(lines: Iterable[str], what: str) -> list[str]:
    """The requirement lines of `what`, each a package name with optional extras, versions,
    markers and `--hash`es; comments and blank lines dropped. ValueError (one line) for
    anything pip could build from here or fetch from elsewhere: paths (`.`, `./x`, `/x`),
    URLs and VCS links, `name @ url`, options (`-e`, `-r`, `-c`, `--index-url`, ...),
    `${VAR}` expansions and line continuations."""
    kept = []
    for number, raw in enumerate(lines, 1):
        line = re.sub(r"(^|\s)#.*", "", raw).strip()
        if not line:
            continue
        spec = _HASH.sub("", f" {line}").strip()
        if not _REQUIREMENT.fullmatch(spec) or "@" in spec or "${" in spec:
            raise ValueError(
                f"{what} line {number} {_show(raw.strip())} is not a package name with "
                "versions (paths, URLs, VCS links and pip options are refused: they could "
                "build or fetch code on the host)"
            )
        kept.append(line)
    return kept
