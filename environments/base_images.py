"""Which Debian root file system stands in for a Dockerfile's `FROM` image.

A Harbor task's Dockerfile starts `FROM` an image from a registry (`python:3.12-slim`,
`golang:1.22`, ...). Without a container runtime, `environments.harbor` builds a Debian root
file system from Debian's packages instead (`environments.rootfs`) and adds what makes the
image's conventions hold: its `ENV`, its `WORKDIR`, and shims (a `python` and a `pip` in
`/usr/local/bin` as the official python image has). `base_for(name)` reads `TABLE`:

| image                                   | Debian release                  | packages added               |
|-----------------------------------------|---------------------------------|------------------------------|
| `debian:bookworm`, `12`, `*-slim`       | bookworm                        |                              |
| `debian:bullseye`, `11`                 | bullseye                        |                              |
| `debian:trixie`, `13`, `latest`, none   | trixie                          |                              |
| `ubuntu:20.04`/`focal`                  | bullseye (nearest Debian)       | procps; `file` with apt Recommends |
| `ubuntu:22.04`/`jammy`                  | bookworm (nearest Debian)       | procps; `file` with apt Recommends |
| `ubuntu:24.04`/`noble`, other tags      | trixie (nearest Debian)         | procps; `file` with apt Recommends; GCC 13's C rules |
| `python:3.8*`, `3.9*`                   | bullseye (Python 3.9)           | python3, pip, venv, shims    |
| `python:3.10*`, `3.11*`                 | bookworm (Python 3.11)          | python3, pip, venv, shims    |
| `python:3.12*`, `3.13*`, `3.14*`, `3`   | trixie (Python 3.13)            | python3, pip, venv, shims    |
| (a python tag naming a release)         | the one whose Python is the tag's, else the named one |              |
| `golang:*`                              | trixie (Go 1.24); a named release if its Go is not older than the tag's | golang-go, gcc, git, make |
| `node:18*`                              | bookworm (Node 18)              | nodejs, npm, git             |
| `node:*`                                | trixie (Node 20)                | nodejs, npm, git             |
| `rust:*`                                | trixie (Rust 1.85)              | rustc, cargo, gcc, git       |
| `ghcr.io/astral-sh/uv:*-<release>*`     | the tag's release, its Python   | python3, pip, venv, kit's uv |
| `buildpack-deps:*`                      | the tag's release               | build-essential, git, curl   |
| `ghcr.io/laude-institute/t-bench/python-3-13`, `ubuntu-24-04` (Terminal-Bench's) | as `python:3.13-slim`, `ubuntu:24.04` | theirs, tmux, asciinema, curl, procps |

Docker Hub's images are the same under `docker.io/library/`, `mirror.gcr.io/` and
`public.ecr.aws/docker/library/`, and a `@sha256:` digest is ignored. A tag naming a Debian release (`python:3.12-slim-bookworm`, `node:20-bullseye`) picks that
release, except that a python tag whose version is another release's own Python gets that
release (`python:3.13-slim-bookworm`: trixie, whose Python is 3.13; the image is 3.13
built on bookworm, and its programs see the Python). The Python, Go, Node and Rust versions are Debian's, which may differ from the tag's
(`python:3.12` runs Python 3.13). The non-slim python, node and golang images also get the
build tools of their buildpack-deps base; ubuntu images Ubuntu's apt source list and an empty
`/var/lib/apt/lists` (`_ubuntu_sources`); Ubuntu 24.04's GCC 13 is stood in for by trixie's
GCC 14 with GCC 13's C rules (`GCC13_C_HOOK`). Every root file system also holds `BASE_PACKAGES`,
the tools the offline verifier kit needs (`curl` for its shim, `python3` for its uv).
An image the table does not know (Alpine, a private image) is a one-sentence pre-flight
reason naming it; `env.kwargs.base=host` runs such a task on this machine's own system.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field

from environments.rootfs import RootfsSpec

__all__ = [
    "BASE_PACKAGES",
    "GCC13_C_HOOK",
    "GCC13_C_SCRIPT",
    "Base",
    "base_for",
    "final_base",
    "spec_of",
]

BASE_PACKAGES = ("ca-certificates", "curl", "python3")
"""In every root file system: the offline kit's `curl` shim calls the real curl, its uv
runs on `/usr/bin/python3`, and a networked build reaches HTTPS registries."""
PYTHON = ("python3", "python3-pip", "python3-venv")
BUILD_TOOLS = ("build-essential", "git", "curl", "wget", "procps")
"""What the non-slim official images inherit from buildpack-deps."""
RELEASES = {"bullseye": "11", "bookworm": "12", "trixie": "13"}
NEWEST = "trixie"
MIRRORS = r"^(docker\.io/|index\.docker\.io/|registry-1\.docker\.io/|mirror\.gcr\.io/|public\.ecr\.aws/docker/)"
"""Registry prefixes that name Docker Hub's own images (`public.ecr.aws/docker/library/x`)."""
PIP_SHIM = '#!/bin/sh\nexec /usr/bin/python3 -m pip "$@"\n'
UV_SHIM = '#!/bin/sh\nexec "$(ls -d /.skyrl-offline/uv/* | tail -1)/uv" "$@"\n'
UVX_SHIM = '#!/bin/sh\nexec "$(ls -d /.skyrl-offline/uv/* | tail -1)/uvx" "$@"\n'
"""The uv images' `uv`: the offline kit's (fetched from PyPI, as for verifiers)."""


@dataclass(frozen=True)
class Base:
    """What stands in for one base image."""

    image: str
    """The image as the Dockerfile names it (normalised: no registry prefix, a tag)."""
    release: str
    packages: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    workdir: str = "/"
    links: tuple[tuple[str, str], ...] = ()
    """(path, target): symlinks the image has (`/usr/local/bin/python` -> python3)."""
    scripts: tuple[tuple[str, str], ...] = ()
    """(path, text): small executables the image has (`/usr/local/bin/pip`)."""
    dirs: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    """(path, text): plain files the image has (Ubuntu's apt source list)."""
    hooks: tuple[str, ...] = ()
    """Commands run on the built root file system (`RootfsSpec.hooks`)."""
    note: str = field(default="", compare=False)
    """How it differs from the real image (a Python version, a digest read as a tag): the
    eval line of a task that scores 0 shows it (`harbor.stand_in`)."""

    def spec(self) -> RootfsSpec:
        packages = tuple(sorted({*BASE_PACKAGES, *self.packages}))
        return RootfsSpec(self.release, packages, hooks=self.hooks)


def _release_in(tag: str) -> str | None:
    """The Debian release a tag names (`3.12-slim-bookworm` -> bookworm), or None."""
    for name in RELEASES:
        if re.search(rf"(^|[-.]){name}($|[-.])", tag):
            return name
    return None


UBUNTU_BASE = ("procps",)
"""What Ubuntu's base image has and Debian's does not (`ps`, `pgrep`: a test that checks a
service's user with `pgrep -u` runs it)."""
TBENCH_TOOLS = ("tmux", "asciinema", "curl", "procps")
"""What Terminal-Bench's base images add to theirs (for its tmux-driven agents)."""


def _ubuntu_sources(suite: str) -> tuple[tuple[str, str], ...]:
    """Ubuntu's apt source list as its image has it, which Dockerfiles `sed` to a snapshot
    mirror: deb822 `sources.list.d/ubuntu.sources` from 24.04 (noble), one-line
    `sources.list` before. apt itself stays the offline shim; nothing reads these here."""
    archive, security = "http://archive.ubuntu.com/ubuntu/", "http://security.ubuntu.com/ubuntu/"
    components = "main universe restricted multiverse"
    if suite == "noble":
        keyring = "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
        text = (
            f"Types: deb\nURIs: {archive}\nSuites: {suite} {suite}-updates {suite}-backports\n"
            f"Components: {components}\n{keyring}\n"
            f"Types: deb\nURIs: {security}\nSuites: {suite}-security\n"
            f"Components: {components}\n{keyring}"
        )
        moved = "# Ubuntu sources have moved to /etc/apt/sources.list.d/ubuntu.sources\n"
        return (("/etc/apt/sources.list.d/ubuntu.sources", text), ("/etc/apt/sources.list", moved))
    lines = [
        f"deb {url} {suite}{pocket} {components}"
        for url, pockets in ((archive, ("", "-updates", "-backports")), (security, ("-security",)))
        for pocket in pockets
    ]
    return (("/etc/apt/sources.list", "\n".join(lines) + "\n"),)


GCC13_C_SCRIPT = (
    'command -v gcc >/dev/null || exit 0; specs="$(gcc -print-file-name=)specs"; '
    "gcc -dumpspecs | sed '/^[*]cc1:$/{n;s/$/ %{.c:-fpermissive}/;}' > \"$specs\""
)
"""GCC 14 made three of GCC 13's C warnings errors (an implicit function declaration, an int
from a pointer, incompatible pointer types), and C code built on Ubuntu 24.04 has them (lwgrp's
`lwgrp_largest_pow2_log2_lte`). GCC 14's `-fpermissive` turns them back into warnings in C;
this writes GCC's built-in specs, with `-fpermissive` added for `.c` files (not C++, where
it would accept far more), as the `specs` file GCC reads from its own folder. Nothing when
gcc is absent."""
GCC13_C_HOOK = f'chroot "$1" sh -c {shlex.quote(GCC13_C_SCRIPT)}'


def _tbench(image: str, name: str) -> Base | None:
    """Terminal-Bench's `t-bench/python-3-13` (the python:3.13-slim image) and
    `t-bench/ubuntu-24-04` (ubuntu:24.04), both with `TBENCH_TOOLS`."""
    m = re.fullmatch(r"python-3-(\d+)", name)
    if m:
        base = _python(image, f"3.{m.group(1)}", "slim", None)
    elif re.fullmatch(r"ubuntu-\d+-\d+", name):
        inner = base_for("ubuntu:" + name.removeprefix("ubuntu-").replace("-", "."))
        assert inner is not None
        base = dataclasses.replace(inner, image=image)
    else:
        return None
    return dataclasses.replace(base, packages=(*base.packages, *TBENCH_TOOLS))


DEBIAN_GO = {"bullseye": (1, 15), "bookworm": (1, 19), "trixie": (1, 24)}
"""The Go of each Debian release's `golang-go`."""


def _go_release(tag: str, named: str | None) -> str:
    """The release for a golang tag: the one it names, unless the tag's Go is newer than that
    release's; then (Go being backward compatible) the nearest release whose Go is at least
    the tag's (`1.22-bookworm` -> trixie), else the newest."""
    m = re.match(r"(\d+)\.(\d+)", tag)
    if named is None or m is None:
        return named or NEWEST
    wanted = (int(m.group(1)), int(m.group(2)))
    later = list(RELEASES)[list(RELEASES).index(named) :]
    return next((r for r in later if DEBIAN_GO[r] >= wanted), NEWEST)


def _python(image: str, version: str, tag: str, release: str | None) -> Base:
    by_version = {
        "3.7": "bullseye",
        "3.8": "bullseye",
        "3.9": "bullseye",
        "3.10": "bookworm",
        "3.11": "bookworm",
    }
    pythons = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13"}
    exact = next((r for r, v in pythons.items() if v == version), None)
    chosen = exact or release or by_version.get(version, NEWEST)  # the tag's Python first
    debian_py = pythons[chosen]
    note = ""
    if debian_py != version:
        note = f"Python {debian_py} (Debian {chosen}'s) for {version}"
    elif release and release != chosen:
        note = f"Debian {chosen}, whose Python is the tag's, for {release}"
    slim = "slim" in tag
    return Base(
        image=image,
        release=chosen,
        packages=PYTHON + (() if slim else (*BUILD_TOOLS, "python3-dev")),
        # pip installs beside Debian's packages, never over them (the image's own pip is in
        # /usr/local, so `pip install --upgrade pip==X` works there; Debian's would refuse
        # to uninstall itself from the read-only system)
        env=(
            ("PIP_BREAK_SYSTEM_PACKAGES", "1"),
            ("PIP_IGNORE_INSTALLED", "1"),
            ("LANG", "C.UTF-8"),
        ),
        links=(
            ("/usr/local/bin/python", "/usr/bin/python3"),
            ("/usr/local/bin/python3", "/usr/bin/python3"),
        ),
        scripts=(("/usr/local/bin/pip", PIP_SHIM), ("/usr/local/bin/pip3", PIP_SHIM)),
        note=note,
    )


def base_for(name: str) -> Base | None:
    """What stands in for the image `name` (`python:3.12-slim`, `docker.io/library/debian`),
    or None when the table does not know it."""
    base = _base_for(name)
    digest_only = "@sha256:" in name and ":" not in name.split("@", 1)[0].rsplit("/", 1)[-1]
    if base is None or not digest_only:
        return base
    hint = (
        f"--set env.kwargs.image_as.sha256:{name.rsplit(':', 1)[-1][:12]}=IMAGE:TAG names its image"
    )
    why = (
        f"a digest with no tag, read as {base.image} (Debian {base.release}; "
        f"a digest cannot be resolved offline: {hint})"
    )
    return dataclasses.replace(base, note=f"{why}; {base.note}" if base.note else why)


def _base_for(name: str) -> Base | None:
    ref = re.sub(r"@sha256:[0-9a-f]+$", "", name.strip().lower())
    ref = re.sub(MIRRORS, "", ref)  # Docker Hub and its public mirrors
    ref = ref.removeprefix("library/")
    repo, tag = ref.rsplit(":", 1) if ":" in ref.rsplit("/", 1)[-1] else (ref, "latest")
    image = f"{repo}:{tag}"
    named = _release_in(tag)
    if repo == "debian":
        by_number = {v: k for k, v in RELEASES.items()}
        number = re.match(r"(\d+)", tag)
        release = named or (by_number.get(number.group(1)) if number else None)
        if release is None and re.fullmatch(r"(latest|stable)(-slim)?", tag):
            release = NEWEST
        return Base(image, release) if release else None
    if repo == "ubuntu":
        if re.match(r"(20\.04|focal)", tag):
            release = "bullseye"
        elif re.match(r"(22\.04|jammy)", tag):
            release = "bookworm"
        else:
            release = NEWEST
        note = f"Debian {release} is the nearest Debian to {image}"
        suite = {"bullseye": "focal", "bookworm": "jammy"}.get(release, "noble")
        lists = ("/var/lib/apt/lists",)  # empty, as the image leaves it (`find ... -delete`)
        hooks = (GCC13_C_HOOK,) if suite == "noble" else ()  # 22.04's GCC 12 is bookworm's
        return Base(
            image, release, UBUNTU_BASE, dirs=lists, files=_ubuntu_sources(suite), hooks=hooks,
            note=note,
        )  # fmt: skip
    if repo.startswith("ghcr.io/laude-institute/t-bench/"):  # Terminal-Bench's own bases
        return _tbench(image, repo.rsplit("/", 1)[-1])
    if repo == "python":
        m = re.match(r"(3(?:\.\d+)?)", tag)
        if tag in ("latest", "slim") or (m and m.group(1) == "3"):
            return _python(image, "3.13", tag, named)
        if m is None or "alpine" in tag or "windows" in tag:
            return None
        version = ".".join(m.group(1).split(".")[:2])
        return _python(image, version, tag, named)
    if repo == "golang":
        if "alpine" in tag:
            return None
        return Base(
            image,
            _go_release(tag, named),
            packages=("golang-go", "gcc", "libc6-dev", "make", "pkg-config", "git"),
            env=(
                ("GOPATH", "/go"),
                ("GOTOOLCHAIN", "local"),
                (
                    "PATH",
                    "/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                ),
            ),  # fmt: skip # the image's own PATH, whole
            workdir="/go",
            links=(("/usr/local/go", "/usr/lib/go"),),
            dirs=("/go/bin", "/go/src"),
            note="Go is Debian's (1.24 in trixie)",
        )
    if repo == "node":
        if "alpine" in tag:
            return None
        release = named or ("bookworm" if re.match(r"18(\D|$)", tag) else NEWEST)
        extra = () if "slim" in tag else BUILD_TOOLS
        return Base(
            image, release, packages=("nodejs", "npm", "git", *extra), note="Node is Debian's"
        )
    if repo == "rust":
        if "alpine" in tag:
            return None
        return Base(
            image,
            named or NEWEST,
            packages=("rustc", "cargo", "gcc", "libc6-dev", "git"),
            env=(
                ("CARGO_HOME", "/usr/local/cargo"),
                (
                    "PATH",
                    "/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                ),
            ),  # fmt: skip # the image's own PATH, whole
            dirs=("/usr/local/cargo/bin",),
            note="Rust is Debian's (1.85 in trixie)",
        )
    if repo == "ghcr.io/astral-sh/uv":
        m = re.search(r"python(3\.\d+)", tag)
        if m is None or "alpine" in tag:
            return None
        py = _python(image, m.group(1), tag, named)
        return Base(
            image,
            py.release,
            packages=py.packages,
            env=py.env,
            links=py.links,
            scripts=(*py.scripts, ("/usr/local/bin/uv", UV_SHIM), ("/usr/local/bin/uvx", UVX_SHIM)),
            note=py.note,
        )
    if repo == "buildpack-deps":
        release = named or NEWEST
        return Base(image, release, packages=BUILD_TOOLS)
    return None


def from_words(args: str) -> tuple[str, str | None]:
    """(image, stage name) of a FROM's arguments (`--platform=... img AS name`)."""
    words = [w for w in args.split() if not w.startswith("--")]
    image = words[0] if words else ""
    name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
    return image, name


def final_base(froms: list[str]) -> tuple[str, list[str]]:
    """The image the last stage starts from (a stage named earlier resolves to its own image)
    and the images of every stage, given each FROM's arguments (variables expanded)."""
    stages: dict[str, str] = {}
    images: list[str] = []
    image = ""
    for args in froms:
        image, name = from_words(args)
        image = stages.get(image.lower(), image)
        images.append(image)
        if name:
            stages[name.lower()] = image
    return image, images


# Packages an Ubuntu `apt-get install` with Recommends brings (through the Recommends of
# Ubuntu's packages) that Debian's does not: sha256's `apt-get install -y gcc` on ubuntu:24.04
# brings `file`, which one of its tests runs.
UBUNTU_RECOMMENDS = ("file",)


def spec_of(base: Base, extra: tuple[str, ...] = (), recommends: bool = False) -> RootfsSpec:
    """The root file system of `base` with `extra` packages (apt-get install lines), their
    Recommends too when `recommends` (an install line without --no-install-recommends). On an
    Ubuntu image those Recommends also bring `UBUNTU_RECOMMENDS`, which Debian's do not."""
    spec = base.spec()
    if recommends and extra and base.image.startswith("ubuntu:"):
        extra = (*extra, *UBUNTU_RECOMMENDS)
    packages = tuple(sorted({*spec.packages, *extra}))
    return RootfsSpec(
        spec.release, packages, recommends=recommends and bool(extra), hooks=spec.hooks
    )
