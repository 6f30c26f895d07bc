"""A Harbor task's Dockerfile read as data: its instructions (`_instructions`, heredocs and
continuation lines joined), variables and words, the digest of it and its build context
(`_context_digest`, the image cache's key), and the `Plan` of what stands for its FROM (a root
file system of `environments.base_images`' table, or the host's system). Nothing here builds:
`environments.harbor_build` does, `environments.harbor` caches what it built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.base_images import Base, base_for, final_base, spec_of
from environments.rootfs import RootfsSpec

BUILD_VERSION = "13"
"""Part of every image digest: bump when the build's meaning changes."""


_HEREDOC = re.compile(r"<<-?(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
"""A heredoc of a RUN line: its delimiter word (group 2)."""


_TOP_WRITE = re.compile(
    r"(?:>>?|\btee\s+(?:-a\s+)?)\s*(/[A-Za-z0-9_][A-Za-z0-9._-]*)(?=$|[\s;&|)])"
)
"""A RUN's shell writing a file at the top of the image (`> /entrypoint.sh`)."""


_APT_INSTALL = re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\s+([^;&|<>()\n]+)")


BASE_ENV = "SKYRL_HARBOR_BASE"
"""`host`: every task's `FROM` is this machine's own system (the fallback a user asks for);
unset or `image`: the root file system the table of base images gives."""


@dataclass(frozen=True)
class BuildOptions:
    """How a task's image is built."""

    network: bool = False
    """RUN steps, and building a base image's root file system, may use the network
    (as `docker build` reaches the package registries)."""
    base: str = "image"
    """`image`: FROM is the root file system the table of base images gives; `host`: this
    machine's own system stands for every FROM."""
    image_as: tuple[tuple[str, str], ...] = ()
    """(digest, image): a FROM whose digest starts with `digest` (hex) is read as `image`
    (`python@sha256:8e53...` as `python:3.10-slim`): offline, a digest with no tag cannot
    be resolved, and is otherwise read as the image's `:latest`."""

    @classmethod
    def from_kwargs(
        cls,
        network: bool | str | None = None,
        base: str | None = None,
        image_as: Mapping[Any, Any] | str | None = None,
    ) -> BuildOptions:
        """Options from env.kwargs (strings from `--set` too), `$SKYRL_HARBOR_BASE` the
        default of `base`; ValueError (one sentence) for a value it does not know."""
        chosen = base or os.environ.get(BASE_ENV) or "image"
        if chosen not in ("image", "host"):
            raise ValueError(f"unknown Harbor base {chosen!r}; known: image, host")
        if isinstance(network, str):
            if network.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"build_network must be true or false, got {network!r}")
            network = network.lower() in ("1", "true", "yes", "on")
        return cls(network=bool(network), base=chosen, image_as=_image_as(image_as or {}))

    def read_as(self, name: str) -> tuple[str, str]:
        """The image `name` is read as, and a note saying so ("" when it is read as itself)."""
        m = re.search(r"@sha256:([0-9a-f]+)$", name.strip().lower())
        found = m.group(1) if m else None
        for digest, image in self.image_as:
            if found is not None and found.startswith(digest):
                return image, f"{name} read as {image} (env.kwargs.image_as)"
        return name, ""


def _image_as(given: Mapping[Any, Any] | str) -> tuple[tuple[str, str], ...]:
    if not isinstance(given, Mapping):
        raise ValueError(
            "env.kwargs.image_as maps a digest to the image it stands for, e.g. "
            "--set env.kwargs.image_as.sha256:8e5387460bf1=python:3.10-slim"
        )
    out = []
    for key, image in given.items():
        digest = str(key).strip().lower().removeprefix("sha256:")
        if not re.fullmatch(r"[0-9a-f]{12,64}", digest):
            raise ValueError(
                f"env.kwargs.image_as: {str(key)!r} is not a digest (sha256: and 12 to 64 hex digits)"
            )
        if not isinstance(image, str) or base_for(image) is None:
            raise ValueError(
                f"env.kwargs.image_as: no root file system here stands in for {str(image)!r} "
                "(the known base images are in the table of docs/environments.md)"
            )
        out.append((digest, image.strip()))
    return tuple(out)


@dataclass
class Image:
    """What a built Dockerfile gives an episode."""

    digest: str
    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    """The Dockerfile's CMD (what a compose service runs after the ENTRYPOINT)."""
    problems: list[str] = field(default_factory=list)
    """Steps not honoured here, each `STEP: why` (empty: the image is as Harbor's)."""
    layer: str = ""
    """Host folder of the built layer (paths below it are paths from the sandbox's root)."""
    system_root: str = ""
    """Host folder of the root file system standing in for FROM ('': the host's system)."""
    transient: bool = False
    """A problem of this machine's state (no bubblewrap, a base not built offline): never
    cached."""
    hidden_failures: list[str] = field(default_factory=list)
    """RUN steps that exited 0 with a failed download in their output (`curl ... | sh`
    returns sh's status), each `RUN ...: why`: a cause of a 0 that no verifier names."""
    log: list[str] = field(default_factory=list)
    """The build, step by step, with what each RUN printed (kept in the cache's
    `build.log`, not in `image.json`)."""
    build_log: str = ""
    """Host path of the cached image's `build.log` ('' for an image never cached)."""


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped;
    a RUN's heredocs (BuildKit's `RUN python3 - <<'EOF'` ... `EOF`) kept in its arguments,
    lines as written, for the shell that runs it. By hand: dockerfile-parse 2.0.1 (the
    newest) reads a heredoc's body as instructions (`print("hi")` as PRINT, `RUN = 1` as RUN)."""
    steps: list[tuple[str, str]] = []
    current = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        rest = rest.strip()
        if word.upper() == "RUN":
            for m in _HEREDOC.finditer(rest):
                body = []
                while i < len(lines) and lines[i].strip() != m.group(2):
                    body.append(lines[i])
                    i += 1
                i += 1
                rest += "\n" + "\n".join(body) + "\n" + m.group(2)
        steps.append((word.upper(), rest))
        current = ""
    if current.strip():
        word, _, rest = current.strip().partition(" ")
        steps.append((word.upper(), rest.strip()))
    return steps


def _expand(text: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, "")

    return re.sub(r"\$\{(\w+)(?::-[^}]*)?\}|\$(\w+)", sub, text)


def _words(args: str) -> list[str] | None:
    """The exec form (`["a", "b"]`) as a list, or None for the shell form."""
    if args.startswith("["):
        with contextlib.suppress(ValueError):
            value = json.loads(args)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
    return None


def _pairs(args: str) -> dict[str, str]:
    """ENV/ARG arguments: `K=V K2="V 2"` or the old `K V`."""
    if "=" not in args.split(" ", 1)[0]:
        key, _, value = args.partition(" ")
        return {key: value.strip()}
    out = {}
    for token in shlex.split(args):
        key, _, value = token.partition("=")
        out[key] = value
    return out


def _context_digest(env_dir: Path, dockerfile: str) -> str:
    h = hashlib.sha256(f"{BUILD_VERSION}\0{dockerfile}\0".encode())
    if _HEREDOC.search(dockerfile):  # read line by line before heredocs were: built anew
        h.update(b"heredocs\0")
    if _TOP_WRITE.search(dockerfile):  # such a file was lost before `_top_files`: built anew
        h.update(b"top files\0")
    for folder, dirs, files in os.walk(env_dir):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
            path = Path(folder) / name
            rel = path.relative_to(env_dir).as_posix()
            st = path.lstat()
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(path.read_bytes())
    return h.hexdigest()[:32]


def dockerfile_of(task_dir: Path) -> str:
    """The task's Dockerfile, or the one a folder of skyrl's older form implies
    (`environment/files/` copied to /app, `environment/setup.sh` run there)."""
    path = task_dir / "environment" / "Dockerfile"
    if path.is_file() and not path.is_symlink():
        return path.read_text(encoding="utf-8", errors="replace")
    lines = ["FROM host", "WORKDIR /app"]
    if (task_dir / "environment" / "files").is_dir():
        lines.append("COPY files/ /app/")
    if (task_dir / "environment" / "setup.sh").is_file():
        lines += ["COPY setup.sh /tmp/setup.sh", "RUN bash /tmp/setup.sh && rm /tmp/setup.sh"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the base


@dataclass(frozen=True)
class Plan:
    """What stands for a Dockerfile's FROM: the host's system, or a root file system."""

    base: Base | None = None
    spec: RootfsSpec | None = None
    problem: str | None = None
    """`FROM ...: why` when no root file system stands in for the image."""

    def key(self) -> str:
        return self.spec.key() if self.spec else ("host" if self.problem is None else "none")


def apt_packages(text: str) -> tuple[str, ...]:
    """The packages `apt-get install` lines of a Dockerfile or script name (variables and
    flags left out, `=VERSION` dropped): a base image's root file system includes them."""
    found = set()
    for m in _APT_INSTALL.finditer(text.replace("\\\n", " ")):
        for word in m.group(1).split():
            if word.startswith("-") or "$" in word or not re.fullmatch(r"[a-z0-9][\w.+:=-]*", word):
                continue
            found.add(word.split("=", 1)[0].split(":", 1)[0])
    return tuple(sorted(found))


def apt_recommends(text: str) -> bool:
    """Whether an `apt-get install` line of a Dockerfile installs Recommends (apt's default:
    the line has no `--no-install-recommends`)."""
    return any(
        "--no-install-recommends" not in m.group(0)
        for m in _APT_INSTALL.finditer(text.replace("\\\n", " "))
    )


def plan(task_dir: Path, text: str, options: BuildOptions) -> Plan:
    """The base the Dockerfile `text` starts from, as `options` ask (`base=host`: the host's)."""
    if options.base == "host":
        return Plan()
    variables: dict[str, str] = {}
    froms: list[str] = []
    for word, args in _instructions(text):
        if word == "ARG" and not froms:  # an ARG before the first FROM serves FROM lines
            variables.update(_pairs(args))
        elif word == "FROM":
            froms.append(_expand(args, variables))
    name, stages = final_base(froms)
    if name.lower() in ("host", ""):  # skyrl's older task form (no Dockerfile)
        return Plan()
    name, read_as = options.read_as(name)
    base = base_for(name)
    if base is not None and read_as:
        base = dataclasses.replace(base, note=f"{read_as}; {base.note}" if base.note else read_as)
    if base is None:
        return Plan(
            problem=f"FROM {name}: no root file system here stands in for the base image "
            f"{name} (the known base images are in the table of docs/environments.md; "
            f"env.kwargs.base=host runs the task on this machine's own system instead)"
        )
    test_sh = task_dir / "tests" / "test.sh"
    verifier = test_sh.read_text(errors="replace") if test_sh.is_file() else ""
    extra = {*apt_packages(text), *apt_packages(verifier)}
    for other in stages:  # the tools of earlier stages (a golang build stage) are there too
        known = base_for(other)
        extra |= set(known.spec().packages) if known else set()
    return Plan(base, spec_of(base, tuple(sorted(extra)), apt_recommends(text)))


def _read_dockerfile(path: Path) -> str:
    if not path.is_file() or path.is_symlink():
        return "FROM scratch\n"  # no root file system stands for it: a pre-flight problem
    return path.read_text(encoding="utf-8", errors="replace")


def _service_dockerfile(context: Path) -> str:
    return _read_dockerfile(context / "Dockerfile")
