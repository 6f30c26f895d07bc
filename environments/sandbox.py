"""A sandbox for code an agent writes: one private work dir, rlimits, no network, kill-all.

With bubblewrap (`/usr/bin/bwrap`) every command runs in fresh namespaces (no network, so
no abstract unix sockets of the host either; own PID namespace, no nested user namespaces),
sees only the host's system dirs (`SYSTEM_DIRS`: /usr, /etc, /opt...) read-only, gets
private, empty, size-capped tmpfs dirs at `/tmp`, `/dev/shm`, `/root`, `/home`, `/run`,
`/var/tmp`, and one writable dir, the work dir, at `/work` (or, for a Harbor task, the
parts of its image at their own paths instead: `view`, `mount_workdir`, set by
`environments.harbor.Layout`). The host's unix sockets (in
/run, /var, homes...) are not in that view, so none can be connected to. Without bubblewrap
a plainly announced fallback runs commands in the work dir with the same rlimits and
process-group kills, but sees (and may write) whatever the uid may.

Quotas (`Limits.memory_mb`, `Limits.disk_mb`): every process of a sandbox joins one memory
cgroup (v2, or v1's memory controller) capped at `memory_mb`, tmpfs pages it writes
included, where we may make one; otherwise, as root, RLIMIT_NPROC x RLIMIT_AS <= memory_mb.
The work dir the sandbox makes itself is a tmpfs of `disk_mb` when we are root.

The command line of every process is
`[sh -c 'join the cgroup'] prlimit ... -- [setpriv ...] [bwrap ...] env -i ...`:

- `prlimit` sets the `Limits` (CPU seconds, address space, processes, file size).
- `setpriv` (only when we are root) drops to a uid of our own from `UID_RANGE`, one per
  live sandbox (a lock file per uid), so RLIMIT_NPROC binds and counts this sandbox alone,
  and `kill_all` can signal every process of that uid at once (`kill(-1)`, which the kernel
  applies atomically with respect to `fork`, so a fork bomb cannot outrun it).
- `bwrap ... --as-pid-1` makes the command pid 1 of its PID namespace, reaped by the outer
  bwrap, which we reap (bwrap's own init would be orphaned to the host's pid 1).
- `env -i` gives the command a clean environment (`PATH`, `HOME`, `LANG`, `TMPDIR`).

Root inside (`own_users`) adds one PID namespace per sandbox, held by a bwrap whose init
(pid 1 there, which reaps what it adopts) runs `sleep`, in the sandbox's user namespace:
every command makes its own PID namespace inside it (`bwrap --pidns --unshare-pid`, bwrap's
init as its pid 1, adopted by the holder's), so no command sees another's processes; one
with `share_pids` (a Harbor verifier) runs in that namespace itself and sees them all, as a
`docker exec` sees a container's, while none of them sees it. Every bwrap's outer process
stays in the host's PID namespace, unseen from inside (it holds the host's mounts).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import random
import selectors
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from environments import userns
from environments.sandbox_procs import (
    SandboxState,
    all_pids,
    inner_roots,
    kill_tree,
    outputs_of,
    pids_of_uid,
    processes,
    writing_to,
)
from environments.sandbox_quota import (
    PREFIX,
    grow_tmpfs,
    make_memory_cgroup,
    mount_tmpfs,
    sweep_leftovers,
)

if TYPE_CHECKING:
    import pexpect

__all__ = ["BWRAP", "UID_RANGE", "Limits", "Result", "Sandbox", "bwrap_available"]

log = logging.getLogger(__name__)

BWRAP = "/usr/bin/bwrap"
UID_RANGE = range(60000, 64000)
"""Unprivileged uids handed out to sandboxes (one per live sandbox) when we run as root."""
BACKEND_ENV = "SKYRL_SANDBOX_BACKEND"
"""Set to `fallback` to force the weaker backend (tests), or `bwrap` to require bubblewrap."""
INNER_WORKDIR = "/work"
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
)
"""The host dirs a bwrap sandbox sees (read-only; those that exist). Nothing else of the
host is there: not its homes, `/var`, `/srv`, `/mnt`, nor the unix sockets that live there
(a sandbox uid may connect to any world-writable one it can reach)."""
HIDDEN_DIRS = ("/tmp", "/dev/shm", "/root", "/home", "/run", "/var/tmp", "/var/run", "/var/lock")
"""Empty, size-capped tmpfs dirs under bwrap (a host symlink, /var/run -> /run, stays one)."""
STICKY_DIRS = ("/tmp", "/dev/shm", "/var/tmp", "/var/lock")
"""Of those, the ones every user may write (mode 1777, as on any Linux system): a verifier
that runs its tests as another user (`runuser -u ubuntu`) makes its folders there."""
MIN_PROCESS_MB = 128
"""Without a memory cgroup, RLIMIT_NPROC is cut so each process still gets this much."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_WRAPPER_ENV = {"PATH": PATH, "LANG": "C.UTF-8"}
"""The environment of the wrapper chain itself (the host's may be huge or secret)."""
_LOCK_DIR = Path(tempfile.gettempdir()) / "skyrl-sandbox-uids"
_warned = False


@dataclass(frozen=True)
class Limits:
    """Resource limits of every process a sandbox starts."""

    cpu_seconds: int = 30
    """RLIMIT_CPU per process."""
    memory_mb: int = 1024
    """Memory of the whole sandbox: a memory cgroup of this size (what it keeps in its tmpfs
    dirs included) where one can be made, and RLIMIT_AS per process (unless
    `Sandbox.address_space` is off and the cgroup was made). Without a cgroup, when
    we are root, RLIMIT_AS is memory_mb / RLIMIT_NPROC so the sum still fits (see
    `Sandbox.memory_cgroup`)."""
    processes: int = 256
    """RLIMIT_NPROC: processes of the sandbox's uid (binds when we are root and drop to one)."""
    file_size_mb: int = 64
    """RLIMIT_FSIZE: the largest file a process may write."""
    disk_mb: int = 512
    """Size cap of each writable place: `/tmp`, `/dev/shm`, `/root`, `/home` (tmpfs under
    bwrap) and the work dir the sandbox makes itself (a tmpfs when we are root; a given work
    dir is not capped). A full one fails writes with ENOSPC ("No space left on device")."""
    output_bytes: int = 16_384
    """Cap on one observation's captured output; the rest is discarded and marked truncated."""
    timeout_s: float = 10.0
    """Wall clock per command / action; past it the command's processes are killed."""


@dataclass(frozen=True)
class Result:
    """What one `Sandbox.run` produced."""

    returncode: int | None
    """Exit status (killed by signal N: 128 + N under bwrap, -N in the fallback); None when
    we killed it (timeout, output cap)."""
    stdout: str
    """Captured stdout (UTF-8, invalid bytes replaced), at most `Limits.output_bytes`."""
    stderr: str
    """Captured stderr, sharing the same cap."""
    timed_out: bool
    """The wall-clock timeout killed the command."""
    truncated: bool
    """The output went past the cap: the command was killed and the rest discarded."""


def bwrap_available() -> bool:
    """True when bubblewrap is installed and works here (probed once per process and path).

    An installed bwrap can still fail, e.g. where unprivileged user namespaces are off
    (Ubuntu 24.04's AppArmor default); then the fallback is used, with the reason logged."""
    return os.access(BWRAP, os.X_OK) and _bwrap_works(BWRAP)


@functools.cache
def _bwrap_works(bwrap: str) -> bool:
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    cmd = [*(drop if os.geteuid() == 0 else []), bwrap, "--ro-bind", "/", "/", "--proc", "/proc"]
    cmd += ["--dev", "/dev", "--unshare-all", "--unshare-user", "--disable-userns"]
    cmd += ["--die-with-parent", "--as-pid-1", "true"]
    try:
        probe = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=_WRAPPER_ENV)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("skyrl sandbox: %s does not work here (%s)", bwrap, e)
        return False
    if probe.returncode != 0:
        log.warning("skyrl sandbox: %s does not work here: %s", bwrap, probe.stderr.strip())
    return probe.returncode == 0


@functools.cache
def _bwrap_help(bwrap: str) -> str:
    """bwrap's `--help` (which options it has), "" when it cannot run. `--perms` (0.5+) sets
    a tmpfs's mode; without it a tmpfs is 0755."""
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return text.stdout + text.stderr


@functools.cache
def _bwrap_has_size(bwrap: str) -> bool:
    """bwrap >= 0.7 caps a tmpfs (`--size`); older ones (Ubuntu 22.04's 0.6) leave the tmpfs
    dirs uncapped (the memory cgroup, where there is one, still bounds them)."""
    if "--size" not in _bwrap_help(bwrap):
        log.warning("skyrl sandbox: %s has no --size; /tmp and /dev/shm are not capped", bwrap)
        return False
    return True


@functools.cache
def _system_binds(root: str = "/") -> tuple[str, ...]:
    """bwrap arguments that show SYSTEM_DIRS of `root` (the host's `/`, or a root file
    system such as `environments.rootfs` builds) read-only at their usual places; a
    symlink, /bin -> usr/bin, stays one."""
    args: list[str] = []
    for folder in SYSTEM_DIRS:
        src = os.path.join(root, folder.lstrip("/"))
        if os.path.islink(src):
            args += ["--symlink", os.readlink(src), folder]
        elif os.path.isdir(src):
            args += ["--ro-bind", src, folder]
    return tuple(args)


HOST_TRUST = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl/certs/ca-certificates.crt")
"""The host files a networked sandbox over another root sees (name service and the CA
bundle the machine trusts), so a package index is reached as the host reaches it."""


def _warn_fallback(reason: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        message = (
            f"skyrl sandbox: {reason}; using the WEAKER fallback sandbox (temp dir, rlimits, "
            "process-group kill). Sandboxed code can read the host's files and use the network. "
            "Install bubblewrap (Debian package `bubblewrap`) for real isolation."
        )
        log.warning(message)


def _searchable(path: Path, uid: int) -> bool:
    st = path.stat()
    return st.st_uid == uid or bool(st.st_mode & 0o001)


def _claim_uid() -> tuple[int, int]:
    """(uid, lock fd): a uid from UID_RANGE no other live sandbox holds and no process uses."""
    _LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    busy = set()
    for p in all_pids():
        with contextlib.suppress(OSError):  # a process may exit between listdir and stat
            busy.add(os.stat(f"/proc/{p}").st_uid)
    start = random.randrange(len(UID_RANGE))
    for i in range(len(UID_RANGE)):
        uid = UID_RANGE[(start + i) % len(UID_RANGE)]
        if uid in busy:
            continue
        fd = os.open(_LOCK_DIR / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise RuntimeError(f"no free sandbox uid in {UID_RANGE.start}..{UID_RANGE.stop - 1}")


class Sandbox:
    """One private writable work dir; every process started through it dies at close()."""

    backend: Literal["bwrap", "fallback"]
    """`bwrap` (namespaces, read-only system) or `fallback` (rlimits and a temp dir only)."""
    workdir: Path
    """Host path of the private writable dir."""
    inner_workdir: str
    """The same dir as seen by sandboxed code (`/work` under bwrap)."""
    uid: int | None
    """The unprivileged uid sandboxed code runs as (None when we are not root)."""
    memory_cgroup: Path | None
    """The memory cgroup every process of the sandbox runs in, capped at `Limits.memory_mb`;
    None where none could be made (no cgroup fs, read-only, not root): then the cap is
    RLIMIT_NPROC x RLIMIT_AS when we are root, and per process only otherwise."""
    disk_capped: bool
    """True when the work dir is a tmpfs of `Limits.disk_mb` (we made it, as root)."""

    def __init__(
        self,
        limits: Limits = Limits(),
        workdir: Path | None = None,
        *,
        backend: Literal["auto", "bwrap", "fallback"] | None = None,
    ) -> None:
        """`workdir` (kept at close) or a fresh temp dir (removed at close). `backend`
        defaults to `$SKYRL_SANDBOX_BACKEND`, else `auto` (bwrap when installed)."""
        self.limits = limits
        choice = backend or os.environ.get(BACKEND_ENV, "auto") or "auto"
        if choice not in ("auto", "bwrap", "fallback"):
            raise ValueError(f"unknown sandbox backend {choice!r}; known: auto, bwrap, fallback")
        self.backend = "bwrap" if choice != "fallback" and bwrap_available() else "fallback"
        if choice == "bwrap" and self.backend != "bwrap":
            raise RuntimeError(f"the bwrap sandbox was asked for but {BWRAP} is missing or broken")
        if self.backend == "fallback":
            _warn_fallback(
                f"{BWRAP} is not installed or does not work here"
                if choice == "auto"
                else f"{BACKEND_ENV}/backend asks for it"
            )
        uid, lock_fd = _claim_uid() if os.geteuid() == 0 else (None, None)
        self.uid = uid
        remove = workdir is None
        if remove and uid is not None:
            sweep_leftovers()
        prefix = f"{PREFIX}{os.getpid()}-"
        path = Path(tempfile.mkdtemp(prefix=prefix)) if workdir is None else workdir
        path = path.resolve()
        path.mkdir(parents=True, exist_ok=True)
        blocked = next(
            (p for p in reversed(path.parents) if uid is not None and not _searchable(p, uid)), None
        )
        if blocked is not None:
            if lock_fd is not None:
                os.close(lock_fd)
            raise ValueError(
                f"the sandbox uid cannot reach the work dir {path}: {blocked} is not searchable "
                "by others (mode o+x); put the work dir under one that is, e.g. "
                "tempfile.mkdtemp()"
            )
        if uid is not None:
            for root, dirs, files in os.walk(path):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.lchown(name, uid, uid)
        self.disk_capped = remove and uid is not None and mount_tmpfs(path, limits.disk_mb, uid)
        path.chmod(0o700)
        self.workdir = path
        self.inner_workdir = INNER_WORKDIR if self.backend == "bwrap" else str(path)
        name = f"{PREFIX}{os.getpid()}-{uid if uid is not None else path.name}"
        self.memory_cgroup = make_memory_cgroup(name, limits.memory_mb * 1024 * 1024)
        self.view: list[str] = []
        """Extra bwrap arguments of every command (`environments.harbor`'s image layout)."""
        self.mount_workdir = True
        """Bind the work dir at `/work` (a Harbor layout binds its parts elsewhere instead)."""
        self.env: dict[str, str] = {}
        """Added to every command's clean environment (before a call's own `env`)."""
        self.entrypoint: list[str] = []
        """Put before every command line (a Docker ENTRYPOINT, run in each bwrap)."""
        self.system_root: Path | None = None
        """Under bwrap: the root file system whose system dirs (`/usr`, `/etc`, ...) the
        commands see instead of the host's (a Debian release built by
        `environments.rootfs`, for a Python the host lacks)."""
        self.join_net: int | None = None
        """Under bwrap, as root: a live process of this sandbox (pid) whose network namespace
        commands join instead of a new one (`nsenter --net`): a Harbor verifier reaches the
        services the agent's shell left listening on its loopback, as in Harbor's one
        container. Ignored when we are not root (we may not enter it)."""
        self.network = False
        """Under bwrap: share the host's network (an env build reaching a package index).
        Off, a sandbox has no network but its own loopback."""
        self.address_space = True
        """Cap each process's address space (RLIMIT_AS) even where the memory cgroup bounds
        the sandbox (a MemoryError instead of an OOM kill). False: the cgroup alone, where
        there is one; V8 (node, npm), Go and the JVM reserve gigabytes of address space they
        never use, and fail under RLIMIT_AS (a Harbor image's `RUN npm install`)."""
        self.share_pids = False
        """In the sandbox's own user namespace (`own_users`): run in the sandbox's PID
        namespace itself, which sees (and may signal) every process its other commands
        started, each of them in a PID namespace of its own inside it that cannot see this
        one: a Harbor verifier finds the agent's processes as in Harbor's one container.
        Ignored elsewhere (each command has a PID namespace of its own)."""
        self._state = SandboxState(uid, lock_fd, path, remove, self.backend == "bwrap")
        self._state.cgroup, self._state.mounted = self.memory_cgroup, self.disk_capped
        self._finalizer = weakref.finalize(self, SandboxState.close, self._state)

    # ------------------------------------------------------------------------ command lines

    def _nproc_and_as_mb(self) -> tuple[int, int]:
        """RLIMIT_NPROC and RLIMIT_AS (MB) of each process."""
        lim = self.limits
        if self.uid is None:
            # not root: RLIMIT_NPROC counts every process of our own uid, not just the sandbox's
            return len(pids_of_uid(os.getuid())) + lim.processes, lim.memory_mb
        if self.memory_cgroup is not None:
            return lim.processes, lim.memory_mb
        # no cgroup: RLIMIT_NPROC (our uid alone) x RLIMIT_AS must fit in memory_mb
        nproc = min(lim.processes, max(1, lim.memory_mb // MIN_PROCESS_MB))
        return nproc, lim.memory_mb // nproc

    def argv(
        self,
        argv: list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        view: list[str] | None = None,
    ) -> list[str]:
        """The full wrapped command line, for a caller that spawns it itself.

        `cwd` is relative to (or inside) the inner work dir; `env` is added to the clean
        environment; `view`, extra bwrap arguments of this command alone (a `/tests` bind).
        Spawn it in its own session (`start_new_session=True`).
        """
        if self._state.closed:
            raise RuntimeError("the sandbox is closed")
        if not argv:
            raise ValueError("an empty command line")
        mb = 1024 * 1024
        lim = self.limits
        joined = self.join_net is not None and self.uid is not None and self.backend == "bwrap"
        users = self._state.userns_fd if self.backend == "bwrap" else None
        pidns = self._episode_pids(users) if users is not None else None
        cmd = self._wrappers(users, pidns, self.join_net if joined else None)
        if self.backend == "bwrap":
            root = str(self.system_root) if self.system_root is not None else "/"
            cmd += [BWRAP, *_system_binds(root), "--dev", "/dev", "--proc", "/proc"]
            if self.network and root != "/":
                for f in HOST_TRUST:  # where both exist: a mount point cannot be made in /etc
                    if os.path.exists(f) and os.path.exists(os.path.join(root, f.lstrip("/"))):
                        cmd += ["--ro-bind", f, f]
            size = ["--size", str(lim.disk_mb * mb)] if _bwrap_has_size(BWRAP) else []
            # fresh, size-capped tmpfs for the usual writable places; a home inside a system
            # dir (/opt/x) is hidden too
            for folder in HIDDEN_DIRS:
                if os.path.islink(folder):
                    cmd += ["--symlink", os.readlink(folder), folder]
                else:
                    sticky = folder in STICKY_DIRS and "--perms" in _bwrap_help(BWRAP)
                    cmd += [*size, *(["--perms", "1777"] if sticky else []), "--tmpfs", folder]
            home = os.environ.get("HOME", "")
            if home.startswith("/") and os.path.isdir(home):
                home_dir = Path(home).resolve()
                if any(home_dir.is_relative_to(p) and home_dir != Path(p) for p in SYSTEM_DIRS):
                    cmd += [*size, "--tmpfs", str(home_dir)]
            if self.mount_workdir:
                cmd += ["--bind", str(self.workdir), INNER_WORKDIR]
            cmd += [*self.view, *(view or [])]
            pids: Literal["own", "child", "shared"] = "own"
            if pidns is not None:  # no --as-pid-1 there: bwrap's init reports the exit status
                pids = "shared" if self.share_pids else "child"
            if users is not None:
                cmd += userns.bwrap_args(share_net=self.network or joined, pids=pids)
            else:
                cmd += ["--unshare-all", "--unshare-user", "--disable-userns"]
                cmd += ["--share-net"] if self.network or joined else []
            cmd += ["--die-with-parent", "--new-session", "--chdir", "/"]
            cmd += ["--as-pid-1"] if pids == "own" else []
            cmd += userns.closer() if users is not None else []
        inner = os.path.join(self.inner_workdir, cwd or "")
        clean = {"PATH": PATH, "HOME": self.inner_workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
        if self.backend == "fallback":
            clean["TMPDIR"] = self.inner_workdir
        clean.update(self.env)
        clean.update(env or {})
        cmd += ["env", "-i", "-C", inner, *(f"{k}={v}" for k, v in clean.items())]
        cmd += [*self.entrypoint, *argv]
        return cmd

    def _wrappers(self, users: int | None, pidns: int | None, net: int | None) -> list[str]:
        """The command line before bwrap: join the memory cgroup, the network of `net` (a
        pid), open the namespaces bwrap joins (`users`, `pidns`: fds of ours), the limits,
        the uid dropped."""
        mb = 1024 * 1024
        lim = self.limits
        nproc, as_mb = self._nproc_and_as_mb()
        cmd = []
        if self.memory_cgroup is not None:  # join the cgroup, then become the command
            procs = str(self.memory_cgroup / "cgroup.procs")
            cmd += ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs]
        if net is not None:  # as root, before the uid is dropped: the shell's network
            cmd += ["nsenter", f"--net=/proc/{net}/ns/net", "--"]
        if users is not None:  # as root: open the sandbox's user namespace for bwrap
            cmd += userns.opener(users)
        if pidns is not None:
            cmd += userns.opener(pidns, userns.PIDNS_FD)
        cgroup_only = not self.address_space and self.memory_cgroup is not None
        address_space = "unlimited" if cgroup_only else str(as_mb * mb)
        cmd += ["prlimit", f"--cpu={lim.cpu_seconds}", f"--as={address_space}"]
        cmd += [f"--nproc={nproc}", f"--fsize={lim.file_size_mb * mb}", "--core=0", "--"]
        if self.uid is not None:
            cmd += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]
        return cmd

    def _episode_pids(self, users: int) -> int | None:
        """An fd on the sandbox's PID namespace, made now when none is alive: that of a bwrap
        in the sandbox's user namespace whose pid 1 (bwrap's init, which reaps what it
        adopts) runs `sleep` there, so the namespace is that user namespace's and bwrap may
        mount a /proc of it. None, with a warning, where it cannot be made."""
        state = self._state
        if state.pids is not None and state.pids.poll() is None:
            return state.pids_fd
        state.drop_pids()
        root = str(self.system_root) if self.system_root is not None else "/"
        cmd = [*self._wrappers(users, None, None), BWRAP, *_system_binds(root)]
        cmd += ["--userns", str(userns.FD), "--unshare-pid", "--unshare-net", "--unshare-ipc"]
        cmd += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        cmd += ["--chdir", "/", *userns.closer(), "sleep", "infinity"]
        holder = subprocess.Popen(
            cmd, env=_WRAPPER_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip # arguments grouped by meaning
        ours, deadline = os.readlink("/proc/self/ns/pid"), time.monotonic() + 5
        while holder.poll() is None and time.monotonic() < deadline:
            for pid in [p for p, ppid, _ in processes(self.owns) if ppid == holder.pid]:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/ns/pid") != ours:  # bwrap's pid 1 there
                        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
                        state.pids, state.pids_init, state.pids_fd = holder, pid, fd
                        return fd
            time.sleep(0.005)
        with contextlib.suppress(ProcessLookupError):
            holder.kill()
        holder.wait()
        log.warning("skyrl sandbox: no PID namespace of its own (exit %s)", holder.returncode)
        return None

    def command_roots(self, host_pid: int) -> list[int]:
        """The processes that head the command whose wrapper chain is `host_pid` (a tracked
        process, e.g. `Bash.host_pid`) inside the sandbox: the command itself, pid 1 of its
        PID namespace, or, in the sandbox's PID namespace, the init of the command's."""
        with self._state.lock:
            proc = next((p for p in self._state.procs if p.pid == host_pid), None)
        if proc is None:
            return []
        return inner_roots(proc, self.owns, self.backend == "bwrap", self._state.pids_init)

    def holder_pids(self) -> set[int]:
        """Host pids of the processes that hold the sandbox's PID namespace (not the agent's:
        killing one ends every command of the sandbox)."""
        state = self._state
        if state.pids is None or state.pids_init is None:
            return set()
        held = {state.pids.pid, state.pids_init}
        with contextlib.suppress(OSError):  # the namespace itself, not one inside it
            ns = os.readlink(f"/proc/{state.pids_init}/ns/pid")
            for pid, ppid, _ in processes(self.owns):
                with contextlib.suppress(OSError):
                    if ppid == state.pids_init and os.readlink(f"/proc/{pid}/ns/pid") == ns:
                        held.add(pid)
        return held

    def _track(self, proc: Any) -> None:
        with self._state.lock:
            self._state.procs.append(proc)

    # ------------------------------------------------------------------------ processes

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        """A long-lived tracked process in its own session; `cwd`/`env` mean as in `argv`."""
        cmd = self.argv(
            argv,
            cwd=kwargs.pop("cwd", None),
            env=kwargs.pop("env", None),
            view=kwargs.pop("view", None),
        )
        kwargs["start_new_session"] = True
        proc = subprocess.Popen(cmd, env=_WRAPPER_ENV, **kwargs)
        self._track(proc)
        return proc

    def pexpect_spawn(self, argv: list[str], **kwargs: Any) -> pexpect.spawn:
        """A long-lived tracked process on a pty (pexpect makes it a session leader)."""
        import pexpect

        cmd = self.argv(argv, cwd=kwargs.pop("cwd", None), env=kwargs.pop("env", None))
        kwargs.setdefault("encoding", "utf-8")
        kwargs.setdefault("codec_errors", "replace")
        child = pexpect.spawn(cmd[0], cmd[1:], env=_WRAPPER_ENV, **kwargs)
        self._track(child)
        return child

    def run(
        self,
        argv: list[str],
        *,
        input: bytes | None = None,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        view: list[str] | None = None,
        tail: bool = False,
    ) -> Result:
        """Run one command to completion (or to the timeout / output cap, then kill it).
        `tail`: past the cap the command runs on and each stream keeps its last
        `Limits.output_bytes` (a build step, which `docker build` never cuts short)."""
        proc = self.popen(
            argv,
            cwd=cwd,
            env=env,
            view=view,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + (self.limits.timeout_s if timeout is None else timeout)
        if input is not None:  # fed by a thread: a command may answer before it read it all
            threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True).start()
        cap, used, timed_out, truncated = self.limits.output_bytes, 0, False, False
        chunks: dict[int, list[bytes]] = {1: [], 2: []}
        assert proc.stdout is not None and proc.stderr is not None
        # in the sandbox's PID namespace the command's namespace outlives it (bwrap's init
        # waits for every process there): what it left writing to its output dies with it,
        # as it does where the command is pid 1 of its own namespace
        adopter = self._state.pids_init
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, 1)
            sel.register(proc.stderr, selectors.EVENT_READ, 2)
            while sel.get_map() and not truncated:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                ready = sel.select(left if adopter is None else min(left, 0.05))
                if not ready and adopter is not None and proc.poll() is not None:
                    for pid in writing_to(outputs_of(proc), self.owns):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    adopter = None
                for key, _ in ready:
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    if tail:  # keep the newest bytes, the command runs on
                        kept = b"".join(chunks[key.data]) + data
                        chunks[key.data] = [kept[-cap:]]
                        continue
                    chunks[key.data].append(data[: max(0, cap - used)])
                    used += len(data)
                    truncated = used > cap
        returncode = None
        if not (timed_out or truncated):
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            timed_out = returncode is None
        if returncode is None:
            kill_tree(proc, self._state.owns, self.backend == "bwrap", self._state.pids_init)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        with self._state.lock, contextlib.suppress(ValueError):
            self._state.procs.remove(proc)
        return Result(
            returncode=returncode,
            stdout=b"".join(chunks[1]).decode("utf-8", "replace"),
            stderr=b"".join(chunks[2]).decode("utf-8", "replace"),
            timed_out=timed_out,
            truncated=truncated,
        )

    def own_network(self) -> bool:
        """As root under bwrap: one network namespace for every command of this sandbox from
        now on (`join_net`), made here with its loopback up and ports below 1024 open to any
        uid (`ip_unprivileged_port_start=0`, that namespace's alone), as root may bind them
        in a container; kept until close. False, with nothing changed, otherwise."""
        if self._state.netns is not None:
            return True
        if self.uid is None or self.backend != "bwrap":
            return False
        holder = subprocess.Popen(
            ["unshare", "--net", "--", "sleep", "infinity"], env=_WRAPPER_ENV,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip # arguments grouped by meaning
        ns, ours = f"/proc/{holder.pid}/ns/net", os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and holder.poll() is None:
            with contextlib.suppress(OSError):
                if os.readlink(ns) != ours:  # unshare has made it and become `sleep`
                    break
            time.sleep(0.005)
        setup = "ip link set lo up && echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start"
        try:
            done = subprocess.run(
                ["nsenter", f"--net={ns}", "--", "sh", "-c", setup],
                env=_WRAPPER_ENV, capture_output=True, timeout=10, check=False,
            )  # fmt: skip # arguments grouped by meaning
            ok = done.returncode == 0 and holder.poll() is None
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            holder.kill()
            holder.wait()
            return False
        self._state.netns = holder
        self.join_net = holder.pid
        return True

    def own_users(self) -> bool:
        """As root under bwrap: every command from now on runs as uid 0 of one user namespace
        of this sandbox's own, with Docker's default capabilities there (`environments.userns`),
        as a container's root: it may add users, chown to them, run as `nobody`. Inside, uid 0
        is `uid` and 1..65535 a block of host uids of this sandbox alone; host root is mapped
        nowhere. Kept until close; its commands get a PID namespace of the sandbox's, each
        one its own inside it (`share_pids`). False, with nothing changed, otherwise."""
        state = self._state
        if state.userns_fd is not None:
            return True
        if self.uid is None or self.backend != "bwrap":
            return False
        block, block_fd = userns.claim_block(_LOCK_DIR)
        try:
            fd = userns.make(self.uid, block)
        except OSError as e:
            os.close(block_fd)
            log.warning("skyrl sandbox: no user namespace of its own (%s); not root inside", e)
            return False
        state.block, state.block_fd, state.userns_fd = block, block_fd, fd
        return True

    def host_id(self, inner: int) -> int | None:
        """The host uid (or gid) that `inner` is in the sandbox's own user namespace
        (`own_users`): `uid` for 0, the block's for 1..65535; `uid` for any other id, or
        where there is no such namespace."""
        block = self._state.block
        if block is None or not 0 < inner < userns.SIZE:
            return self.uid
        return block.start + inner

    def owns(self, uid: int) -> bool:
        """True for a host uid this sandbox's processes may run as."""
        return self._state.owns(uid)

    def kill_all(self) -> None:
        """Kill every process started so far; the sandbox stays usable."""
        self._state.kill_all()

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over `memory_mb` (0 without a cgroup)."""
        if self.memory_cgroup is None:
            return 0
        for name in ("memory.events", "memory.oom_control"):  # v2, v1
            with contextlib.suppress(OSError, ValueError):
                for line in (self.memory_cgroup / name).read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        return 0

    def grow_disk(self, extra_mb: int) -> None:
        """Raise the work dir's cap by `extra_mb` (no-op where it is not capped): room for a
        verifier after kill_all(), when the agent may have filled it."""
        if self.disk_capped:
            grow_tmpfs(self.workdir, self.limits.disk_mb + extra_mb)

    def close(self) -> None:
        """kill_all, then remove the work dir (if the sandbox made it); idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """True once close() ran."""
        return self._state.closed

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _feed(stream: Any, data: bytes) -> None:
    with contextlib.suppress(OSError):  # BrokenPipeError: the command stopped reading
        stream.write(data)
        stream.close()
