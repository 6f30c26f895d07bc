"""A sandbox's quotas, where we are root: its memory cgroup (v2, or v1's memory controller)
and its size-capped tmpfs work dir, and the sweep that frees both once the process that made
them died without `Sandbox.close()` (kill -9). Each says None or False where this machine
does not allow it; `environments.sandbox` then falls back as its docstring says."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("environments.sandbox")  # one logger for the sandbox and its parts

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MNT_DETACH = 2, 4, 32, 2


def _own_cgroup() -> tuple[Path, str] | None:
    """(folder our process's memory cgroup is in, `v1` or `v2`), or None when there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    if (_CGROUP_ROOT / "cgroup.controllers").is_file():  # the unified hierarchy alone
        path = next((p for n, c, p in entries if n == "0" and c == ""), None)
        return (_CGROUP_ROOT / path.lstrip("/"), "v2") if path is not None else None
    v1 = next((p for _, c, p in entries if "memory" in c.split(",")), None)
    if v1 is not None and (_CGROUP_ROOT / "memory" / "memory.limit_in_bytes").is_file():
        return _CGROUP_ROOT / "memory" / v1.lstrip("/"), "v1"
    return None


def make_memory_cgroup(name: str, limit_bytes: int) -> Path | None:
    """A child memory cgroup of ours capped at `limit_bytes` (swap included), or None where
    cgroups are absent, read-only, or have no memory controller for us."""
    own = _own_cgroup()
    if own is None:
        return None
    parent, version = own
    folder = parent / name
    try:
        folder.mkdir()
    except OSError:
        return None
    try:
        if version == "v2":
            (folder / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (folder / "memory.swap.max").write_text("0")
        else:
            (folder / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):  # only with swap accounting on
                (folder / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        os.chmod(folder / "cgroup.procs", 0o600)
    except OSError as e:
        log.info("skyrl sandbox: no memory cgroup (%s)", e)
        remove_cgroup(folder)
        return None
    return folder


PREFIX = "skyrl-sandbox-"
"""Work dirs and cgroups are named `skyrl-sandbox-<pid of the owner>-...`."""


def _dead_owner(name: str) -> bool:
    """True for `skyrl-sandbox-<pid>-...` when no process <pid> lives (here)."""
    pid = name.removeprefix(PREFIX).split("-", 1)[0]
    return name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}")


@functools.cache
def sweep_leftovers() -> None:
    """Once per process: unmount the tmpfs work dirs, and remove the empty cgroups, of
    sandboxes whose process died without close() (kill -9): their RAM stays taken else."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split(" - ", 1)
            mount_point = fields[0].split()[4]
            ours = len(fields) == 2 and fields[1].split()[:2] == ["tmpfs", "skyrl-sandbox"]
            if ours and _dead_owner(os.path.basename(mount_point)):
                unmount(Path(mount_point))
                shutil.rmtree(mount_point, ignore_errors=True)
    own = _own_cgroup()
    if own is not None:
        with contextlib.suppress(OSError):
            for folder in own[0].iterdir():
                if folder.is_dir() and _dead_owner(folder.name):
                    with contextlib.suppress(OSError):
                        folder.rmdir()


def remove_cgroup(folder: Path) -> None:
    for _ in range(200):  # the killed processes leave it within milliseconds
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.005)
    log.warning("skyrl sandbox: could not remove the cgroup %s", folder)


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: Path, size_mb: int, uid: int) -> bool:
    """Mount a tmpfs of `size_mb` on `path` (owned by `uid`, mode 0700); False if we cannot."""
    opts = f"size={size_mb}m,mode=0700,uid={uid},gid={uid}".encode()
    flags = _MS_NOSUID | _MS_NODEV
    if _libc().mount(b"skyrl-sandbox", bytes(path), b"tmpfs", flags, opts) == 0:
        return True
    log.info("skyrl sandbox: no tmpfs work dir (%s)", _errno_text())
    return False


def _errno_text() -> str:
    import ctypes

    return os.strerror(ctypes.get_errno())


def unmount(path: Path) -> None:
    if _libc().umount2(bytes(path), _MNT_DETACH) != 0:
        log.warning("skyrl sandbox: could not unmount %s: %s", path, _errno_text())


def grow_tmpfs(path: Path, size_mb: int) -> None:
    """Remount the tmpfs at `path` with a cap of `size_mb`; a warning where it cannot."""
    flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV
    if (
        _libc().mount(b"skyrl-sandbox", bytes(path), b"tmpfs", flags, f"size={size_mb}m".encode())
        != 0
    ):
        log.warning("skyrl sandbox: could not grow %s: %s", path, _errno_text())
