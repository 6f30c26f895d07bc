"""A Harbor task's build and episode against this machine: what a Dockerfile's `RUN` and a
`solution/solve.sh` write at the image's paths (`/x`, `/start.sh`, `/etc`, `/root`, `/tmp`,
`/usr/local`) is the layer's or the sandbox's, never the host's; a RUN is bounded by a
memory cgroup, not by an address-space limit (V8, Go and the JVM reserve far more address
space than they use: `npm install` in a RUN once failed on RLIMIT_AS); over a built root
file system a RUN runs as root of a user namespace of its own, with the image's `/etc` and
`/opt` writable in the layer, as `docker build` gives; a failed RUN names the tool's own
last error line. The root file system is FAKE (`fake_rootfs`)."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from environments import harbor
from environments.base_images import base_for
from environments.rootfs import rootfs_dir
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import load_harbor_task
from tests.environments import fake_rootfs

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="Harbor's paths need bubblewrap")
ROOT = os.geteuid() == 0


def hostile_paths(token: str) -> list[str]:
    """Places a container's root may write, named so no host has them."""
    return [
        f"/x-{token}",
        "/start.sh",
        f"/etc/skyrl-{token}",
        f"/root/skyrl-{token}",
        f"/tmp/skyrl-{token}",
        f"/usr/local/skyrl-{token}",
        f"/usr/local/bin/skyrl-{token}",
    ]


def writes(paths: list[str]) -> str:
    """Shell lines that try to write each path (a failure is fine: read-only is kept too)."""
    return "".join(f"echo hostile > {p} 2>/dev/null || true\n" for p in paths)


def make_task(root: Path, dockerfile: str, solve: str = "", test_sh: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "instruction.md").write_text("Do it.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 20.0\n')
    (root / "tests").mkdir()
    test_sh = test_sh or "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}")
    return root


def oracle(task_dir: Path) -> tuple[float, dict]:
    env = ShellEnv(timeout_s=30)
    try:
        env.reset(options={"task": load_harbor_task(task_dir)})
        env.run_oracle()
        _, reward, _, _, info = env.step("<submit/>")
        return reward, info
    finally:
        env.close()


def image_of(task_dir: Path) -> harbor.Image:
    return harbor.image(task_dir, harbor.BuildOptions.from_kwargs())


@pytest.fixture()
def fake_root(monkeypatch):
    with fake_rootfs.installed(monkeypatch, fake_rootfs.PROGRAMS + fake_rootfs.USERS) as target:
        yield target


@pytest.fixture()
def host_base(monkeypatch):
    """The host's own system as every FROM, with a cache the sandbox uids reach."""
    top = Path(tempfile.mkdtemp(prefix="skyrl-harbor-build-"))
    top.chmod(0o755)
    monkeypatch.setenv(harbor.BASE_ENV, "host")
    monkeypatch.setenv("SKYRL_HARBOR_CACHE", str(top))
    harbor._built.cache_clear()
    yield top
    harbor._built.cache_clear()
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("base", ["host", "rootfs"])
def test_run_and_solve_write_nothing_on_the_host(tmp_path, base, request):
    """A RUN step and the oracle's solve.sh that write at the top of the image, in `/etc`,
    `/root`, `/tmp` and `/usr/local` leave no file there on this machine, over the host's
    own system (read-only) and over a built root file system (the layer's); the task still
    runs (oracle 1)."""
    request.getfixturevalue("host_base" if base == "host" else "fake_root")
    token = secrets.token_hex(4)
    paths = hostile_paths(token)
    before = {p: os.path.lexists(p) for p in paths}
    run = "".join(f"RUN echo hostile > {p} || true\n" for p in paths)
    task = make_task(tmp_path / "t", f"FROM debian:bookworm\nWORKDIR /app\n{run}", writes(paths))
    reward, info = oracle(task)
    assert (reward, info["reward_error"]) == (1.0, None), info["verifier"]["output"]
    after = {p: os.path.lexists(p) for p in paths}
    assert after == before, [p for p in paths if after[p] != before[p]]


V8_LIKE = "import mmap; m = mmap.mmap(-1, 8 << 30); m[0:1] = b'x'; print('reserved')"
"""What V8 does at start: reserve gigabytes of address space, touch a page of it."""


@pytest.mark.skipif(not ROOT, reason="a memory cgroup is made as root")
def test_a_run_that_reserves_much_address_space_builds(tmp_path, host_base):
    """A RUN (and the oracle) that maps 8 GB of address space and uses a page of it, as node
    does, builds and runs: the memory of a build and of an episode is bounded by their
    cgroup, not RLIMIT_AS (before: `OSError: [Errno 12] Cannot allocate memory`, a
    pre-flight problem)."""
    dockerfile = f'FROM debian:bookworm\nWORKDIR /app\nRUN python3 -c "{V8_LIKE}" > built\n'
    test_sh = (
        "#!/bin/bash\nok=1\n"
        '[ "$(cat /app/built /app/ran)" = "$(printf \'reserved\\nreserved\')" ] || ok=0\n'
        "echo $ok > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, f'python3 -c "{V8_LIKE}" > /app/ran\n', test_sh)
    assert image_of(task).problems == []
    reward, info = oracle(task)
    assert reward == 1.0, info["verifier"]["output"]


def test_opt_is_writable_at_build_time(tmp_path, fake_root):
    """Over a built root file system `/opt` is the layer's, as `/usr/local` is: a RUN makes a
    folder there and the episode sees it; the cached root file system is never written
    (before: `mkdir: cannot create directory '/opt/tool': Read-only file system`)."""
    dockerfile = (
        "FROM debian:bookworm\nWORKDIR /app\n"
        "RUN mkdir -p /opt/tool && echo built > /opt/tool/version\n"
    )
    test_sh = (
        "#!/bin/bash\nok=1\n"
        '[ "$(cat /opt/tool/version)" = built ] || ok=0\n'
        "echo $ok > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh=test_sh)
    assert image_of(task).problems == []
    reward, info = oracle(task)
    assert reward == 1.0, info["verifier"]["output"]
    assert not (fake_root / "opt" / "tool").exists()


@pytest.mark.skipif(not ROOT, reason="root inside needs root")
def test_run_over_a_built_root_is_root_with_the_images_etc(tmp_path, fake_root):
    """Over a built root file system a RUN runs as uid 0 (of the sandbox's user namespace,
    as `docker build` runs as the image's root): `useradd` writes the image's `/etc`, and
    the episode sees what the build left there. The cached root file system and the host's
    `/etc` are never written (before: the sandbox's uid, `useradd: cannot open
    /etc/passwd`)."""
    dockerfile = (
        "FROM debian:bookworm\nWORKDIR /app\n"
        "RUN id -u > /app/build-uid\n"
        "RUN useradd -M -s /bin/false builder\n"
    )
    test_sh = (
        "#!/bin/bash\nok=1\n"
        '[ "$(cat /app/build-uid)" = 0 ] || ok=0\n'
        "grep -q '^builder:' /etc/passwd || ok=0\n"
        "echo $ok > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh=test_sh)
    img = image_of(task)
    assert img.problems == []
    reward, info = oracle(task)
    assert reward == 1.0, info["verifier"]["output"]
    assert "builder" not in (fake_root / "etc" / "passwd").read_text()
    assert "builder" not in Path("/etc/passwd").read_text()


def test_a_failed_run_names_the_tools_own_error_line(tmp_path, host_base):
    """pip ends a failure with its `ERROR: ...` line and then a notice; the pre-flight reason
    is that ERROR line, whole, not the notice nor a generic sentence."""
    error = (
        "ERROR: Could not install packages due to an OSError: [Errno 28] "
        "No space left on device: '/usr/local/lib/python3/site-packages/numpy'"
    )
    tool = (
        "import sys\nprint('Collecting numpy')\n"
        f"print({error!r}, file=sys.stderr)\nprint('', file=sys.stderr)\n"
        "print('[notice] A new release of pip is available: 24.0 -> 25.3', file=sys.stderr)\n"
        "print('[notice] To update, run: pip install --upgrade pip', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    dockerfile = "FROM debian:bookworm\nWORKDIR /app\nCOPY pip.py /app/\nRUN python3 pip.py\n"
    task = make_task(tmp_path / "t", dockerfile)
    (task / "environment" / "pip.py").write_text(tool)
    (problem,) = image_of(task).problems
    assert problem.endswith(f"failed here (exit 1): {error}"), problem


def test_a_run_that_leaves_a_named_pipe_builds(tmp_path, host_base):
    """A RUN that leaves a named pipe (GNU make's jobserver FIFO in /tmp) and a socket in the
    image builds and is cached: the pipe is a pipe in the episode, the socket is left out, as
    a Docker layer keeps them (before: `shutil.copytree` raised "is a named pipe" and the
    whole `skyrl eval` ended)."""
    dockerfile = (
        "FROM debian:bookworm\nWORKDIR /app\n"
        "RUN mkfifo /app/pipe /tmp/GMfifo1 && python3 -c "
        "\"import socket; socket.socket(socket.AF_UNIX).bind('/app/sock')\" && touch /app/built\n"
    )
    test_sh = (
        "#!/bin/bash\nok=1\n"
        "[ -p /app/pipe ] && [ -e /app/built ] && [ ! -e /app/sock ] || ok=0\n"
        "echo $ok > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", dockerfile, test_sh=test_sh)
    assert image_of(task).problems == []
    reward, info = oracle(task)
    assert reward == 1.0, info["verifier"]["output"]


@pytest.mark.parametrize("step", ["_build", "copy_tree"])
def test_a_build_that_raises_is_its_tasks_pre_flight_sentence(
    tmp_path, host_base, monkeypatch, step
):
    """Whatever one task's build or its caching raises is that task's pre-flight sentence
    (the other tasks of an eval still run), and no half-copied image is left in the cache
    (before: the exception ended the whole `skyrl eval`)."""

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(harbor, step, broken, raising=False)
    task = make_task(tmp_path / "t", "FROM debian:bookworm\nWORKDIR /app\nRUN touch /app/x\n")
    (problem,) = image_of(task).problems
    assert problem == (
        "BUILD: the image could not be built here ([Errno 28] No space left on device)"
    ), problem
    assert [p.name for p in (host_base / "images").glob("*")] == []


def test_a_run_that_prints_much_builds_and_a_failure_names_its_last_line(tmp_path, host_base):
    """`docker build` has no output cap: a RUN that prints 200 KB (an autotools build prints
    more) runs to its end, and one that then fails is named by its last error line (before:
    killed once past the sandbox's 16 KiB, "failed here (exit None)")."""
    loud = "yes 'checking for a BSD-compatible install... /usr/bin/install -c' | head -n 3000"
    dockerfile = f"FROM debian:bookworm\nWORKDIR /app\nRUN {loud} && touch /app/built\n"
    test_sh = "#!/bin/bash\n[ -e /app/built ] && echo 1 > /logs/verifier/reward.txt\n"
    task = make_task(tmp_path / "t", dockerfile, test_sh=test_sh)
    assert image_of(task).problems == []
    assert oracle(task)[0] == 1.0
    failing = f"RUN ({loud}) >&2 && echo 'error: lwgrp failed' >&2 && exit 3\n"
    task = make_task(tmp_path / "u", f"FROM debian:bookworm\nWORKDIR /app\n{failing}")
    (problem,) = image_of(task).problems
    assert problem.endswith("failed here (exit 3): error: lwgrp failed"), problem


@pytest.mark.skipif(not ROOT, reason="chown to root inside needs root")
def test_a_verifier_may_chown_and_chmod_its_own_tests(tmp_path, fake_root):
    """`/tests/test.sh` is an ordinary file, as Harbor uploads it: a verifier that runs
    `chown -R 0:0 /tests` and chmods its files under `set -Eeuo pipefail` (flux-accounting's)
    goes on to its tests, and sees itself as `/tests/test.sh` in `$0` and `BASH_SOURCE`
    (before: "Read-only file system", the verifier ended, reward 0)."""
    test_sh = (
        "#!/bin/bash\nset -Eeuo pipefail\n"
        "chown -R 0:0 /tests\nchmod 0600 /tests/test.sh\n"
        'here="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"\n'
        '[ "$0" = /tests/test.sh ] && [ "$here" = /tests ]\n'
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    task = make_task(tmp_path / "t", "FROM debian:bookworm\nWORKDIR /app\n", test_sh=test_sh)
    reward, info = oracle(task)
    assert reward == 1.0, info["verifier"]["output"]


@pytest.mark.skipif(not ROOT, reason="a RUN as root inside needs root")
@pytest.mark.parametrize(
    ("image", "sources"),
    [("ubuntu:24.04", "sources.list.d/ubuntu.sources"), ("ubuntu:22.04", "sources.list")],
)
def test_an_ubuntu_stand_in_has_ubuntus_apt_sources_and_lists(
    tmp_path, monkeypatch, image, sources
):
    """A Dockerfile `FROM ubuntu:*` that points apt at a snapshot mirror with `sed -i` on
    Ubuntu's source list (deb822 `ubuntu.sources` from 24.04, `sources.list` before) and
    empties `/var/lib/apt/lists` builds over the Debian stand-in, which has neither Ubuntu's
    file nor lists of its own to delete (before: "sed: can't read ...", a pre-flight line)."""
    dockerfile = (
        f"FROM {image}\nWORKDIR /app\n"
        "RUN sed -i -e 's#http://archive.ubuntu.com/ubuntu/#http://snapshot.ubuntu.com/ubuntu/x/#'"
        f" /etc/apt/{sources} && find /var/lib/apt/lists -mindepth 1 -delete"
        " && rm -rf /var/lib/apt/lists/*\n"
    )
    test_sh = (
        f"#!/bin/bash\ngrep -q snapshot.ubuntu.com/ubuntu/x/ /etc/apt/{sources}"
        " && echo 1 > /logs/verifier/reward.txt\n"
    )
    programs = (*fake_rootfs.PROGRAMS, "sed", "find")
    with fake_rootfs.installed(monkeypatch, programs) as fake:
        for name in ("lock", "partial"):  # what Debian's root file system has there
            (fake / "var" / "lib" / "apt" / "lists").mkdir(parents=True, exist_ok=True)
            (fake / "var" / "lib" / "apt" / "lists" / name).touch()
        base = base_for(image)
        assert base is not None
        os.symlink(fake, rootfs_dir(base.spec()))
        task = make_task(tmp_path / "t", dockerfile, test_sh=test_sh)
        assert image_of(task).problems == []
        assert oracle(task)[0] == 1.0
