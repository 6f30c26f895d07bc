"""Hostile episodes of a Harbor task over a built root file system, where the episode may run
as root inside its sandbox: whatever root inside can do, it cannot read a host file outside
the sandbox's binds (not through `/proc/1/root` either), write the cached root file system or
image layer (the next episode sees them unchanged), write anywhere but its own layer, or hold
any capability in the host's user namespace (host root is not mapped inside; a host-root
file of the root file system stays unreadable to it). The verifier, which sees the agent's
processes, is seen by none of them, and sees no process whose root is the host's.

The root file system is FAKE (`fake_rootfs`), with the programs tasks that need root use."""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import time
from pathlib import Path

import pytest

from environments import harbor
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import load_harbor_task
from tests.environments import fake_rootfs

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="root file systems need bubblewrap")
TOKEN = "canary-" + secrets.token_hex(12)
ROOT_ONLY = "/usr/share/skyrl-host-root-only"
"""A file of the root file system, owned by the host's uid 0 with mode 0600."""


@pytest.fixture()
def root_fs(monkeypatch):
    with fake_rootfs.installed(monkeypatch, fake_rootfs.PROGRAMS + fake_rootfs.USERS) as target:
        secret = target / ROOT_ONLY.lstrip("/")
        secret.parent.mkdir(parents=True, exist_ok=True)
        secret.write_text(TOKEN + "\n")
        os.chown(secret, 0, 0)
        secret.chmod(0o600)
        yield target


def _task(root: Path, test_sh: str = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"):
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /app\n")
    (root / "instruction.md").write_text("Do it.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 20.0\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(test_sh)
    return load_harbor_task(root)


def _episode(task, *commands: str, during=None) -> str:
    """Run `commands` as the agent (then `during()` on the host, the episode still live),
    submit; the observations joined."""
    env = ShellEnv(timeout_s=20, max_turns=len(commands) + 2)
    seen = []
    try:
        env.reset(options={"task": task})
        for command in commands:
            seen.append(env.step(f"<bash>{command}</bash>")[0])
        if during is not None:
            during()
        env.step("<submit/>")
    finally:
        env.close()
    return "\n".join(seen)


def _digest(top: Path) -> str:
    """Every entry under `top`: path, type, mode, owner and content."""
    h = hashlib.sha256()
    for path in sorted([top, *top.rglob("*")]):
        st = path.lstat()
        h.update(f"{path.relative_to(top)} {st.st_mode:o} {st.st_uid}:{st.st_gid}\n".encode())
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def test_host_files_outside_the_binds_are_unreachable(tmp_path, root_fs):
    """A canary in host folders the sandbox does not bind (their paths are tmpfs or absent
    inside) is read neither at its path nor through /proc/1/root (the sandbox's own pid 1),
    nor is the host-root file of the root file system."""
    folders = [Path(tempfile.mkdtemp(prefix="skyrl-canary-", dir=d)) for d in ("/tmp", "/var/tmp")]
    canaries = []
    for folder in folders:
        folder.chmod(0o755)
        (folder / "canary").write_text(TOKEN + "\n")
        (folder / "canary").chmod(0o644)
        canaries.append(str(folder / "canary"))
    try:
        reads = " ".join(f"{c} /proc/1/root{c} /proc/self/root{c}" for c in canaries)
        out = _episode(
            _task(tmp_path / "t"),
            f"cat {reads} {ROOT_ONLY} /proc/1/root{ROOT_ONLY}; readlink /proc/1/root",
            "ls /proc/1/root/ /proc/1/root/tmp /proc/1/root/var/tmp",
        )
    finally:
        for folder in folders:
            for entry in folder.iterdir():
                entry.unlink()
            folder.rmdir()
    assert TOKEN not in out, out
    listing = out.split("/proc/1/root/:", 1)[1]  # the ls: the host's /tmp's entries are not there
    assert "skyrl-canary-" not in listing and "skyrl-harbor" not in listing, out


def test_the_cached_root_file_system_and_layer_are_never_written(tmp_path, root_fs):
    """Root inside tries to change /etc, /usr and the image's files; the cached root file
    system and the cached image layer are unchanged, and the next episode sees neither."""
    task = _task(tmp_path / "t")
    img = harbor.image(Path(task.metadata["task_dir"]))
    assert img.problems == [] and img.system_root == str(root_fs)
    layer = Path(img.layer)
    before = (_digest(root_fs), _digest(layer))
    _episode(
        task,
        f"echo evil:x:0:0::/:/bin/sh >> /etc/passwd; useradd evil2; rm -f {fake_rootfs.MARKER}",
        "touch /usr/bin/evil /etc/evil /usr/local/bin/evil /app/evil; chmod 777 /usr/bin/cat",
        f"chown 0:0 /usr/bin/cat {ROOT_ONLY}; chmod 666 {ROOT_ONLY}; true",
    )
    assert (_digest(root_fs), _digest(layer)) == before
    out = _episode(
        task,
        f"cat /etc/passwd {fake_rootfs.MARKER}; ls /etc /usr/bin /usr/local/bin /app",
        f"stat -c '%a %n' /usr/bin/cat {ROOT_ONLY}",
    )
    assert "evil" not in out and "fake bookworm" in out and "777" not in out, out
    assert "666" not in out, out


PROBE = "skyrl-probe-" + secrets.token_hex(6)
TRIED = ("/", "/usr", "/usr/bin", "/usr/local", "/etc", "/var", "/var/lib", "/opt", "/tmp",
         "/var/tmp", "/home", "/root", "/run", "/dev/shm", "/app", "/logs", "/proc/1/root",
         "/proc/1/root/etc", "/sys", "/proc")  # fmt: skip # a list


def test_writes_stay_in_the_episodes_layer(tmp_path, root_fs):
    """A probe file written wherever root inside can reaches none of the host's folders of
    the same names, nor the root file system or the image cache."""
    out = _episode(
        _task(tmp_path / "t"),
        " ".join(f"touch {d}/{PROBE};" for d in TRIED) + " true",
        f"ls -d {' '.join(f'{d}/{PROBE}' for d in TRIED)}",
    )
    assert f"/app/{PROBE}" in out, out  # the layer is writable: the probe was written somewhere
    for folder in TRIED:
        assert not os.path.lexists(os.path.join(folder, PROBE)), folder
    for top in (root_fs, Path(os.environ["SKYRL_HARBOR_CACHE"])):
        assert not any(p.name == PROBE for p in top.rglob("*")), top


def _process_with(word: str) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if word.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                return int(pid)
        except OSError:
            continue
    return None


def test_root_inside_has_no_capability_in_the_hosts_user_namespace(tmp_path, root_fs):
    """A process of the episode, seen from the host: not in the host's user namespace, not
    the host's uid 0, and no range of its uid or gid map covers the host's 0 (so no file of
    host root is its own); inside, the host-root file and its owner stay out of reach."""
    mark = f"{271 + secrets.randbelow(1000)}.5"
    found: dict[str, object] = {}

    def look() -> None:
        deadline = time.monotonic() + 5
        while (pid := _process_with(mark)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid is not None, "the episode's process was not found"
        found["ns"] = os.readlink(f"/proc/{pid}/ns/user")
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        found["uids"] = next(line for line in status if line.startswith("Uid:")).split()[1:]
        found["maps"] = [Path(f"/proc/{pid}/{m}").read_text() for m in ("uid_map", "gid_map")]

    out = _episode(
        _task(tmp_path / "t"),
        f"sleep {mark} & echo started",
        f"cat {ROOT_ONLY}; chown 0:0 {ROOT_ONLY} && echo CHOWNED; echo x >> {ROOT_ONLY} && echo W",
        during=look,
    )
    assert found["ns"] != os.readlink("/proc/self/ns/user")
    assert "0" not in found["uids"], found
    for text in found["maps"]:  # host's view: "inside outside count" per line
        for line in str(text).splitlines():
            _, outside, count = (int(n) for n in line.split())
            assert not outside <= 0 < outside + count, found
    assert TOKEN not in out and "CHOWNED" not in out and "\nW" not in out, out


SCANNER = (
    "(while :; do echo >> /app/ticks; for p in /proc/[0-9]*; do "
    "if grep -qa test.sh $p/cmdline; then echo SAW ${p#/proc/} >> /app/seen; kill -9 ${p#/proc/}; "
    "fi; echo 1 > $p/root/logs/verifier/reward.txt; done 2>/dev/null; sleep 0.05; done) "
    ">/dev/null 2>&1 & echo started"
)
SLOW_ZERO = """#!/bin/bash
echo 0 > /logs/verifier/reward.txt
sleep 2
cat /logs/verifier/reward.txt
"""


def test_the_agents_processes_cannot_see_or_reach_the_verifier(tmp_path, root_fs):
    """The agent leaves a process that scans /proc for the verifier while it runs, to write 1
    into its reward file through `/proc/<pid>/root` and to kill it; the verifier writes 0.
    The scanner ran all through grading, never saw the verifier, and the reward is the
    verifier's 0 from a verifier that finished."""
    env = ShellEnv(timeout_s=20, max_turns=4)
    try:
        env.reset(options={"task": _task(tmp_path / "t", SLOW_ZERO)})
        assert "started" in env.step(f"<bash>{SCANNER}</bash>")[0]
        app = env._layout.host_path("/app")
        time.sleep(0.5)
        before = (app / "ticks").read_text().count("\n")
        _, reward, _, _, info = env.step("<submit/>")
        ticks = (app / "ticks").read_text().count("\n")
        seen = (app / "seen").read_text() if (app / "seen").exists() else ""
    finally:
        env.close()
    assert (reward, info["reward_error"]) == (0.0, None), info
    assert ticks - before > 10, (before, ticks)  # it kept scanning while the verifier ran
    assert seen == "", seen


def test_the_verifier_sees_no_process_whose_root_is_the_hosts(tmp_path, root_fs):
    """Whatever processes the verifier sees (the agent's, as in Harbor), none has the host's
    root or working directory: a canary in a host folder the sandbox does not bind is read
    through no `/proc/<pid>/root` or `/proc/<pid>/cwd` of them (the wrappers that hold the
    host's mounts stay outside every PID namespace of the episode)."""
    folder = Path(tempfile.mkdtemp(prefix="skyrl-canary-", dir="/tmp"))
    folder.chmod(0o755)
    (folder / "canary").write_text(TOKEN + "\n")
    (folder / "canary").chmod(0o644)
    canary = folder / "canary"
    test_sh = f"""#!/bin/bash
echo 0 > /logs/verifier/reward.txt
for p in /proc/[0-9]*; do
  for way in root cwd; do
    if grep -q {TOKEN} $p/$way{canary} 2>/dev/null; then echo "1 via $p/$way"; echo 1 > /logs/verifier/reward.txt; fi
  done
done
ls -d /proc/[0-9]* | wc -l
"""
    env = ShellEnv(timeout_s=20, max_turns=4)
    try:
        env.reset(options={"task": _task(tmp_path / "t", test_sh)})
        env.step("<bash>sleep 300 & sleep 301 & echo started</bash>")
        _, reward, _, _, info = env.step("<submit/>")
    finally:
        canary.unlink()
        folder.rmdir()
        env.close()
    assert (reward, info["reward_error"]) == (0.0, None), info["verifier"]["output"]
