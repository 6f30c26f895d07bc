"""A hostile agent in ShellEnv: every attack is an observation and leaves the host untouched.

Run as root these tests exercise the real sandbox (bubblewrap, a uid of its own); the
weaker fallback cannot promise isolation, so the isolation tests skip there.
"""

from __future__ import annotations

import re
import resource
import secrets
import socket
import time
from pathlib import Path

import pytest

from environments.sandbox import Limits, Sandbox, pids_of_uid
from environments.shell import MAX_ACTION_CHARS, ShellEnv
from tasks.harbor import load_harbor_task
from tasks.task import Task

SLACK = 2.0  # two shared cores: leave room for a busy machine
SECRET = "s3cr3t-" + secrets.token_hex(8)


def live_pids(uid: int) -> list[int]:
    """Processes of `uid` that are not zombies (a dead orphan waits for pid 1 to reap it)."""
    alive = []
    for pid in pids_of_uid(uid):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(pid)
        except (OSError, IndexError):
            continue
    return alive


def _isolated() -> bool:
    with Sandbox() as sandbox:
        return sandbox.backend == "bwrap" and sandbox.uid is not None


isolated = pytest.mark.skipif(not _isolated(), reason="needs bubblewrap and root (a sandbox uid)")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake host home dir holding a secret, as $HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def task(tmp_path: Path) -> Task:
    root = tmp_path / "task"
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_text("Be nice.")
    (root / "task.toml").write_text('version = "1.0"\n')
    (root / "tests" / "test.sh").write_text('echo 0 > "$LOGS_DIR/reward.txt"\n')
    return load_harbor_task(root)


def start(task: Task, **kwargs) -> ShellEnv:
    env = ShellEnv(max_turns=50, **{"timeout_s": 2.0, **kwargs})
    env.reset(options={"task": task})
    return env


def act(env: ShellEnv, command: str) -> str:
    obs, reward, terminated, truncated, info = env.step(f"<bash>{command}</bash>")
    assert isinstance(obs, str) and (reward, terminated, truncated) == (0.0, False, False)
    obs.encode("utf-8")  # nothing unencodable leaks into what gets logged and tokenized
    return obs


def assert_gone(uid: int | None) -> None:
    if uid is not None:
        assert live_pids(uid) == []


# ---------------------------------------------------------------------------- the file system


@isolated
def test_cannot_write_outside_the_work_dir(task, tmp_path, home):
    outside = tmp_path / "outside"
    outside.mkdir()
    here = Path(__file__).parent
    target = f"skyrl-pwned-{secrets.token_hex(4)}"
    env = start(task)
    for path in [outside, Path("/etc"), Path("/var/tmp"), Path("/usr/local/bin"), here, home]:
        act(env, f"echo pwned > {path}/{target}; mkdir -p {path} && echo pwned > {path}/{target}")
    act(env, f"ln -s /etc/hostname link; echo pwned >> link; ln -s {outside} out; touch out/x")
    env.close()
    for path in [outside, Path("/etc"), Path("/var/tmp"), Path("/usr/local/bin"), here, home]:
        assert not (path / target).exists(), path
    assert sorted(p.name for p in outside.iterdir()) == []
    assert "pwned" not in Path("/etc/hostname").read_text()


@isolated
def test_cannot_read_the_hosts_home_or_temp_files(task, tmp_path, home):
    (tmp_path / "secret.txt").write_text(SECRET)
    env = start(task)
    obs = act(env, f"cat {home}/.ssh/id_ed25519; ls -a /root {home}; cat {tmp_path}/secret.txt")
    obs += act(env, f"grep -rs {SECRET[:10]} /root /home /tmp {tmp_path.parent} | head")
    env.close()
    assert SECRET not in obs and "No such file" in obs


# ---------------------------------------------------------------------------- the network


@isolated
def test_cannot_reach_the_host_over_loopback(task):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        port = server.getsockname()[1]
        env = start(task)
        obs = act(env, f"echo hi > /dev/tcp/127.0.0.1/{port}")
        obs += act(
            env,
            'python3 -c \'import socket; socket.create_connection(("127.0.0.1", '
            f"{port}), timeout=1)'",
        )
        env.close()
        with pytest.raises(BlockingIOError):
            server.accept()
    assert "[exit code: 0]" not in obs
    assert "Network is unreachable" in obs or "Connection refused" in obs


# ---------------------------------------------------------------------------- resources


@isolated
@pytest.mark.parametrize(
    "flood",
    [
        "for i in $(seq 3000); do sleep 60 & done 2>/dev/null",
        "bomb() { bomb | bomb & }; bomb",
    ],
)
def test_a_process_flood_is_contained_and_gone_after_close(task, flood):
    env = start(task, limits=Limits(processes=64), timeout_s=2.0)
    start_time = time.monotonic()
    act(env, flood)
    assert time.monotonic() - start_time < 2.0 + 3 * SLACK
    assert "[exit code: 0]" in act(env, "echo still here")
    uid = env.sandbox.uid
    assert uid is not None and len(pids_of_uid(uid)) <= 64
    env.close()
    assert_gone(uid)


def test_a_huge_allocation_fails(task):
    env = start(task)
    obs = act(env, "python3 -c 'x = bytearray(50 * 1024**3)'")
    assert "MemoryError" in obs and "[exit code: 1]" in obs
    obs = act(env, "head -c 50G /dev/zero > big; ls -l big | cut -d' ' -f5")
    assert int(obs.split("\n")[-3]) <= 64 * 1024 * 1024
    env.close()


@pytest.mark.parametrize("loop", ["while true; do :; done", "yes > /dev/null", "sleep 1000"])
def test_an_endless_command_is_stopped_and_the_next_one_works(task, loop):
    env = start(task, timeout_s=1.0)
    start_time = time.monotonic()
    obs = act(env, loop)
    assert time.monotonic() - start_time < 1.0 + SLACK
    assert "stopped at the 1 s time limit" in obs
    assert act(env, "echo ok").startswith("ok\n[exit code: 0]")
    env.close()


@pytest.mark.parametrize(
    "printer",
    [
        "head -c 1000000000 /dev/zero | tr '\\0' a",
        "yes 'a line of output'",
        "while :; do echo 'bash itself prints'; done",
    ],
)
def test_printing_a_gigabyte_is_cut_quickly_in_bounded_memory(task, printer):
    env = start(task, timeout_s=10.0)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, a running peak
    start_time = time.monotonic()
    obs = act(env, printer)
    assert time.monotonic() - start_time < 5.0
    assert "bytes of output omitted" in obs and "stopped after printing more than" in obs
    assert len(obs) < env.limits.output_bytes + 1000
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 100_000
    assert act(env, "echo ok").startswith("ok\n")
    env.close()


@isolated
def test_filling_the_disk_is_an_error_and_grading_still_works(task):
    env = start(task, timeout_s=20.0)
    cap = getattr(env.limits, "disk_mb", 512)  # the default cap
    fill = "for i in $(seq {n}); do head -c 60M /dev/zero > {folder}/big$i || break; done"
    n = cap // 60 + 2
    obs = act(env, fill.format(n=n, folder="."))
    assert "No space left on device" in obs, obs
    used = sum(f.stat().st_size for f in env.files.iterdir() if f.is_file())
    assert used <= cap * 2**20
    act(env, "rm -f big*")
    for folder in ("/tmp", "/dev/shm"):
        obs = act(env, fill.format(n=n, folder=folder))
        assert "No space left on device" in obs, obs
        act(env, f"rm -f {folder}/big*")
    act(env, fill.format(n=n, folder="."))
    obs, reward, terminated, _, info = env.step("<submit/>")  # the verifier still gets room
    assert terminated and info["reward_error"] is None and info["verifier"]["returncode"] == 0, obs
    env.close()


# ---------------------------------------------------------------------------- the completion marker


@pytest.mark.parametrize(
    "steal",
    [
        'read -t 1 -r line <&2; eval "$line"',  # the queued sentinel, read from the terminal
        'read -t 1 -r line </dev/tty; eval "$line"',
        'line=$(timeout 1 head -n 1 <&2); eval "$line"',
    ],
)
def test_a_command_cannot_read_the_marker_and_end_itself_early(task, steal):
    env = start(task, timeout_s=5.0)
    obs = act(env, f"{steal}; sleep 1; echo LATE-OUTPUT; (exit 3)").split("\nTurns left:")[0]
    assert "LATE-OUTPUT" in obs and obs.endswith("[exit code: 3]"), obs
    obs = act(env, "echo next")
    assert obs.startswith("next\n[exit code: 0]") and "LATE" not in obs, obs
    env.close()


def test_xtrace_does_not_give_away_a_marker_that_works(task):
    env = start(task, timeout_s=5.0)
    traced = act(env, "set -x; echo traced")
    assert "traced" in traced
    act(env, "set +x")
    seen = set(re.findall(r"__skyrl_[0-9a-f]+__", traced)) or {"__skyrl_none__"}
    forge = "; ".join(f"printf '\\n%s%d\\n' {m} 7" for m in sorted(seen))
    obs = act(env, f"{forge}; sleep 1; echo LATE-OUTPUT").split("\nTurns left:")[0]
    assert "LATE-OUTPUT" in obs and obs.endswith("[exit code: 0]"), obs
    obs = act(env, "echo next")
    assert obs.startswith("next\n[exit code: 0]") and "LATE" not in obs, obs
    env.close()


# ---------------------------------------------------------------------------- garbage actions


@pytest.mark.parametrize(
    "action",
    [
        b"<bash>echo caf\xff\xfe</bash>",  # not UTF-8
        "<bash>echo '\ud800' \udcff</bash>",  # lone surrogates
        "<bash>printf '\\xff\\xfe\\x00\\x1b[2J'</bash>",  # such bytes in the output
        "<bash>echo hi</bash>" + "x" * 1_000_000,
        "<bash>" + "echo x; " * (MAX_ACTION_CHARS // 8 - 2) + "</bash>",  # just under the limit
        "<bash>echo unclosed",
        "<bash><bash>echo nested</bash></bash>",
        "<bash>echo <submit/></bash>",
        "<submit></submit>",
        "<bash></bash>",
        "\x03\x04\x1a<bash>\x03</bash>",
        "",
        None,
        12345,
    ],
    ids=lambda action: repr(action)[:24],  # a 1 MB test id would reach the sandbox's environment
)
def test_garbage_actions_are_observations(task, action):
    env = start(task)
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and obs.endswith("Turns left: 49")
    obs.encode("utf-8")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert act(env, "echo fine").startswith("fine\n[exit code: 0]")
    env.close()
