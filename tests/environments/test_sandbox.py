"""Sandbox: limits, timeouts, output caps, kill-all and cleanup, with bwrap and the fallback."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from environments import sandbox as sandbox_mod
from environments.sandbox import Limits, Sandbox, bwrap_available, pids_of_uid

ROOT = os.geteuid() == 0
SLACK = 1.5  # two shared cores
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
BACKENDS = [pytest.param("bwrap", marks=needs_bwrap), "fallback"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture(params=BACKENDS)
def sb(request: pytest.FixtureRequest):
    box = Sandbox(Limits(timeout_s=5.0, output_bytes=4096), backend=request.param)
    yield box
    box.close()


def live(box: Sandbox) -> list[int]:
    """Live (non-zombie) processes of the sandbox's uid."""
    assert box.uid is not None
    return pids_of_uid(box.uid, zombies=False)


def test_run_captures_both_streams_in_the_work_dir(sb: Sandbox):
    result = sb.run(["bash", "-c", "echo out; echo err >&2; pwd; echo hi > made.txt; exit 3"])
    assert result.returncode == 3 and not result.timed_out and not result.truncated
    assert result.stdout == f"out\n{sb.inner_workdir}\n" and result.stderr == "err\n"
    assert (sb.workdir / "made.txt").read_text() == "hi\n"
    assert sb.run(["cat"], input=b"abc" * 1000).stdout == "abc" * 1000
    (sb.workdir / "sub").mkdir()
    assert sb.run(["pwd"], cwd="sub").stdout.strip() == os.path.join(sb.inner_workdir, "sub")
    if ROOT:  # every command was reaped: not even a zombie is left behind
        assert pids_of_uid(sb.uid) == []  # type: ignore[arg-type]


def test_environment_is_clean(sb: Sandbox, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SKYRL_TEST_SECRET", "hunter2")
    out = sb.run(["env"], env={"EXTRA": "1"}).stdout
    assert "hunter2" not in out and "EXTRA=1" in out
    assert f"HOME={sb.inner_workdir}" in out


def test_rlimits_apply(sb: Sandbox):
    box = Sandbox(Limits(cpu_seconds=7, memory_mb=300, processes=50, file_size_mb=2))
    try:
        out = box.run(["bash", "-c", "ulimit -t; ulimit -v; ulimit -f"]).stdout.split()
        assert out == ["7", str(300 * 1024), str(2 * 1024)]
        if ROOT:
            assert box.run(["bash", "-c", "ulimit -u"]).stdout.strip() == "50"
        big = box.run(["python3", "-c", "bytearray(400 * 2**20)"])
        assert big.returncode != 0 and "MemoryError" in big.stderr
        fsize = box.run(["bash", "-c", "head -c 5000000 /dev/zero > big; stat -c %s big"])
        assert fsize.stdout.strip() == str(2 * 1024 * 1024)
    finally:
        box.close()


def test_timeout_kills_the_whole_tree(sb: Sandbox):
    start = time.monotonic()
    result = sb.run(["bash", "-c", "sleep 100 & (setsid sleep 100 &); sleep 100"], timeout=0.5)
    assert time.monotonic() - start < 0.5 + SLACK
    assert result.timed_out and result.returncode is None
    if sb.backend == "bwrap" and ROOT:  # the PID namespace took the setsid'd sleep with it
        assert live(sb) == []


def test_output_is_capped_and_the_command_killed(sb: Sandbox):
    start = time.monotonic()
    result = sb.run(["bash", "-c", "yes; echo never"])
    assert time.monotonic() - start < SLACK
    assert result.truncated and len(result.stdout) == 4096 and set(result.stdout) == {"y", "\n"}


def test_tail_lets_the_command_run_on_and_keeps_its_last_output(sb: Sandbox):
    """`tail=True` (a build step): past the cap the command is not killed and each stream
    keeps its newest bytes, so a failure's last line is still there."""
    script = "yes | head -n 100000; echo done; echo last >&2; exit 3"
    result = sb.run(["bash", "-c", script], tail=True)
    assert result.returncode == 3 and not result.truncated
    assert len(result.stdout) == 4096 and result.stdout.endswith("y\ndone\n")
    assert result.stderr == "last\n"


def test_kill_all_keeps_the_sandbox_usable(sb: Sandbox):
    sb.popen(["bash", "-c", "(setsid sleep 100 &); sleep 100"])
    child = sb.pexpect_spawn(["bash", "--norc"])
    child.sendline("echo ready")
    child.expect("ready")
    time.sleep(0.2)
    if ROOT:
        assert len(live(sb)) >= 3
    sb.kill_all()
    assert not child.isalive()
    if ROOT:
        assert live(sb) == []
    assert sb.run(["echo", "still here"]).stdout == "still here\n"


def test_close_removes_the_work_dir_and_is_idempotent(sb: Sandbox):
    sb.popen(["sleep", "100"])
    workdir, uid = sb.workdir, sb.uid
    with sb:
        pass
    sb.close()
    assert not workdir.exists() and sb.closed
    if uid is not None:
        assert pids_of_uid(uid, zombies=False) == []
    with pytest.raises(RuntimeError, match="closed"):
        sb.run(["true"])


def test_given_work_dir_is_kept():
    workdir = Path(tempfile.mkdtemp())
    (workdir / "input.txt").write_text("data")
    try:
        with Sandbox(workdir=workdir) as box:
            result = box.run(["bash", "-c", "cat input.txt; echo more >> input.txt"])
            assert result.stdout == "data"
        assert (workdir / "input.txt").read_text() == "datamore\n"
    finally:
        shutil.rmtree(workdir)


@pytest.mark.skipif(not ROOT, reason="the uid switch happens only as root")
def test_unreachable_work_dir_is_a_clear_error(tmp_path: Path):
    private = tmp_path / "private"
    (private / "task").mkdir(parents=True)
    private.chmod(0o700)
    with pytest.raises(ValueError, match="not searchable by others"):
        Sandbox(workdir=private / "task")


def test_argv_for_a_caller_that_spawns_it_itself(sb: Sandbox):
    cmd = sb.argv(["echo", "x"], env={"A": "b"})
    joins = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', f"{sb.memory_cgroup}/cgroup.procs"]
    assert cmd[:4] == joins if sb.memory_cgroup else cmd[0] == "prlimit"
    assert "prlimit" in cmd and cmd[-2:] == ["echo", "x"] and "A=b" in cmd
    if sb.backend == "bwrap":
        for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--ro-bind"):
            assert flag in cmd
    if ROOT:
        assert f"--reuid={sb.uid}" in cmd
    out = subprocess.run(cmd, capture_output=True, text=True, start_new_session=True, check=True)
    assert out.stdout == "x\n"


@pytest.mark.skipif(not ROOT, reason="uids are handed out only when running as root")
def test_concurrent_sandboxes_get_their_own_uid():
    boxes = [Sandbox() for _ in range(3)]
    try:
        uids = {box.uid for box in boxes}
        assert len(uids) == 3 and all(u in sandbox_mod.UID_RANGE for u in uids)  # type: ignore[operator]
        assert all(box.workdir.stat().st_uid == box.uid for box in boxes)
    finally:
        for box in boxes:
            box.close()


@needs_bwrap
def test_bwrap_isolation(home: Path, tmp_path: Path):
    (home / "secret.txt").write_text("s3cret")
    outside = tmp_path / "outside.txt"
    with Sandbox(backend="bwrap") as box:
        assert box.backend == "bwrap" and box.inner_workdir == "/work"
        script = (
            f"cat {home}/secret.txt; ls -A /root /home /tmp; echo x > {outside}; "
            "echo x > /etc/skyrl-pwned; tail -n +3 /proc/net/dev | wc -l"
        )
        result = box.run(["bash", "-c", script])
        assert "s3cret" not in result.stdout + result.stderr
        assert "/home:\n\n/root:\n\n/tmp:\n" in result.stdout  # all three empty
        assert "Read-only file system" in result.stderr or "No such file" in result.stderr
        assert result.stdout.split()[-1] == "1"  # only the loopback device
    assert not outside.exists() and not Path("/etc/skyrl-pwned").exists()


@needs_bwrap
def test_bwrap_has_no_network():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.3)
    port = server.getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
    with Sandbox(backend="bwrap") as box:
        result = box.run(["python3", "-c", code])
    assert result.returncode != 0 and "Connection refused" in result.stderr
    with pytest.raises(TimeoutError):
        server.accept()
    server.close()


def test_fallback_warns_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(sandbox_mod, "_warned", False)
    monkeypatch.setenv(sandbox_mod.BACKEND_ENV, "fallback")
    with caplog.at_level(logging.WARNING, logger="environments.sandbox"):
        for _ in range(2):
            with Sandbox() as box:
                assert box.backend == "fallback" and box.inner_workdir == str(box.workdir)
    assert len([r for r in caplog.records if "WEAKER" in r.message]) == 1
    with pytest.raises(ValueError, match="known: auto, bwrap, fallback"):
        Sandbox(backend="docker")  # type: ignore[arg-type]


@needs_bwrap
@pytest.mark.skipif(not ROOT, reason="listeners in /run and /var/lib need root")
def test_bwrap_cannot_reach_host_unix_sockets():
    """World-writable listeners in /run, /var/tmp, /var/lib/x, an abstract one: none answers."""
    servers, names = [], []
    var_lib = tempfile.mkdtemp(prefix="skyrl-test-", dir="/var/lib")
    os.chmod(var_lib, 0o755)
    for folder in ("/run", "/var/tmp", var_lib):
        path = f"{folder}/skyrl-test-{os.getpid()}-{time.monotonic_ns()}.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        os.chmod(path, 0o777)
        servers.append(server)
        names.append(path)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0skyrl-test-{os.getpid()}-{time.monotonic_ns()}")
    servers.append(abstract)
    names.append(abstract.getsockname())
    for server in servers:
        server.listen()
        server.settimeout(0.2)
    probe = f"""import socket
for name in {names!r}:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1)
    try:
        s.connect(name)
        print('reached', name)
    except OSError as e:
        print('blocked', e.errno)
"""
    try:
        with Sandbox(backend="bwrap") as box:
            result = box.run(["python3", "-c", probe])
        assert result.stdout.count("blocked") == 4, result.stdout + result.stderr
        for server in servers:
            with pytest.raises(TimeoutError):
                server.accept()
    finally:
        for server in servers:
            server.close()
        for name in names[:3]:
            os.unlink(name)
        os.rmdir(var_lib)


@needs_bwrap
@pytest.mark.skipif(
    not sandbox_mod._bwrap_has_size(sandbox_mod.BWRAP), reason="this bwrap has no --size (< 0.7)"
)
def test_bwrap_disk_is_capped_everywhere_it_can_write():
    limits = Limits(disk_mb=40, file_size_mb=64, timeout_s=20)
    with Sandbox(limits, backend="bwrap") as box:
        for folder in ("/work", "/tmp", "/dev/shm"):
            script = f"head -c 60M /dev/zero > {folder}/big; echo rc=$?; rm -f {folder}/big"
            result = box.run(["bash", "-c", script])
            assert "No space left on device" in result.stderr, (folder, result)
            assert "rc=1" in result.stdout
        result = box.run(["bash", "-c", "head -c 30M /dev/zero > /work/fits && echo ok"])
        assert result.stdout == "ok\n"
        assert (box.workdir / "fits").stat().st_size == 30 * 2**20


CHILDREN = """import subprocess, sys
child = "b = b'x' * (250 << 20); import time; time.sleep(1)"
procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(4)]
print([p.wait() for p in procs])"""


def peak_rss_mb(uid: int, stop: threading.Event, peak: list[float]) -> None:
    while not stop.is_set():
        total = 0
        for pid in pids_of_uid(uid):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        peak[0] = max(peak[0], total / 1024)
        time.sleep(0.02)


@pytest.mark.skipif(not ROOT, reason="a sandbox-wide limit needs a cgroup or a uid of its own")
@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "nproc-x-as"])
def test_memory_limit_holds_for_the_whole_sandbox(monkeypatch: pytest.MonkeyPatch, cgroup: bool):
    """Four children of 250 MB each against memory_mb=512: together they stay under it."""
    if not cgroup:  # as where /sys/fs/cgroup is read-only
        monkeypatch.setattr(sandbox_mod, "make_memory_cgroup", lambda name, limit: None)
    with Sandbox(Limits(memory_mb=512, timeout_s=15)) as box:
        assert box.uid is not None
        if cgroup and box.memory_cgroup is None:
            pytest.skip("no writable memory cgroup here")
        if not cgroup:
            cmd = box.argv(["true"])
            nproc = int(next(a for a in cmd if a.startswith("--nproc=")).split("=")[1])
            as_bytes = int(next(a for a in cmd if a.startswith("--as=")).split("=")[1])
            assert nproc * as_bytes <= 512 * 2**20
        stop, peak = threading.Event(), [0.0]
        sampler = threading.Thread(target=peak_rss_mb, args=(box.uid, stop, peak))
        sampler.start()
        try:
            result = box.run(["python3", "-c", CHILDREN])
        finally:
            stop.set()
            sampler.join()
    assert peak[0] <= 512 + 32, (peak[0], result)
    # some child was killed (cgroup OOM) or could not start or allocate (rlimits)
    assert result.stdout.strip() != "[0, 0, 0, 0]" and not result.timed_out, result


@pytest.mark.skipif(not ROOT, reason="tmpfs work dirs and cgroups are made only as root")
def test_a_killed_owner_leaves_nothing_behind_for_long(monkeypatch: pytest.MonkeyPatch):
    """kill -9 of the process that owned a sandbox: the next process's first sandbox unmounts
    its tmpfs work dir (RAM) and removes its cgroup."""
    code = (
        "import os, sys; from environments.sandbox import Sandbox\n"
        "box = Sandbox(); box.run(['bash', '-c', 'head -c 5M /dev/zero > f'])\n"
        "print(box.workdir, box.memory_cgroup, box.disk_capped, flush=True)\n"
        "os.kill(os.getpid(), 9)"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60
    )
    workdir, cgroup, capped = out.stdout.split()
    assert capped == "True" and Path(workdir).is_dir()
    assert workdir in Path("/proc/self/mountinfo").read_text()
    monkeypatch.setattr(sandbox_mod, "sweep_leftovers", sandbox_mod.sweep_leftovers.__wrapped__)
    with Sandbox():
        pass
    assert workdir not in Path("/proc/self/mountinfo").read_text()
    assert not Path(workdir).exists()
    assert cgroup == "None" or not Path(cgroup).exists()
