"""A Harbor task's `environment/docker-compose.yaml`, read as data (a safe YAML load) and
checked: its services (`build:` context, ENTRYPOINT/`command:`, `environment:`, named
volumes, healthcheck, `depends_on`), and `main`'s own build, environment and volumes. What
is not handled here is one `ComposeError` sentence. Running the services is
`environments.harbor_compose`, whose docstring has the whole picture."""

from __future__ import annotations

import contextlib
import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FILE = "environment/docker-compose.yaml"
"""The one compose file Harbor's Docker environment reads (`_environment_docker_compose_path`,
passed to `docker compose -f`): a `docker-compose.yml`, `compose.yaml` or `compose.yml` beside
the Dockerfile is never read there, so it is not here either."""

TOP_KEYS = {"services", "volumes", "networks", "version", "name"}

SERVICE_KEYS = {
    "build", "image", "environment", "volumes", "healthcheck", "depends_on", "command", "entrypoint",
    "restart", "networks", "expose", "ports", "working_dir", "init", "tty", "stdin_open",
    "stop_grace_period", "container_name", "hostname", "deploy",
}  # fmt: skip # a set
"""What a service may set here. `image` (with `build:`, the name of what is built), `networks` (all services share one
loopback), `expose`,
`ports` (nothing here is reached from the host), `restart`, `init`, `tty`, `deploy: resources`
(skyrl's sandbox limits apply) and the rest are read and have nothing to do here."""

MAIN_KEYS = {
    "environment", "volumes", "depends_on", "networks", "expose", "ports", "restart", "build",
    "image", "command", "deploy",
}  # fmt: skip # a set
"""What `main` may set: its `build:` (context and Dockerfile in the task folder), `image` (the
name of what is built), `command` (idling only) and `deploy:` (resources only) besides the rest;
also `network_mode: none` (Harbor's airgapped tasks: an episode here has no network anyway)."""

HARBOR_LOGS = ("/logs/verifier", "/logs/agent")
"""Harbor's log folders, which its compose variables mount in `main`; an episode has its own."""

MAX_CHECK_S = 600.0
"""The longest a service's healthcheck is waited for, whatever its interval and retries."""

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|\$([A-Za-z_]\w*)")

_LOG_MOUNTS = {f"{path}:{path}" for path in HARBOR_LOGS}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
"""A service name, as Compose allows it (and as /etc/hosts holds it)."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")


class ComposeError(ValueError):
    """A compose file that cannot run here: its message is one whole sentence."""


@dataclass
class Service:
    """One service of a task's compose file, as it runs here."""

    name: str
    context: Path | None = None
    """The build context (a folder of the task); None for a `main` without `build:` (built
    from environment/)."""
    dockerfile: Path | None = None
    """The Dockerfile it is built from (None: the context's `Dockerfile`)."""
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    """(volume, path inside, read-only) of each named volume it mounts."""
    entrypoint: list[str] | None = None
    command: list[str] | None = None
    workdir: str | None = None
    check: list[str] | None = None
    """The healthcheck's command line (None: none)."""
    interval_s: float = 30.0
    timeout_s: float = 30.0
    retries: int = 3
    start_s: float = 0.0
    healthy: list[str] = field(default_factory=list)
    """Services it waits to be healthy for (`depends_on: condition: service_healthy`)."""
    after: list[str] = field(default_factory=list)
    """Services it starts after (`depends_on`, any condition)."""


@dataclass
class Compose:
    """A task's compose file: `main` (the task's Dockerfile) and the services beside it, in
    the order they start."""

    main: Service
    sidecars: list[Service]
    volumes: list[str]


def _substitute(value: Any, where: str) -> str:
    """A compose scalar as a string, `${VAR:-default}` and `${VAR-default}` their default,
    `${VAR}` and `$VAR` empty (this host's environment is never read), `$$` a `$`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)):
        raise ComposeError(f"{where} is not a string")

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        if m.group(2) is not None and "?" in m.group(2):
            raise ComposeError(
                f"{where} requires the variable {m.group(1)}, which is never set here"
            )
        if m.group(2) is not None and "+" in m.group(2):
            return ""  # `${VAR:+alt}`: VAR is unset here
        return m.group(3) or ""

    return _VAR.sub(sub, str(value))


def harbor_variables(task_dir: Path) -> dict[str, str]:
    """The compose variables Harbor sets for a task (its `DockerEnvironmentEnvVars`): the
    folders as this episode has them (a host log folder is the episode's own), the image's
    name, and the task.toml's resources (only `deploy:` reads them, and it is left alone)."""
    env: dict[str, Any] = {}
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
        found = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
        if isinstance(found.get("environment"), dict):
            env = found["environment"]
    verifier, agent = HARBOR_LOGS
    return {
        "CONTEXT_DIR": str((task_dir / "environment").resolve()),
        "MAIN_IMAGE_NAME": f"hb__{task_dir.resolve().name.lower()}",
        "HOST_VERIFIER_LOGS_PATH": verifier,
        "ENV_VERIFIER_LOGS_PATH": verifier,
        "HOST_AGENT_LOGS_PATH": agent,
        "ENV_AGENT_LOGS_PATH": agent,
        "CPUS": str(env.get("cpus", 1)),
        "MEMORY": f"{env['memory_mb']}M" if "memory_mb" in env else "1G",
    }


def _harbor(value: Any, variables: dict[str, str]) -> Any:
    """The file's data with Harbor's variables put in (as `$$`-escaped text, so that
    `_substitute` reads them back as written); every other `$` left for `_substitute`."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        if name not in variables:
            return m.group(0)
        if m.group(2) is not None and "+" in m.group(2):
            return m.group(3)  # `${VAR:+alt}`: VAR is set
        return variables[name].replace("$", "$$")

    if isinstance(value, str):
        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [_harbor(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: _harbor(v, variables) for k, v in value.items()}
    return value


def _duration(value: Any, where: str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if not text or _DURATION.sub("", text):
        raise ComposeError(f"{where} is not a duration such as 3s or 1m30s: {text!r}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in _DURATION.findall(text))


def _argv(value: Any, where: str) -> list[str]:
    """A command given as a list (as written) or a string (run by /bin/sh -c, as Compose
    splits it: here a shell does)."""
    if isinstance(value, str):
        return ["/bin/sh", "-c", _substitute(value, where)]
    if isinstance(value, list) and value:
        return [_substitute(v, where) for v in value]
    raise ComposeError(f"{where} is neither a command line nor a list of words")


def _environment(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):
        pairs = [str(item).split("=", 1) for item in value]
        value = {p[0]: p[1] if len(p) == 2 else "" for p in pairs}
    if not isinstance(value, dict):
        raise ComposeError(f"{where} is neither a mapping nor a list of NAME=value")
    return {str(k): _substitute(v, f"{where} {k}") for k, v in value.items()}


def _mounts(
    value: Any, where: str, volumes: dict[str, Any], main: bool = False
) -> list[tuple[str, str, bool]]:
    mounts = []
    for item in value or []:
        if main and isinstance(item, str) and _substitute(item, where) in _LOG_MOUNTS:
            continue  # Harbor's log folder: the episode's own /logs/verifier or /logs/agent
        if isinstance(item, dict):
            if item.get("type", "volume") != "volume":
                raise ComposeError(
                    f"{where} mounts a {item.get('type')} ({item.get('source')}), and only named "
                    "volumes are supported here (nothing of this host is ever shown to a task)"
                )
            source, target, ro = item.get("source"), item.get("target"), bool(item.get("read_only"))
        else:
            parts = _substitute(item, where).split(":")
            source, target = (parts[0], parts[1]) if len(parts) > 1 else (None, parts[0])
            ro = len(parts) > 2 and "ro" in parts[2].split(",")
        if not isinstance(source, str) or source not in volumes:
            raise ComposeError(
                f"{where} mounts {item!r}, and only the named volumes of the file's top-level "
                "`volumes:` are supported here (a host folder is never shown to a task)"
            )
        if not isinstance(target, str) or not posixpath.isabs(target) or target.strip("/") == "":
            raise ComposeError(
                f"{where} mounts {source} at {target!r}, which is not an absolute path below /"
            )
        mounts.append((source, posixpath.normpath(target), ro))
    return mounts


def _healthcheck(service: Service, value: Any, where: str) -> None:
    if not isinstance(value, dict) or value.get("disable"):
        return
    test = value.get("test")
    if isinstance(test, str):
        service.check = ["/bin/sh", "-c", _substitute(test, where)]
    elif isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL", "NONE"):
        if test[0] == "CMD":
            service.check = _argv(test[1:], where)
        elif test[0] == "CMD-SHELL":
            service.check = ["/bin/sh", "-c", _substitute(" ".join(map(str, test[1:])), where)]
    else:
        raise ComposeError(f"{where} test is neither CMD, CMD-SHELL, NONE nor a command line")
    for key, attr in (("interval", "interval_s"), ("timeout", "timeout_s"),
                      ("start_period", "start_s")):  # fmt: skip # key, attribute
        if key in value:
            setattr(service, attr, _duration(value[key], f"{where} {key}"))
    if "retries" in value:
        service.retries = max(1, int(value["retries"]))


def _depends(service: Service, value: Any, where: str, names: set[str]) -> None:
    items = value.items() if isinstance(value, dict) else [(n, {}) for n in value or []]
    for name, spec in items:
        if name not in names:
            raise ComposeError(f"{where} names {name}, which is no service of the file")
        condition = (spec or {}).get("condition", "service_started")
        if condition not in ("service_started", "service_healthy"):
            raise ComposeError(
                f"{where} waits for {name} to be {condition}, which is not supported here "
                "(service_started and service_healthy are)"
            )
        service.after.append(name)
        if condition == "service_healthy":
            service.healthy.append(name)


def _service(
    task_dir: Path, name: str, spec: Any, volumes: dict[str, Any], names: set[str]
) -> Service:
    where = f"{FILE}: service {name}"
    if not isinstance(spec, dict):
        spec = {}
    allowed = MAIN_KEYS if name == "main" else SERVICE_KEYS
    mode = spec.get("network_mode")
    if mode is not None and not (name == "main" and mode == "none"):
        raise ComposeError(
            f"{where} sets `network_mode: {mode}`, which is not supported here "
            + (
                "(only `none`: an episode here has no network)"
                if name == "main"
                else "(a service here is on the episode's own network, where main reaches it "
                "by its name)"
            )
        )
    for key in spec:
        if key == "network_mode":
            continue
        if key not in allowed and not str(key).startswith("x-"):
            raise ComposeError(
                f"{where} sets `{key}`, which is not supported here"
                + (" (main is the task's Dockerfile)" if name == "main" else "")
            )
    service = Service(name)
    deploy = spec.get("deploy")
    if deploy is not None and (not isinstance(deploy, dict) or set(deploy) - {"resources"}):
        raise ComposeError(
            f"{where} deploys with {sorted(map(str, deploy)) if isinstance(deploy, dict) else deploy!r}, "
            "and only `deploy: resources` (left to skyrl's own sandbox limits) is supported here"
        )
    if name == "main":
        _main_build(service, spec, task_dir, where)
    else:
        build = spec.get("build")
        if build is None:
            raise ComposeError(
                f"{where} has no `build:` (a prebuilt image such as {spec.get('image', '?')!r} "
                "is not supported here: only services built from a folder of environment/ are)"
            )
        build = {"context": build} if isinstance(build, str) else build
        extra = set(build) - {"context", "dockerfile"} if isinstance(build, dict) else {"?"}
        if extra or build.get("dockerfile", "Dockerfile") != "Dockerfile":
            raise ComposeError(
                f"{where} builds with {sorted(extra) or ['dockerfile']}, which is not supported "
                "here (a context folder with its Dockerfile is)"
            )
        env_dir = (task_dir / "environment").resolve()
        context = (env_dir / _substitute(build.get("context", "."), where)).resolve()
        if not context.is_relative_to(env_dir) or not (context / "Dockerfile").is_file():
            raise ComposeError(
                f"{where} builds from {build.get('context')!r}, which is no folder of "
                "environment/ with a Dockerfile"
            )
        service.context = context
        if "entrypoint" in spec:
            service.entrypoint = _argv(spec["entrypoint"], f"{where} entrypoint")
        if "command" in spec:
            service.command = _argv(spec["command"], f"{where} command")
        if "working_dir" in spec:
            service.workdir = _substitute(spec["working_dir"], where)
        _healthcheck(service, spec.get("healthcheck"), f"{where} healthcheck")
    service.env = _environment(spec.get("environment"), f"{where} environment")
    service.mounts = _mounts(spec.get("volumes"), f"{where} volumes", volumes, name == "main")
    _depends(service, spec.get("depends_on"), f"{where} depends_on", names)
    return service


def _main_build(service: Service, spec: dict, task_dir: Path, where: str) -> None:
    """`main`'s `build:` (a context and Dockerfile of the task folder, paths as Compose reads
    them: from environment/, the Dockerfile from the context), `image` and `command`."""
    build = spec.get("build")
    if build is None and "image" in spec:
        raise ComposeError(
            f"{where} runs the prebuilt image {spec['image']!r}, which is not supported here "
            "(main is built from the task's Dockerfile)"
        )
    if build is not None:
        build = {"context": build} if isinstance(build, str) else build
        extra = (
            set(map(str, build)) - {"context", "dockerfile"} if isinstance(build, dict) else {"?"}
        )
        if extra:
            raise ComposeError(
                f"{where} builds with {sorted(extra)}, which is not supported here (a context "
                "folder and a Dockerfile are)"
            )
        top = task_dir.resolve()
        context = (top / "environment" / _substitute(build.get("context", "."), where)).resolve()
        if not context.is_relative_to(top) or not context.is_dir():
            raise ComposeError(
                f"{where} builds from {build.get('context')!r}, which is outside the task folder "
                "or no folder of it (a build context must lie in the task folder)"
            )
        named = build.get("dockerfile", "Dockerfile")
        dockerfile = context / _substitute(named, where)  # an absolute path is taken as it is
        if (
            dockerfile.is_symlink()
            or not dockerfile.resolve().is_relative_to(top)
            or not dockerfile.is_file()
        ):
            raise ComposeError(
                f"{where} builds with the Dockerfile {named!r}, which is no file of the task folder"
            )
        service.context, service.dockerfile = context, dockerfile.resolve()
    if "command" in spec:
        argv = _argv(spec["command"], f"{where} command")
        if not re.search(r"\bsleep\s+infinity\b", " ".join(argv)):
            raise ComposeError(
                f"{where} runs {' '.join(argv)[:200]!r}, and here main runs only the agent's and "
                "the verifier's commands (idling, Harbor's `sleep infinity`, is all it may run)"
            )


def compose_file(task_dir: Path) -> Path | None:
    path = task_dir / FILE
    return path if path.is_file() and not path.is_symlink() else None


def read(task_dir: Path) -> Compose | None:
    """The task's compose file as data (None: it has none), services in starting order;
    ComposeError, one sentence, for what cannot run here."""
    path = compose_file(task_dir)
    if path is None:
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError as e:
        raise ComposeError(f"{FILE} is not valid YAML ({e})") from None
    if not isinstance(data, dict):
        raise ComposeError(f"{FILE} is not a mapping of services")
    for key in data:
        if key not in TOP_KEYS and not str(key).startswith("x-"):
            raise ComposeError(f"{FILE} sets `{key}`, which is not supported here")
    data = _harbor(data, harbor_variables(task_dir))
    specs = data.get("services") or {}
    volumes = data.get("volumes") or {}
    for name, spec in volumes.items() if isinstance(volumes, dict) else []:
        if isinstance(spec, dict) and (spec.get("external") or spec.get("driver_opts")):
            raise ComposeError(
                f"{FILE}: volume {name} is external or has driver options, "
                "which are not supported here (a volume is a fresh folder of the episode)"
            )
    if not isinstance(specs, dict) or not isinstance(volumes, dict):
        raise ComposeError(f"{FILE}: `services:` and `volumes:` are not mappings")
    for name in specs:
        if not _NAME.fullmatch(str(name)):
            raise ComposeError(
                f"{FILE}: {str(name)[:60]!r} is not a service name (letters, digits, `_`, `.`, `-`)"
            )
    names = {*specs, "main"}
    try:
        services = {n: _service(task_dir, str(n), s, volumes, names) for n, s in specs.items()}
    except ComposeError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as e:  # a value of the wrong kind
        raise ComposeError(f"{FILE} cannot be read here ({e})") from None
    main = services.pop("main", Service("main"))
    order: list[Service] = []

    def visit(service: Service, seen: tuple[str, ...]) -> None:
        if service in order:
            return
        if service.name in seen:
            raise ComposeError(f"{FILE}: depends_on makes a cycle ({service.name})")
        for name in service.after:
            if name == "main":
                raise ComposeError(
                    f"{FILE}: service {service.name} depends on main, which starts last here"
                )
            visit(services[name], (*seen, service.name))
        order.append(service)

    for service in services.values():
        visit(service, ())
    return Compose(main, order, [str(v) for v in volumes])
