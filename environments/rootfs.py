"""Root file systems of Debian releases, built from Debian's packages without a container
runtime, for sandboxes that need what the host lacks (another Python, an image's tools).

    from environments.rootfs import RootfsSpec, ensure_rootfs, python_release
    root = ensure_rootfs(RootfsSpec("bullseye", ("python3", "python3-venv")), network=True)
    sandbox.system_root = root          # its /usr, /etc, /bin, /lib ... instead of the host's

`ensure_rootfs` runs `mmdebstrap --variant=minbase --include=PACKAGES RELEASE DIR MIRROR`
once per (release, packages, mirror) and keeps the tree under
`tasks.cache.cache_dir()/rootfs/<release>-<hash>`; later calls reuse it offline. Building
needs `mmdebstrap` (Debian package `mmdebstrap`), root (or working user namespaces) and the
Debian mirror, so it happens only when the caller allows the network. Every failure is a
`RootfsError` of one sentence.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
PYTHON_RELEASES = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
"""Which Debian release's `python3` is which Python version."""
BUILD_TIMEOUT_S = 1800.0


class RootfsError(RuntimeError):
    """A root file system could not be built (one sentence)."""


@dataclass(frozen=True)
class RootfsSpec:
    """A Debian release plus packages: one cached root file system."""

    release: str
    packages: tuple[str, ...] = ()
    mirror: str = MIRROR
    recommends: bool = False
    """Install the packages' Recommends too, as a Dockerfile's `apt-get install` without
    `--no-install-recommends` does (`gcc` brings `libc6-dev`, so `stdio.h` is there)."""
    hooks: tuple[str, ...] = ()
    """mmdebstrap `--customize-hook` commands, run on the finished tree (`$1`)."""

    def key(self) -> str:
        parts: list = [self.release, sorted(self.packages), self.mirror]
        parts += ["recommends"] if self.recommends else []
        text = json.dumps(parts + ([list(self.hooks)] if self.hooks else []))
        return f"{self.release}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def python_release(version: str) -> str | None:
    """The Debian release whose `python3` is `version` ("3.9" -> bullseye), or None."""
    return PYTHON_RELEASES.get(version)


ROOTFS_DIR_ENV = "SKYRL_ROOTFS_DIR"
"""Where root file systems are kept; default: the cache's `rootfs/`, or, when sandbox uids
cannot reach that (a 0700 home), `/var/cache/skyrl/rootfs` for root."""


def _reachable(path: Path) -> bool:
    """Whether every folder above `path` lets others through (bwrap binds it as a sandbox
    uid, which must reach it)."""
    return all(os.stat(p).st_mode & 0o001 for p in path.parents if p.exists())


def rootfs_home() -> Path:
    """The folder of built root file systems. RootfsError when sandboxes cannot reach it."""
    from tasks.cache import cache_dir

    own = os.environ.get(ROOTFS_DIR_ENV)
    home = Path(own) if own else cache_dir() / "rootfs"
    if not own and not _reachable(home) and os.geteuid() == 0:
        home = Path("/var/cache/skyrl/rootfs")
    if os.geteuid() == 0 and not _reachable(home):
        blocked = next(p for p in home.parents if p.exists() and not os.stat(p).st_mode & 1)
        raise RootfsError(
            f"sandboxes cannot reach the root file systems under {home}: {blocked} does not let "
            f"others through (chmod o+x it, or set {ROOTFS_DIR_ENV} to a folder they can reach)"
        )
    return home


def rootfs_dir(spec: RootfsSpec) -> Path:
    return rootfs_home() / spec.key()


def ensure_rootfs(spec: RootfsSpec, *, network: bool, log: list[str] | None = None) -> Path:
    """The built root file system of `spec` (built now, under a file lock, if missing and
    `network` allows it). RootfsError (one sentence) otherwise."""
    target = rootfs_dir(spec)
    if (target / "usr").is_dir():
        return target
    if not network:
        raise RootfsError(
            f"a Debian {spec.release} root file system is not built yet and building it needs "
            "the Debian mirror (the network is off for builds)"
        )
    exe = shutil.which("mmdebstrap")
    if exe is None:
        raise RootfsError(
            f"building a Debian {spec.release} root file system needs mmdebstrap "
            "(apt-get install mmdebstrap)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "usr").is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        argv = [exe, "--variant=minbase", "--quiet"]
        argv += ['--aptopt=APT::Install-Recommends "true"'] if spec.recommends else []
        argv += [f"--include={','.join(spec.packages)}"] if spec.packages else []
        argv += [f"--customize-hook={hook}" for hook in spec.hooks]
        argv += [spec.release, str(tmp), spec.mirror]
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip # arguments grouped by meaning
        except (OSError, subprocess.TimeoutExpired) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RootfsError(f"mmdebstrap of Debian {spec.release} failed: {e}") from None
        if log is not None:
            log.append(f"$ {' '.join(argv)}  (exit {proc.returncode})\n{proc.stderr[-3000:]}")
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            last = ([x for x in proc.stderr.splitlines() if x.strip()] or ["no output"])[-1]
            raise RootfsError(
                f"mmdebstrap of Debian {spec.release} failed (exit {proc.returncode}): "
                f"{last.strip()[:200]}"
            )
        os.chmod(tmp, 0o755)
        tmp.rename(target)
    return target
