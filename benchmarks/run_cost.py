"""What one short `skyrl train` costs on a joined Ray cluster, in wall time and in CPU seconds
of every process (driver, Ray workers, raylet), with the learner, engine and other backends
in one worker process (`ray.share_process=true`, the default) against one process each;
or (`--compare warm`) a run that starts its worker against one that takes the warm worker
a finished run left on the cluster (`SKYRL_REUSE_WORKERS`, trainers/warm.py).

    python benchmarks/run_cost.py                  # 3 runs of each, tiny model, 1 step
    python benchmarks/run_cost.py --runs 5 --set algorithm.kl_coef=0.05
    python benchmarks/run_cost.py --compare warm   # fresh worker against warm worker
    python benchmarks/run_cost.py --ray-address 127.0.0.1:6379   # a cluster already up

The test suite runs about a hundred such commands, so their CPU is what its wall time
follows on a 2-core machine. CPU is read from this process's cpuacct cgroup where the
script can make one (root on a cgroup v1 host: the Ray head it starts and every run are
inside it), else from /proc/stat (every process of the machine: run it idle). The runs
alternate so drift hits both sides; each line is one run, then medians and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent
CGROUP = Path("/sys/fs/cgroup/cpuacct")


def _cpu_reader() -> tuple[str, Callable[[], float]]:
    """('cgroup' or 'machine', a function giving CPU seconds so far)."""
    own = CGROUP / f"skyrl-run-cost-{os.getpid()}"
    try:
        own.mkdir()
        (own / "cgroup.procs").write_text(str(os.getpid()))
        return "cgroup", lambda: int((own / "cpuacct.usage").read_text()) / 1e9
    except OSError:
        tick = os.sysconf("SC_CLK_TCK")

        def machine() -> float:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            busy = sum(int(x) for i, x in enumerate(fields) if i not in (3, 4))  # not idle/iowait
            return busy / tick

        return "machine", machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--set", action="append", default=[], help="more config (KEY=VALUE)")
    ap.add_argument("--ray-address", help="join this cluster instead of starting one here")
    ap.add_argument(
        "--compare",
        choices=["share", "warm"],
        default="share",
        help="share: ray.share_process true against false (default); warm: a fresh worker "
        "against a warm one (SKYRL_REUSE_WORKERS)",
    )
    a = ap.parse_args()

    source, cpu = _cpu_reader()
    work = Path(tempfile.mkdtemp(prefix="skyrl-run-cost-"))
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("SKYRL_REUSE_WORKERS", None)  # only the warm side of --compare warm asks for it
    head = None
    temp = f"/tmp/skyrl-rc-{os.getpid()}"  # short: Ray's unix sockets fail on long paths
    address = a.ray_address
    if address is None:
        port = _free_port()
        env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_urlsafe(32)}
        head = subprocess.Popen(
            [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", "--node-ip-address=127.0.0.2",
             "--disable-usage-stats", f"--temp-dir={temp}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip # arguments grouped by meaning
        address = f"127.0.0.2:{port}"
        time.sleep(5)  # the head's own start-up, outside every measurement
    sides = ("true", "false") if a.compare == "share" else ("fresh", "warm")
    rows: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
    # the warm side's pool is this invocation's own: no other run takes its worker
    # (ended 30 s after the last run gives it back, on a cluster that outlives the script)
    warm_env = {**env, "SKYRL_REUSE_WORKERS": f"run-cost-{os.getpid()}", "SKYRL_REUSE_IDLE_S": "30"}

    def one(side: str) -> tuple[float, float]:
        share = side if a.compare == "share" else "true"
        sets = [*a.set, f"ray.share_process={share}", "eval.before=false", "eval.limit=0"]
        cmd = [str(BIN / "skyrl"), "train", "--env", "math", "--model", a.model]
        cmd += ["--max-steps", str(a.steps), "--ray-address", address]
        cmd += [x for s in sets for x in ("--set", s)]
        c0, t0 = cpu(), time.perf_counter()
        done = subprocess.run(
            cmd, cwd=work, env=warm_env if side == "warm" else env, capture_output=True, text=True
        )
        wall = time.perf_counter() - t0
        time.sleep(2)  # the job's workers exit
        if done.returncode != 0:
            sys.exit(f"a run ({side}) failed: {done.stderr.strip()[-500:]}")
        return wall, cpu() - c0

    label = "share_process" if a.compare == "share" else "worker"
    print(f"{label:<14} {'wall s':>7} {'CPU s':>7}   (CPU: {source})")
    try:
        if a.compare == "warm":  # the first warm run starts the worker: not counted
            wall, used = one("warm")
            print(f"{'(first warm)':<14} {wall:>7.2f} {used:>7.2f}   starts the worker", flush=True)
        for _ in range(a.runs):
            for side in sides:
                rows[side].append(one(side))
                print(f"{side:<14} {rows[side][-1][0]:>7.2f} {rows[side][-1][1]:>7.2f}", flush=True)
    finally:
        if head is not None:  # this cluster's processes (its temp dir), no other Ray's
            head.kill()
            head.wait()
            for pid in filter(str.isdigit, os.listdir("/proc")):
                with contextlib.suppress(OSError):
                    if temp.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
        if source == "cgroup":  # back to the root group; ours is removed once empty
            with contextlib.suppress(OSError):
                (CGROUP / "cgroup.procs").write_text(str(os.getpid()))
                (CGROUP / f"skyrl-run-cost-{os.getpid()}").rmdir()
    med = {s: [statistics.median(x[k] for x in r) for k in (0, 1)] for s, r in rows.items()}
    for side, (wall, used) in med.items():
        print(f"median {side:<7} {wall:>7.2f} {used:>7.2f}")
    if a.compare == "share":
        print(f"CPU ratio separate/shared: {med['false'][1] / med['true'][1]:.2f}x")
    else:
        print(f"CPU ratio fresh/warm: {med['fresh'][1] / med['warm'][1]:.2f}x")


if __name__ == "__main__":
    main()
