"""A FAKE root file system for tests of Harbor tasks over a base image: a small tree made from
a few of the host's programs and their libraries (plus a marker file no host has), put where
`environments.rootfs.ensure_rootfs` looks for a spec, so it is found there and mmdebstrap is
never run (no test reaches the Debian mirror)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments import harbor
from environments.base_images import base_for
from environments.rootfs import ROOTFS_DIR_ENV, rootfs_dir

MARKER = "/etc/skyrl-fake-root"
PROGRAMS = ("env", "bash", "sh", "cat", "echo", "ls", "mkdir", "test", "stty", "rm", "cp",
            "chmod", "sleep", "id", "grep", "kill", "dirname", "touch", "true", "wc")  # fmt: skip # a list
USERS = ("useradd", "chown", "stat", "setpriv", "readlink", "head")
"""What tasks that need root inside use: add a user, give files away, run as `nobody`."""
ETC_USERS = {
    "passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "shadow": "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n",
    "gshadow": "root:*::\nnogroup:*::\n",
}  # fmt: skip # one file a line
SEARCH = "/usr/bin:/bin:/usr/sbin:/sbin"


def _files_of(path: str) -> set[str]:
    files = {os.path.realpath(path)}
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/"):
                files.add(word)
                files.add(os.path.realpath(word))
    return files


def build(target: Path, programs: tuple[str, ...] = PROGRAMS) -> None:
    """Make the tree at `target`: `programs` of the host (under their usual names, in merged
    /usr's bin or sbin) with their libraries, an empty /usr/local, users root and nobody, the
    host's /etc/login.defs, and MARKER; modes as a package would leave them."""
    files: set[str] = set()
    for name in programs:
        path = shutil.which(name, path=SEARCH)
        assert path, name
        files |= _files_of(path)
    for name in ("bin", "lib", "lib64", "sbin"):  # merged /usr, as Debian's
        os.symlink(f"usr/{name}", target / name)
    for path in sorted(files):
        rel = path.lstrip("/")
        for top in ("bin/", "lib/", "lib64/", "sbin/"):
            if rel.startswith(top):
                rel = "usr/" + rel
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    for name in programs:  # under the names the scripts use
        found = shutil.which(name, path=SEARCH)
        assert found is not None
        real = Path(os.path.realpath(found))
        folder = target / "usr" / ("sbin" if real.parent.name == "sbin" else "bin")
        if not (folder / name).exists():
            os.symlink(real.name, folder / name)
    for name in ("bin", "lib", "share"):  # an empty /usr/local, as Debian's
        (target / "usr" / "local" / name).mkdir(parents=True)
    (target / "etc").mkdir()
    for name, text in ETC_USERS.items():
        (target / "etc" / name).write_text(text)
    if os.path.isfile("/etc/login.defs"):
        shutil.copyfile("/etc/login.defs", target / "etc" / "login.defs")
    (target / MARKER.lstrip("/")).write_text("fake bookworm\n")
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    for name in ("shadow", "gshadow"):
        (target / "etc" / name).chmod(0o640)


@contextlib.contextmanager
def installed(
    monkeypatch: pytest.MonkeyPatch, programs: tuple[str, ...] = PROGRAMS
) -> Iterator[Path]:
    """Image and rootfs caches in a temp dir (sandbox uids must reach them) and a fake root
    file system (`build`) where the table's spec for `debian:bookworm` is looked up; the host
    fallback the rest of the suite asks for is off. Yields the root file system's path."""
    top = Path(tempfile.mkdtemp(prefix="skyrl-harbor-base-"))
    top.chmod(0o755)
    monkeypatch.setenv("SKYRL_HARBOR_CACHE", str(top / "cache"))
    monkeypatch.setenv(ROOTFS_DIR_ENV, str(top / "rootfs"))
    monkeypatch.delenv(harbor.BASE_ENV, raising=False)
    base = base_for("debian:bookworm")
    assert base is not None
    target = rootfs_dir(base.spec())
    target.mkdir(parents=True)
    build(target, programs)
    harbor._built.cache_clear()
    try:
        yield target
    finally:
        harbor._built.cache_clear()
        shutil.rmtree(top, ignore_errors=True)
