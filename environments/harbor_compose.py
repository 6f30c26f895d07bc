"""A multi-container Harbor task: the services its `environment/docker-compose.yaml` adds
beside `main`, each a sandbox of its own in the episode's network namespace.

Harbor merges a task's compose file over its base compose, where service `main` is the
task's Dockerfile (`sleep infinity`, everything `docker exec`ed in it), and `docker compose
up` starts the rest: each service is built from its `build:` context, runs its ENTRYPOINT
and CMD (or `command:`) with its `environment:`, its named volumes mounted, and is reached
from `main` by its service name; `depends_on: condition: service_healthy` holds `main` back
until the service's healthcheck passes.

Here there is no container runtime. The compose file is read as data (a safe YAML load). A
service with `build:` is built like the main image (`harbor.service_image`: same builder,
same cache). Per episode (`start`), each service runs in a sandbox of its own over a private
copy of its layer, joined to the episode's network namespace, so every service listens on the
one loopback the agent's shell and the verifier share; every service name resolves to
127.0.0.1 in the episode's `/etc/hosts` and each service's. `${VAR:-default}` takes the
default only (never this host's environment). A named volume is one folder of the episode,
bound at its path in each service that mounts it (`:ro` read-only), filled first from the
first service whose image has files there (as Docker fills an empty volume); it belongs to the
first service that mounts it read-write, and its folders are open to the others. `main`'s
`environment:` and volumes go to the agent's shell and the verifier. The services end with
the episode (`Sidecars.close`).

`main` may be built by the file too, as real Harbor tasks do (`build: {context:
${CONTEXT_DIR}/.., dockerfile: ${CONTEXT_DIR}/Dockerfile}`, the task folder as the context so
that `COPY app/ /app/` finds the task's `app/`): its context and Dockerfile are honoured when
they lie in the task folder. Harbor's own compose variables (`${CONTEXT_DIR}`,
`${MAIN_IMAGE_NAME}`, its log folders, `${CPUS}`, `${MEMORY}`) are what Harbor sets; its
log-folder mounts are the episode's own `/logs/verifier` and `/logs/agent`; `deploy:` resource
limits are left to skyrl's sandbox limits; main's `command:` may only idle (`sleep infinity`,
Harbor's own), as here main runs nothing but the agent's and verifier's commands.

A compose feature not handled here (host networking, a prebuilt image, a bind mount of a
host path, privileges...) is one pre-flight sentence (`preflight`); the task is not run.
Reading and checking the file is `environments.harbor_compose_file`; this module runs it.
Sidecars need the episode's own network namespace, so skyrl must run as root.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from environments import harbor
from environments.bash import chown_tree
from environments.harbor_compose_file import (
    FILE,
    MAX_CHECK_S,
    Compose,
    ComposeError,
    Service,
    read,
)
from environments.sandbox import Sandbox, bwrap_available

__all__ = ["FILE", "Compose", "ComposeError", "Service", "Sidecars", "preflight", "read", "start"]


def preflight(task_dir: Path, options: harbor.BuildOptions) -> list[str]:
    """What stops the task's services from running here, each a whole sentence; building
    each service's image (cached) on the way."""
    try:
        compose = read(task_dir)
    except ComposeError as e:
        return [str(e)]
    if compose is None or not compose.sidecars:
        return []
    names = ", ".join(s.name for s in compose.sidecars)
    if os.geteuid() != 0 or not bwrap_available():
        return [
            f"its compose services ({names}) run beside main in the episode's own network "
            "namespace, which needs skyrl to run as root with bubblewrap"
        ]
    problems = []
    for service in compose.sidecars:
        assert service.context is not None
        img = harbor.service_image(task_dir, service.context, options)
        problems += [f"service {service.name}: {p}" for p in img.problems]
        if not img.problems and not (
            service.entrypoint or service.command or img.entrypoint or img.command
        ):
            problems.append(f"service {service.name} has no ENTRYPOINT, CMD nor command to run")
    return problems


# ---------------------------------------------------------------------------- the episode


@dataclass
class Sidecars:
    """The running services of one episode; `close` ends them and removes their volumes."""

    sandboxes: list[Sandbox] = field(default_factory=list)
    volumes: Path | None = None

    def close(self) -> None:
        for sandbox in self.sandboxes:
            sandbox.close()
        self.sandboxes = []
        if self.volumes is not None:
            shutil.rmtree(self.volumes, ignore_errors=True)
            self.volumes = None


def _name_hosts(sandbox: Sandbox, names: list[str]) -> None:
    """Every service name on the episode's loopback, in the sandbox's own /etc/hosts (made by
    `harbor.Layout` through `harbor.own_hosts`)."""
    with open(sandbox.workdir / "hosts", "a") as f:
        f.write("".join(f"127.0.0.1\t{name}\n" for name in names))


def _volume_view(service: Service, folders: dict[str, Path]) -> list[str]:
    return [
        arg
        for volume, target, ro in service.mounts
        for arg in ("--ro-bind" if ro else "--bind", str(folders[volume]), target)
    ]


def _fill(folder: Path, layer: Path, target: str) -> None:
    """Docker's first mount of an empty volume: the image's files at `target` copied in."""
    if any(folder.iterdir()):
        return
    with contextlib.suppress(ValueError, OSError):
        source = harbor._safe_target(layer, target)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, folder, symlinks=True, dirs_exist_ok=True)


def _healthy(service: Service, sandbox: Sandbox, proc: subprocess.Popen, log: Path) -> str | None:
    """Run the service's healthcheck until it passes: None, or why it never did."""
    if service.check is None:
        return None
    begun, failures = time.monotonic(), 0
    while True:
        if proc.poll() is not None:
            tail = (
                log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
            )
            last = f": {tail[0].strip()[:200]}" if tail else ""
            return f"service {service.name} exited (status {proc.returncode}) before it was healthy{last}"
        result = sandbox.run(service.check, timeout=service.timeout_s)
        if result.returncode == 0:
            return None
        took = time.monotonic() - begun
        failures += took >= service.start_s  # failures in the start period do not count
        if failures >= service.retries or took > MAX_CHECK_S:
            said = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:]
            why = f" (last: {said[0].strip()[:200]})" if said else ""
            return (
                f"service {service.name} did not become healthy: its healthcheck failed "
                f"{service.retries} times, {service.interval_s:g}s apart{why}"
            )
        time.sleep(service.interval_s)


def start(task_dir: Path, layout: harbor.Layout, options: harbor.BuildOptions) -> Sidecars | None:
    """Start the task's services beside the episode of `layout`, in the episode's network
    namespace, and give `main`'s environment, volumes and service names to the episode's
    sandbox; None when the task has no compose file. ValueError, one sentence, when a service
    cannot start or never becomes healthy (everything started is ended)."""
    compose = read(task_dir)
    if compose is None:
        return None
    main = layout.sandbox
    names = ["main", *(s.name for s in compose.sidecars)]
    if compose.sidecars and main.join_net is None:
        raise ValueError(
            "its compose services run beside main in the episode's own network namespace, "
            "which needs skyrl to run as root with bubblewrap"
        )
    top = Path(tempfile.mkdtemp(prefix="skyrl-volumes-"))
    top.chmod(0o711)  # unlistable: each volume's folder name is a secret of the episode
    running = Sidecars(volumes=top)
    folders = {v: top / secrets.token_hex(16) for v in compose.volumes}
    try:
        for folder in folders.values():
            folder.mkdir()
        # every layout and volume is made before any service runs: nothing of a task's is
        # ever running while a volume is filled or given to its owner (as root)
        ready = [_prepare(task_dir, s, main, options, folders, names) for s in compose.sidecars]
        running.sandboxes += [sandbox for _, sandbox, _ in ready]
        layers = [(s.mounts, side.root, sb.uid) for s, sb, (side, _) in ready]
        _own_volumes(folders, [*layers, (compose.main.mounts, layout.root, main.uid)])
        started: dict[str, tuple[Service, Sandbox, subprocess.Popen, Path]] = {}
        for service, sandbox, (_, argv) in ready:
            _wait(service.healthy, started)
            log = sandbox.workdir / "service.log"
            with open(log, "wb") as out:
                proc = sandbox.popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
            started[service.name] = (service, sandbox, proc, log)
        _wait(compose.main.healthy, started)
    except Exception:
        running.close()
        raise
    main.env |= compose.main.env
    main.view += _volume_view(compose.main, folders)
    _name_hosts(main, names)
    return running


def _prepare(
    task_dir: Path,
    service: Service,
    main: Sandbox,
    options: harbor.BuildOptions,
    folders: dict[str, Path],
    names: list[str],
) -> tuple[Service, Sandbox, tuple[harbor.Layout, list[str]]]:
    """A service's sandbox over a private copy of its image, on the episode's network, with
    its environment, volumes and the episode's names; its command line."""
    assert service.context is not None
    img = harbor.service_image(task_dir, service.context, options)
    sandbox = Sandbox(main.limits)
    try:
        side = harbor.Layout(img, sandbox, join_net=main.join_net)
        sandbox.env |= service.env
        sandbox.view += _volume_view(service, folders)
        _name_hosts(sandbox, names)
    except Exception:
        sandbox.close()
        raise
    sandbox.entrypoint = []
    if service.workdir:
        sandbox.inner_workdir = service.workdir
    entry = service.entrypoint if service.entrypoint is not None else img.entrypoint
    if service.command is not None:
        command = service.command
    else:  # Docker's: an `entrypoint:` of the service drops the image's CMD
        command = img.command if service.entrypoint is None else []
    return service, sandbox, (side, [*entry, *command])


def _wait(
    healthy: list[str], started: dict[str, tuple[Service, Sandbox, subprocess.Popen, Path]]
) -> None:
    for name in healthy:
        why = _healthy(*started[name])
        if why is not None:
            raise ValueError(why)


def _own_volumes(
    folders: dict[str, Path], layers: list[tuple[list[tuple[str, str, bool]], Path, int | None]]
) -> None:
    """Fill each empty volume from the first layer (in starting order, main last) with files
    at its path, as Docker fills one; give it to the first service that mounts it read-write
    (the others read its files), its folder open to every service of the episode."""
    owners: dict[str, int | None] = {}
    for mounts, root, uid in layers:
        for volume, target, ro in mounts:
            _fill(folders[volume], root, target)
            if not ro:
                owners.setdefault(volume, uid)
    for volume, folder in folders.items():
        chown_tree(folder, owners.get(volume))
        folder.chmod(0o777)
