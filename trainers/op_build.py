"""DeepSpeed's op builds never wedge a run (issue 37, item 11).

The first `learner.strategy=deepspeed` run compiles an op (minutes on a busy CPU) through
`torch.utils.cpp_extension`, under `<TORCH_EXTENSIONS_DIR>/<op>/lock`: a file created with
O_EXCL, held open by the builder and removed when it is done. torch has no owner check: a
builder killed there (Ctrl-C, a timeout, kill -9) leaves the lock, and every later build
waits on it forever, silently.

`guard_op_builds` (called by a learner worker before DeepSpeed loads its op) removes the locks
whose builder is gone, found as no live process holding the file open, and makes a wait on a
live build say where and for how long; a wait whose builder dies meanwhile clears the lock
and stops with one sentence instead of hanging.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LOCK = "lock"
"""torch's lock file name inside an extension's build folder."""


def lock_holders(lock: Path) -> set[int] | None:
    """The pids that hold `lock` open, from /proc; None where /proc cannot tell (not Linux)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    try:
        target = os.stat(lock)
    except FileNotFoundError:
        return set()
    holders = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
                holders.add(int(entry.name))
                break
    return holders


def remove_if_stale(lock: Path) -> bool:
    """Remove `lock` when no live process holds it; True if it was removed."""
    try:
        seen = os.stat(lock)
    except FileNotFoundError:
        return False
    if lock_holders(lock) != set():
        return False
    try:  # the same file still: not a lock another worker has taken since
        if os.stat(lock).st_ino != seen.st_ino:
            return False
        lock.unlink()
    except FileNotFoundError:
        return False
    return True


def clear_stale_locks(root: Path) -> list[Path]:
    """Remove every build lock under `root` (two levels: `<op>/lock`, `<py_cpu>/<op>/lock`)
    whose builder is gone; the ones removed."""
    found = [*root.glob(f"*/{LOCK}"), *root.glob(f"*/*/{LOCK}")]
    return [lock for lock in found if remove_if_stale(lock)]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def guard_op_builds(
    root: str | os.PathLike[str] | None = None, report_every_s: float = 30.0
) -> None:
    """Clear stale build locks under `root` (TORCH_EXTENSIONS_DIR, or torch's default) and
    make torch's waits on a build report themselves and notice a dead builder."""
    from torch.utils import cpp_extension
    from torch.utils.file_baton import FileBaton

    if root is None:
        root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    for lock in clear_stale_locks(Path(root)):
        _say(f"removed the lock of an op build whose process is gone: {lock}")

    class ReportingBaton(FileBaton):  # type: ignore[misc]
        def wait(self) -> None:
            lock, start, said = Path(self.lock_file_path), time.monotonic(), 0.0
            while lock.exists():
                time.sleep(self.wait_seconds)
                waited = time.monotonic() - start
                if waited - said < report_every_s:
                    continue
                said = waited
                if remove_if_stale(lock):
                    raise RuntimeError(
                        f"the op build in {lock.parent} stopped before finishing (its process "
                        "is gone); its lock is cleared, start the run again"
                    )
                _say(
                    f"waiting for the op build in {lock.parent} "
                    f"({waited:.0f} s so far; another process holds {lock})"
                )

    # torch's _jit_compile looks the name up in its module at each build
    setattr(cpp_extension, "FileBaton", ReportingBaton)  # noqa: B010
