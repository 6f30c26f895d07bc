"""A Harbor task's container, as far as this machine allows: its Dockerfile built once into a
cached layer, laid out in a bubblewrap sandbox at Harbor's paths.

Harbor (harbor-framework/harbor) builds `environment/Dockerfile`, starts the image with its
ENTRYPOINT (command `sleep infinity`) and `docker exec`s everything in the image's WORKDIR
with its ENV: the agent (logs in `/logs/agent`), the oracle (its `solution/` copied to
`/solution`, `solve.sh` run with output to `/logs/agent/oracle.txt`) and, after the agent,
the verifier (`tests/` copied to `/tests`, `/tests/test.sh` run with `[verifier].env`, output
to `/logs/verifier/test-stdout.txt`; `reward.json` is read if present, else `reward.txt`).

Here there is no container: the Dockerfile is read step by step. `FROM` is a Debian root
file system that stands in for the base image (`environments.base_images`' table, built by
`environments.rootfs`; `plan`), the sandboxes' `system_root`; its `/usr/local` and `/opt`
belong to the layer. `BuildOptions.network` lets the root file system be built and `RUN` reach the
package registries; `BuildOptions.base="host"` (`$SKYRL_HARBOR_BASE=host`) makes the host's
own system (read-only) every FROM instead, the fallback only a user asks for. `WORKDIR`,
`ENV`, `ARG` and `COPY`/`ADD` of files in `environment/` are
done as written; `RUN` runs once, at build time, in a build sandbox that sees the image's
files at their paths, and what it writes into them (the WORKDIRs, COPY targets, `/tmp`,
`/logs`) is the image's layer, cached by a digest of the Dockerfile and its context
(`image`; the options and the base's root file system are part of the digest). Each
episode gets a private copy of the layer bound at its paths (`Layout`), a
writable `/etc/hosts` of its own (as Docker gives) and the ENTRYPOINT run before each of its
commands (the agent's shell, the oracle, the verifier) in the same sandbox. A step that
cannot be honoured (an unknown base image, a package the system lacks, a network fetch
without the network, a COPY from outside the context, an ENTRYPOINT that fails) is
`Image.problems`: `preflight_line` says it in one line.

Offline verifiers: `apt-get`/`apt` are shims that succeed for packages the system has (the
root file system includes what `apt-get install` lines of the Dockerfile and test.sh name); `curl`
of Astral's uv installer installs a uv fetched ahead of time from PyPI; `uv`/`uvx` run
offline (`UV_OFFLINE`) on wheels of every `NAME==VERSION` pin of `tests/test.sh`, downloaded
ahead of time with pip (`provision`). All of it lives in `cache_root()`.

Attacker-controlled: every file of the task folder. COPY sources must stay inside
`environment/` after symlinks are resolved, nothing is ever written through a symlink of the
layer, and a layer symlink is recreated inside the sandbox (`--symlink`), never bound from
the host.

This module is the image cache and its entry points (`image`, `service_image`, `main_build`,
`preflight_line`); the Dockerfile read as data and the base it starts from are
`harbor_dockerfile`, the episode's layout and the offline kit `harbor_layout`, the build's
steps `harbor_build`. Every name they hold is importable from here too, as before the split.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

# re-exported (noqa): `harbor.X` stays the import path of everything this module held before
# it was split into harbor_dockerfile, harbor_layout and harbor_build
from environments.harbor_build import BUILD_TIMEOUT_S, MAX_CONTEXT_BYTES, NO_BWRAP, _build, _merge  # noqa: F401
from environments.harbor_dockerfile import (  # noqa: F401
    BASE_ENV,
    BUILD_VERSION,
    BuildOptions,
    Image,
    Plan,
    _context_digest,
    _instructions,
    _read_dockerfile,
    _service_dockerfile,
    apt_packages,
    apt_recommends,
    dockerfile_of,
    plan,
)
from environments.harbor_layout import (  # noqa: F401
    KIT,
    OWNED,
    Layout,
    _safe_target,
    cache_root,
    copy_tree,
    episode_env,
    kit_view,
    layer_view,
    own_hosts,
    pip_env,
    provision,
    usual_dirs,
    verifier_needs,
)
from environments.sandbox import Limits, Sandbox

__all__ = [
    "BASE_ENV",
    "KIT",
    "BuildOptions",
    "Image",
    "Layout",
    "cache_root",
    "image",
    "preflight_line",
    "provision",
    "save_build_log",
]


@functools.cache
def _built(
    task_dir: str,
    digest: str,
    options: BuildOptions = BuildOptions(),
    context: str = "",
    dockerfile: str = "",
    service: bool = False,
) -> Image:
    """The image of the task's Dockerfile (or `dockerfile`), built in `context` (default
    environment/; a compose service's when `service`), loaded from the cache or built."""
    where = Path(context) if context else None
    return _load_or_build(
        Path(task_dir), digest, options, where, Path(dockerfile) if dockerfile else None, service
    )


def _load_or_build(
    task_dir: Path,
    digest: str,
    options: BuildOptions = BuildOptions(),
    context: Path | None = None,
    dockerfile: Path | None = None,
    service: bool = False,
) -> Image:
    folder = cache_root() / "images" / digest
    meta = folder / "image.json"
    if meta.is_file():
        data = json.loads(meta.read_text())
        system = data.get("system_root", "")
        if NO_BWRAP not in data.get("problems", []) and (not system or os.path.isdir(system)):
            return _cached(folder, data)
        shutil.rmtree(folder, ignore_errors=True)  # built before bwrap, or its base is gone
    if dockerfile is not None:
        text = _read_dockerfile(dockerfile)
    elif service and context is not None:
        text = _service_dockerfile(context)
    else:
        text = dockerfile_of(task_dir)
    sandbox = Sandbox(Limits(timeout_s=BUILD_TIMEOUT_S, disk_mb=2048, cpu_seconds=600))
    tmp = None
    try:
        image = _build(task_dir, text, digest, sandbox, options, context, service)
        if image.transient:  # about this host's state, not the task: never cached
            return image
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{digest}-"))
        copy_tree(sandbox.workdir / "root", tmp / "layer")
        data = {k: v for k, v in asdict(image).items() if k not in ("layer", "log", "build_log")}
        (tmp / "image.json").write_text(json.dumps(data, indent=1))
        (tmp / "build.log").write_text("".join(f"{line}\n" for line in image.log))
        try:
            tmp.rename(folder)
        except OSError:  # built meanwhile by another process
            shutil.rmtree(tmp, ignore_errors=True)
    except Exception as e:  # one task's failure, never the whole eval's: its pre-flight line
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        why = f"the image could not be built here ({e})"
        return Image(digest=digest, problems=[f"BUILD: {why}"], transient=True)
    finally:
        sandbox.close()
    return _cached(folder, json.loads(meta.read_text()))


def _cached(folder: Path, data: dict[str, Any]) -> Image:
    return Image(**{**data, "layer": str(folder / "layer"), "build_log": str(folder / "build.log")})


def save_build_log(image: Image, dest: Path) -> None:
    """Write the image's build log to `dest/build.log` (`skyrl eval --output`): every
    task's, whether it ran or its build stopped it at pre-flight."""
    dest.mkdir(parents=True, exist_ok=True)
    if image.log:
        text = "".join(f"{line}\n" for line in image.log)
    elif image.build_log and os.path.isfile(image.build_log):
        text = Path(image.build_log).read_text(errors="replace")
    elif image.build_log:
        folder = Path(image.build_log).parent
        text = f"(no build log: {folder} was cached before build logs were kept; delete it to build the image again with one)\n"
    else:
        text = ""
    # each problem once: a step's is in the log already, after the step's output
    text += "".join(f"not as Harbor's image: {p}\n" for p in image.problems if p not in text)
    (dest / "build.log").write_text(text)


def image(task_dir: Path, options: BuildOptions | None = None) -> Image:
    """The task's image: built on first use (cached on disk by digest, the options and the
    base's root file system part of it), with the verifier's downloads provisioned;
    `problems` lists what could not be honoured. `options`: default `BuildOptions.from_kwargs()`."""
    options = options or BuildOptions.from_kwargs()
    task_dir = Path(task_dir).resolve()
    context, dockerfile = main_build(task_dir)
    text = dockerfile_of(task_dir) if dockerfile is None else _read_dockerfile(dockerfile)
    test_sh = task_dir / "tests" / "test.sh"
    verifier = test_sh.read_text(errors="replace") if test_sh.is_file() else ""
    start = plan(task_dir, text, options)
    uses_uv = start.base is not None and any(p.endswith("/uv") for p, _ in start.base.scripts)
    extra = provision(verifier + ("\nuv\n" if uses_uv else ""))  # the uv image's uv: the kit's
    salt = f"{_context_digest(context, text)}\0{start.key()}\0{options.network}"
    digest = hashlib.sha256(salt.encode()).hexdigest()[:32]
    built = _built(str(task_dir), digest, options, str(context), str(dockerfile or ""))
    from environments import harbor_compose  # it builds its services with this module

    extra += harbor_compose.preflight(task_dir, options)
    if extra:
        built = Image(**{**asdict(built), "problems": [*built.problems, *extra]})
    return built


def stand_in(task_dir: Path, options: BuildOptions | None = None) -> str:
    """How what stands in for the task's FROM differs from the real image ('' where it is
    the image, or the host): the cause a 0 may have that no log of the task shows."""
    task_dir = Path(task_dir).resolve()
    _, dockerfile = main_build(task_dir)
    text = dockerfile_of(task_dir) if dockerfile is None else _read_dockerfile(dockerfile)
    base = plan(task_dir, text, options or BuildOptions()).base
    return base.note if base is not None else ""


def short_of(task_dir: Path) -> str:
    """Where task.toml's `[environment]` asks for more CPUs or memory than this machine has
    ('' where it does not): a cause a timed verifier's 0 may have that no log shows."""
    import tomllib

    try:
        env = tomllib.loads((Path(task_dir) / "task.toml").read_text()).get("environment", {})
    except (OSError, tomllib.TOMLDecodeError):
        return ""
    cpus, mb = (
        len(os.sched_getaffinity(0)),
        os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20,
    )
    asks, has = [], []
    if float(env.get("cpus", 0)) > cpus:
        asks.append(f"{float(env['cpus']):.10g} CPUs")
        has.append(f"{cpus} CPUs")
    if float(env.get("memory_mb", 0)) > mb:
        asks.append(f"{float(env['memory_mb']):.10g} MB of memory")
        has.append(f"{mb} MB of memory")
    if not asks:
        return ""
    return (
        f"the task asks for {' and '.join(asks)}, this machine has {' and '.join(has)}; "
        "timings and limits may not hold"
    )


def main_build(task_dir: Path) -> tuple[Path, Path | None]:
    """The context and Dockerfile that the task's compose file builds `main` from (default:
    environment/ and the task's Dockerfile, None); a compose file that cannot be read here
    changes nothing (its pre-flight sentence says why)."""
    from environments import harbor_compose

    try:
        compose = harbor_compose.read(task_dir)
    except harbor_compose.ComposeError:
        compose = None
    if compose is None or compose.main.context is None:
        return task_dir / "environment", None
    return compose.main.context, compose.main.dockerfile


def service_image(task_dir: Path, context: Path, options: BuildOptions | None = None) -> Image:
    """The image of a compose service built from `context` (a folder of `environment/` with
    its Dockerfile), by the same builder and cache as the task's own; its CMD kept, its
    ENTRYPOINT not probed (the service's healthcheck tells whether it runs)."""
    options = options or BuildOptions.from_kwargs()
    task_dir = Path(task_dir).resolve()
    text = _service_dockerfile(context)
    start = plan(task_dir, text, options)
    salt = f"service\0{_context_digest(context, text)}\0{start.key()}\0{options.network}"
    digest = hashlib.sha256(salt.encode()).hexdigest()[:32]
    return _built(str(task_dir), digest, options, str(context), service=True)


def preflight_line(task_id: str, img: Image) -> str | None:
    """One line naming the steps of a task's image that cannot be honoured here, or None."""
    if not img.problems:
        return None
    return f"{task_id}: cannot run as Harbor would: " + "; ".join(img.problems)
