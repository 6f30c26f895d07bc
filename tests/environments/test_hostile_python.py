"""Hostile code through PythonEnv actions (bubblewrap backend): the host stays untouched."""

from __future__ import annotations

import os
import resource
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from environments.python import PythonEnv
from environments.sandbox import bwrap_available, pids_of_uid
from tasks.task import Task

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
SLACK = 2.0  # two shared cores
TASK = Task(id="t1", env="python", prompt="What is 6 * 7?", answer=42)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's home dir, as far as the code under test knows, with a secret in it."""
    path = tmp_path / "home"
    path.mkdir()
    (path / ".netrc").write_text("machine example.com password s3cret")
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def env():
    environment = PythonEnv(timeout_s=3.0, max_turns=50, sandbox_backend="bwrap")
    environment.reset(options={"task": TASK})
    yield environment
    environment.close()


def run(env: PythonEnv, code: str) -> str:
    obs, reward, terminated, truncated, _ = env.step(f"<python>{code}</python>")
    assert (reward, terminated, truncated) == (0.0, False, False), obs
    return obs.rsplit("\nTurns left:", 1)[0]


def test_writes_outside_the_work_dir_fail(env: PythonEnv, tmp_path: Path):
    target = tmp_path / "pwned.txt"
    for path in (target, Path("/etc/skyrl-pwned"), Path("/usr/skyrl-pwned")):
        obs = run(env, f"open({str(path)!r}, 'w').write('x')")
        assert "Error" in obs and ("Read-only file system" in obs or "No such file" in obs), obs
        assert not path.exists()
    # /tmp is the sandbox's own: what is made there never reaches the host's /tmp
    obs = run(env, f"import os; os.makedirs({str(tmp_path)!r}); open({str(target)!r}, 'w')\nNone")
    assert obs == "(no output)" and not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]
    assert run(env, "open('ok.txt', 'w').write('fine')") == "Out: 4"  # the work dir is writable


def test_host_home_and_root_are_hidden(env: PythonEnv, home: Path):
    obs = run(env, f"open({str(home / '.netrc')!r}).read()")
    assert "FileNotFoundError" in obs and "s3cret" not in obs
    secret = Path("/root") / f".skyrl-test-{uuid.uuid4().hex}"
    try:
        secret.write_text("root s3cret")
    except OSError:
        secret = None  # type: ignore[assignment]
    try:
        assert run(env, "import os; os.listdir('/root'), os.listdir('/home')") == "Out: ([], [])"
        if secret is not None:
            obs = run(env, f"open({str(secret)!r}).read()")
            assert "FileNotFoundError" in obs and "s3cret" not in obs
    finally:
        if secret is not None:
            secret.unlink()


def test_no_network_to_the_host(env: PythonEnv):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        obs = run(
            env,
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
        )
        assert "ConnectionRefusedError" in obs or "OSError" in obs, obs
        obs = run(env, "import urllib.request\nurllib.request.urlopen('http://1.1.1.1', timeout=1)")
        assert "URLError" in obs or "OSError" in obs, obs
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_process_flood_is_contained_and_cleaned_up(env: PythonEnv):
    code = """import os, time
made, error = 0, None
for _ in range(2000):
    try:
        pid = os.fork()
    except OSError as e:
        error = e
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
made, error"""
    start = time.monotonic()
    obs = run(env, code)
    assert time.monotonic() - start < 3.0 + SLACK
    assert "Resource temporarily unavailable" in obs, obs
    made = int(obs.removeprefix("Out: (").split(",")[0])
    assert 100 < made < 256
    box = env.sandbox
    assert box is not None and box.uid is not None
    assert run(env, "made") == f"Out: {made}"  # the REPL itself survived
    env.close()
    assert pids_of_uid(box.uid) == []  # zombies included
    assert not box.workdir.exists()


def test_huge_allocation_is_a_memory_error(env: PythonEnv):
    run(env, "kept = 'still here'")
    obs = run(env, "x = bytearray(50 * 2**30)")
    assert obs.endswith("MemoryError"), obs
    assert run(env, "kept") == "Out: 'still here'"  # not a crash: the session lives on


def test_infinite_loop_ends_in_time_and_the_next_action_works(env: PythonEnv):
    start = time.monotonic()
    obs = run(env, "while True:\n    pass")
    assert time.monotonic() - start < 3.0 + SLACK
    assert "time limit" in obs and "restarted" in obs
    assert run(env, "print('alive')") == "alive"


def test_printing_a_gigabyte_is_truncated_quickly_and_memory_stays_bounded(env: PythonEnv):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    obs = run(env, "for _ in range(1024):\n    print('x' * 2**20)")
    assert time.monotonic() - start < 1.0 + SLACK
    assert obs.endswith("... (output truncated)") and len(obs) < 5000
    obs = run(env, "import os\nos.system('head -c 200000000 /dev/zero | tr \"\\\\0\" y')")
    assert obs.startswith("yyyy") and "... (output truncated)" in obs
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 64, grown_mb
    assert run(env, "print('alive')") == "alive"


def test_code_that_attacks_the_repl_itself(env: PythonEnv):
    """Closing the protocol fds, forking a REPL that returns, hijacking stdout: all contained."""
    assert run(env, "import os\nos.fork() and None") == "(no output)"  # the fork must not answer
    assert run(env, "print('once')") == "once"
    run(env, "import os, sys\nos.close(0); os.close(1); os.close(2); sys.stdout = None")
    assert run(env, "print('fds put back')") == "fds put back"
    obs = run(env, "import os\nos.closerange(3, 1 << 20)")  # the protocol fds are gone
    assert obs.startswith("Error: the Python process died (exit status 70)"), obs
    assert "restarted" in obs
    assert run(env, "print('back')") == "back"


@pytest.mark.parametrize(
    "action",
    [
        b"<python>print('caf\xff\xfe')</python>",  # not UTF-8
        "<python>print('\ud800')</python>",  # a lone surrogate
        "<python>print(1)</python>" + "x" * 1_000_000,  # 1 MB action
        "<python>" + "x = 1\n" * 15_000 + "</python>",  # 90 kB of code
        "<python>print(1)",  # unclosed
        "<python><answer>1</answer></python>",  # nested
        "<answer><python>1</python></answer>",
        "<python>   </python>",
        "<python>def f(:</python>",  # a syntax error
        "<python>print('\\x00\\x1b[2J')</python>",  # control characters in the output
        "<python>import sys; sys.stdout.buffer.write(b'\\xff\\xfe')</python>",
        "<python>" + "(" * 5000 + "</python>",  # the parser gives up
        "",
        None,
        12345,
    ],
    ids=lambda action: repr(action)[:30],
)
def test_garbage_actions_are_observations(env: PythonEnv, action: object):
    start = time.monotonic()
    obs, reward, terminated, truncated, info = env.step(action)
    assert time.monotonic() - start < 3.0 + SLACK
    assert isinstance(obs, str) and obs.endswith("Turns left: 49")
    obs.encode("utf-8")  # no lone surrogates leak into what gets logged and tokenized
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert set(info) == {"turns_left", "error"}
    assert run(env, "print('fine')") == "fine"


# ---------------------------------------------------------------------------- issue 11: limits


class PeakRss:
    """Samples the resident memory (MB) of the host process, or of a sandbox uid's processes."""

    def __init__(self, uid: int | None = None) -> None:
        self.uid, self.peak, self._stop = uid, 0.0, threading.Event()
        self.base = self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> float:
        pids = ["self"] if self.uid is None else [str(p) for p in pids_of_uid(self.uid)]
        total = 0
        for pid in pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
        return total / 1024

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            time.sleep(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def shmem_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Shmem in /proc/meminfo")


@pytest.fixture
def host_sockets():
    """Listeners on the host: world-writable sockets in /run, /var/tmp and a folder of
    /var/lib, and an abstract one."""
    servers, names = [], []
    var_lib = tempfile.mkdtemp(prefix="skyrl-test-", dir="/var/lib")
    os.chmod(var_lib, 0o755)
    for folder in ("/run", "/var/tmp", var_lib):
        path = f"{folder}/skyrl-test-{uuid.uuid4().hex[:12]}.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        os.chmod(path, 0o777)
        servers.append(server)
        names.append(path)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0skyrl-test-{uuid.uuid4().hex[:12]}")
    servers.append(abstract)
    names.append(abstract.getsockname())
    for server in servers:
        server.listen()
        server.settimeout(0.2)
    yield names
    for server, name in zip(servers, names, strict=True):
        with pytest.raises(TimeoutError):
            server.accept()  # nobody got through
        server.close()
        if isinstance(name, str) and name.startswith("/"):
            os.unlink(name)
    os.rmdir(var_lib)


@pytest.mark.skipif(os.geteuid() != 0, reason="listeners in /run and /var/lib need root")
def test_host_unix_sockets_are_unreachable(env: PythonEnv, host_sockets: list):
    code = f"""import socket
reached = []
for name in {host_sockets!r}:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1)
    try:
        s.connect(name)
        reached.append(name)
    except OSError:
        pass
reached"""
    assert run(env, code) == "Out: []"


def test_disk_writes_are_capped_with_a_clear_error(env: PythonEnv):
    """Four cells writing 5 x 60 MB each: the work dir, /tmp and /dev/shm are size-capped."""
    cap = getattr(env.limits, "disk_mb", 512)  # the default cap
    shm_before = shmem_mb()
    cell = """import os
os.makedirs({folder!r}, exist_ok=True)
for i in range(5):
    with open(os.path.join({folder!r}, 'c{n}_%d' % i), 'wb') as f:
        f.write(b'x' * (60 << 20))"""
    errors = []
    for n, folder in enumerate(["big", "big", "/tmp/big", "/dev/shm/big"]):
        obs = run(env, cell.format(folder=folder, n=n))
        errors.append(obs)
    box = env.sandbox
    assert box is not None
    on_disk = sum(f.stat().st_size for f in box.workdir.rglob("*") if f.is_file()) / 2**20
    assert on_disk <= cap + 1, on_disk
    assert shmem_mb() - shm_before <= 2 * cap + 16
    assert "No space left on device" in errors[1], errors[1]  # 600 MB into the work dir
    assert run(env, "print('alive')") == "alive"
    assert run(env, "import shutil; shutil.rmtree('big'); open('ok', 'w').write('ok')") == "Out: 2"


def test_memory_limit_holds_for_the_whole_sandbox():
    """Four children of 700 MB each: together they stay within memory_mb."""
    env = PythonEnv(timeout_s=15.0, max_turns=5, sandbox_backend="bwrap")
    env.reset(options={"task": TASK})
    run(env, "print('started')")
    box = env.sandbox
    assert box is not None and box.uid is not None
    code = """import subprocess, sys
child = "b = b'x' * (700 << 20); import time; time.sleep(1)"
procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(4)]
[p.wait() for p in procs]"""
    with PeakRss(box.uid) as rss:
        obs = run(env, code)
    assert rss.peak <= env.limits.memory_mb + 64, (rss.peak, obs)
    assert "died" in obs or "-9" in obs, obs  # the kernel stopped some of them
    assert run(env, "print('alive')") == "alive"
    if env.sandbox is not None and env.sandbox.memory_cgroup is not None:
        obs = run(env, "parts = []\nwhile True:\n    parts.append(b'x' * (100 << 20))")
        assert "ran out of its 1024 MB of memory" in obs or "MemoryError" in obs, obs
    env.close()


def test_a_forged_response_header_does_not_grow_the_host(env: PythonEnv):
    code = """import os, stat, struct
me = os.readlink('/proc/self/fd/1')
for fd in map(int, os.listdir('/proc/self/fd')):
    try:
        link = os.readlink('/proc/self/fd/%d' % fd)
    except OSError:
        continue
    if link.startswith('pipe:') and link != me and fd > 2:
        try:
            os.write(fd, struct.pack('>I', 0x7fffffff))
            chunk = b'x' * (1 << 20)
            for _ in range(600):
                os.write(fd, chunk)
        except OSError:
            pass"""
    with PeakRss() as rss:
        obs, reward, terminated, truncated, _ = env.step(f"<python>{code}</python>")
    assert rss.peak - rss.base < 100, rss.peak - rss.base
    assert not terminated and "Error" in obs, obs
    assert run(env, "print('alive')") == "alive"


def test_a_huge_exception_message_does_not_grow_the_host(env: PythonEnv):
    with PeakRss() as rss:
        obs = run(env, "raise ValueError('x' * 150_000_000)")
    assert rss.peak - rss.base < 100, rss.peak - rss.base
    assert "ValueError" in obs and len(obs) < 10_000, obs[:300]
    assert run(env, "print('alive')") == "alive"
