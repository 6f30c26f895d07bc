"""Harbor tasks that need root inside their container, as Docker gives it: a solution that
adds a user and gives files to it and to root (`useradd`, `chown root:root`, a file in
`/etc`), a verifier that runs a command as `nobody`. Replicas of real tasks (a message-queue
consumer run by supervisor as its own user; a triage tool whose tests run it as `nobody`).

Over a built root file system the episode runs as uid 0 of a user namespace of its own, with
Docker's default capabilities and a private `/etc`, and its verifier sees the processes the
agent left running (as `docker exec` does: `pgrep -u`, `killall`); over the host's own system
(the fallback a user asks for) it does not. The root file system is FAKE (`fake_rootfs`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from environments import harbor
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import load_harbor_task
from tests.environments import fake_rootfs

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="root file systems need bubblewrap")

USERADD_SOLVE = """#!/bin/bash
set -e
useradd -M -s /bin/false app
mkdir -p /var/log/app
chown app:app /var/log/app
echo s3cret > /etc/app_secret
chmod 400 /etc/app_secret
chown root:root /etc/app_secret
"""
USERADD_TEST = """#!/bin/bash
ok=1
id -u app || ok=0
[ "$(stat -c %U:%G /var/log/app)" = app:app ] || ok=0
[ "$(stat -c %a:%U:%G /etc/app_secret)" = 400:root:root ] || ok=0
setpriv --reuid=app --regid=app --clear-groups touch /var/log/app/consumer.log || ok=0
setpriv --reuid=app --regid=app --clear-groups cat /etc/app_secret && ok=0
echo $ok > /logs/verifier/reward.txt
"""
SERVICE_TEST = """#!/bin/bash
ok=1
as_svc() { setpriv --reuid=svc --regid=svc --clear-groups "$@"; }
[ "$(cat /app/report.txt)" = done ] || ok=0
[ "$(as_svc cat /etc/svc/svc.conf)" = "port 6379" ] || ok=0
as_svc touch /var/lib/svc/dump /var/log/svc/svc.log || ok=0
[ "$(stat -c %U:%G:%a /var/lib/svc /etc/svc/svc.conf)" = "$(printf 'svc:svc:750\nsvc:svc:640')" ] || ok=0
echo $ok > /logs/verifier/reward.txt
"""
TMP_TEST = """#!/bin/bash
ok=1
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
[ "$(stat -c %a /tmp /var/tmp /dev/shm)" = "$(printf '1777\\n1777\\n1777')" ] || ok=0
as_nobody mkdir /tmp/case.$$ /var/tmp/case.$$ /dev/shm/case.$$ || ok=0
mkdir /tmp/root.$$ && as_nobody rm -r /tmp/root.$$ 2>/dev/null && ok=0  # the sticky bit
[ "$(cat /app/report.txt)" = done ] || ok=0
echo $ok > /logs/verifier/reward.txt
"""
NOBODY_SOLVE = "#!/bin/bash\necho done > /app/report.txt\n"
NOBODY_TEST = """#!/bin/bash
ok=1
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
[ "$(as_nobody id -u)" = 65534 ] || ok=0
[ "$(as_nobody cat /app/report.txt)" = done ] || ok=0
as_nobody cat /app/secret && ok=0
echo $ok > /logs/verifier/reward.txt
"""


@pytest.fixture()
def root_fs(monkeypatch):
    """The fake root file system, with what a package of a service leaves (as redis-server's
    does): its user `svc` (uid 100), its config readable by that user alone and its folders
    in /var, owned by it."""
    with fake_rootfs.installed(monkeypatch, fake_rootfs.PROGRAMS + fake_rootfs.USERS) as target:
        with open(target / "etc" / "passwd", "a") as f:
            f.write("svc:x:100:100::/var/lib/svc:/usr/sbin/nologin\n")
        with open(target / "etc" / "group", "a") as f:
            f.write("svc:x:100:\n")
        for path, mode in (("etc/svc/svc.conf", 0o640), ("var/lib/svc", 0o750),
                           ("var/log/svc", 0o750)):  # fmt: skip # one entry a line
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            if path.endswith(".conf"):
                (target / path).write_text("port 6379\n")
            else:
                (target / path).mkdir()
            os.chown(target / path, 100, 100)
            (target / path).chmod(mode)
        yield target


def _task(root: Path, solve: str, test_sh: str, run: str = ""):
    (root / "environment").mkdir(parents=True)
    dockerfile = f"FROM debian:bookworm\nWORKDIR /app\n{run}"
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "instruction.md").write_text("Do it.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 20.0\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(solve)
    return load_harbor_task(root)


def _reward(task, oracle: bool) -> tuple[float, dict]:
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        if oracle:
            env.run_oracle()
        _, reward, _, _, info = env.step("<submit/>")
        return reward, info
    finally:
        env.close()


@pytest.mark.parametrize(
    ("solve", "test_sh", "run"),
    [
        (USERADD_SOLVE, USERADD_TEST, ""),
        (NOBODY_SOLVE, NOBODY_TEST, "RUN echo top > secret && chmod 600 secret\n"),
        (NOBODY_SOLVE, SERVICE_TEST, ""),
        (NOBODY_SOLVE, TMP_TEST, ""),
    ],
    ids=[
        "useradd-chown-root",
        "verifier-runs-as-nobody",
        "service-user-of-the-image",
        "tmp-for-every-user",
    ],
)
def test_a_task_that_needs_root_inside_scores_as_in_docker(tmp_path, root_fs, solve, test_sh, run):
    """The oracle earns 1 (as Harbor gives it in Docker), noop 0."""
    task = _task(tmp_path / "t", solve, test_sh, run)
    reward, info = _reward(task, oracle=True)
    assert (reward, info["reward_error"]) == (1.0, None), info["verifier"]["output"]
    assert _reward(task, oracle=False)[0] == 0.0


def test_the_policys_shell_is_root_over_the_image_and_not_over_the_host(
    tmp_path, root_fs, monkeypatch
):
    """`id -u` in the agent's shell: 0 over the built root file system; over the host's own
    system (`SKYRL_HARBOR_BASE=host`) the sandbox's unprivileged uid, as before."""
    probe = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    for base, want in (("", "0"), ("host", None)):
        if base:
            monkeypatch.setenv(harbor.BASE_ENV, base)
            harbor._built.cache_clear()
        task = _task(tmp_path / f"t{base}", NOBODY_SOLVE, probe)
        env = ShellEnv(timeout_s=20)
        try:
            env.reset(options={"task": task})
            uid = env.step("<bash>id -u</bash>")[0].split()[0]
        finally:
            env.close()
        assert uid == want if want is not None else uid != "0", (base, uid)


WORKER_SOLVE = """#!/bin/bash
set -e
useradd -M -s /bin/false mq-worker
setpriv --reuid=mq-worker --regid=mq-worker --clear-groups sleep 1234.5 >/dev/null 2>&1 &
"""
WORKER_TEST = """#!/bin/bash
ok=1
worker=$(pgrep -u mq-worker -f 'sleep 1234.5') || ok=0
pkill -9 -u mq-worker -f 'sleep 1234.5' || ok=0
for _ in 1 2 3 4 5 6 7 8 9 10; do pgrep -u mq-worker -f 'sleep 1234.5' || break; sleep 0.2; done
pgrep -u mq-worker -f 'sleep 1234.5' && ok=0
echo "worker ${worker:-unseen}"
echo $ok > /logs/verifier/reward.txt
"""


@pytest.fixture()
def procps_fs(monkeypatch):
    """The fake root file system with procps's pgrep and pkill (as the real task's image has
    them, with psmisc's killall)."""
    if shutil.which("pgrep") is None or shutil.which("pkill") is None:
        pytest.skip("the host has no procps (pgrep, pkill) to put in the fake root file system")
    programs = fake_rootfs.PROGRAMS + fake_rootfs.USERS + ("pgrep", "pkill")
    with fake_rootfs.installed(monkeypatch, programs) as target:
        yield target


def test_the_verifier_finds_and_kills_a_service_the_solution_left_running(tmp_path, procps_fs):
    """The real mq-auto-restart's tests: the solution starts a worker as its own user and
    leaves it running; the verifier finds it (`pgrep -u mq-worker`), kills it and checks it is
    gone, as in Harbor, where the verifier `docker exec`s into the agent's container: 1 for the
    oracle, 0 for noop (no such user, no worker)."""
    task = _task(tmp_path / "t", WORKER_SOLVE, WORKER_TEST)
    reward, info = _reward(task, oracle=True)
    assert (reward, info["reward_error"]) == (1.0, None), info["verifier"]["output"]
    assert _reward(task, oracle=False)[0] == 0.0
