"""The build of a Harbor image's layer, step by step (`_build`): the base's root file system
under the build sandbox (`_start_from`), COPY/ADD from the build context (never outside it
after symlinks are resolved, never through a symlink of the layer), RUN in the build sandbox,
ENTRYPOINT probed once. What cannot be honoured is a problem of the `Image`, one clause each.
`environments.harbor` caches the result.
"""

from __future__ import annotations

import contextlib
import filecmp
import json
import os
import posixpath
import re
import shlex
import shutil
import stat
from pathlib import Path, PurePosixPath

from environments.base_images import from_words
from environments.bash import chown_tree
from environments.harbor_dockerfile import (
    _TOP_WRITE,
    BuildOptions,
    Image,
    Plan,
    _expand,
    _instructions,
    _pairs,
    _words,
    plan,
)
from environments.harbor_layout import (
    OWNED,
    _copy_missing,
    _on,
    _safe_target,
    copy_tree,
    episode_env,
    kit_view,
    layer_view,
    own_hosts,
    usual_dirs,
)
from environments.rootfs import RootfsError, ensure_rootfs
from environments.sandbox import HIDDEN_DIRS, HOST_TRUST, PATH, SYSTEM_DIRS, Sandbox

BUILD_TIMEOUT_S = 600.0


NO_BWRAP = "every step: bubblewrap is missing, so Harbor's paths cannot be made"
"""The one problem that is the host's, not the task's: an image with it is never cached."""


PROBE_S = 1.5
"""How long the ENTRYPOINT probe lets the entrypoint run before its command exits."""


MAX_CONTEXT_BYTES = 64 * 1024 * 1024


_OFFLINE = re.compile(
    r"No matching distribution|Could not resolve|Temporary failure in name resolution|"
    r"Network is unreachable|Failed to establish a new connection|Could not fetch URL|"
    r"ERR! network|Failed to fetch|dial tcp|getaddrinfo"
)
"""What a download that found no network says (pip, apt, npm, go, curl)."""


def _copy_step(
    args: str,
    variables: dict[str, str],
    context: Path,
    root: Path,
    workdir: str,
    stages: tuple[list[str], str] = ([], ""),
) -> str | None:
    """Do one COPY/ADD into the layer at root; None, or why it cannot be honoured.
    `stages`: the names of the stages before this one, and the base's root file system
    ('' for the host's), for `COPY --from=STAGE`."""
    words = _words(args) or shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    words = [_expand(w, variables) for w in words if not w.startswith("--")]
    if len(words) < 2:
        return "names no source and destination"
    *sources, dest = words
    dest_inner = dest if dest.startswith("/") else posixpath.join(workdir, dest)
    source_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
    if source_stage is not None:
        names, system = stages
        if source_stage.lower() not in names and not (
            source_stage.isdigit() and int(source_stage) < len(names)
        ):
            return (
                f"copies from the image {source_stage}, which is not built here (only an "
                "earlier stage of this Dockerfile can be copied from)"
            )
        return _copy_from_stage(sources, dest, dest_inner, root, system)
    ctx = context.resolve()
    named = f"{ctx.name}/"  # environment/, or the folder the compose file builds main in
    matched: list[tuple[str, Path]] = []
    for source in sources:
        if re.match(r"^[a-z]+://", source):
            return f"fetches {source} from the network"
        pattern = source.lstrip("/")
        if not re.search(r"[*?[]", pattern):
            matched.append((source, ctx / pattern))
            continue
        # Docker's wildcards (Go's filepath.Match): each match is a source of its own
        hits = sorted(ctx.glob(pattern)) if pattern not in ("", ".") else []
        if not hits:
            return f"{source} matches no file in {named}"
        matched += [(source, hit) for hit in hits]
    for source, path in matched:
        found = path.resolve()
        if not found.is_relative_to(ctx):
            return f"{source} is outside {named} (the build context)"
        if not found.exists():
            return f"{source} is not in {named}"
        into_dir = dest.endswith("/") or len(matched) > 1 or found.is_dir()
        target_inner = (
            posixpath.join(dest_inner, found.name) if into_dir and found.is_file() else dest_inner
        )
        if not found.is_dir() and _safe_target(root, target_inner).is_dir():
            target_inner = posixpath.join(target_inner, found.name)
        _merge(found, root, target_inner)
    return None


def _copy_from_stage(
    sources: list[str], dest: str, dest_inner: str, root: Path, system: str
) -> str | None:
    """`COPY --from=STAGE`: every stage's steps ran in this one layer over one base, so the
    stage's files are the layer's (or, under it, the base root file system's; never the
    host's own files). Paths are from the stage's `/`; a link on the way is refused."""
    for source in sources:
        inner = posixpath.normpath("/" + source)
        try:
            found = _safe_target(root, inner)
        except ValueError:
            return f"{source} goes through a symlink of the stage"
        if not os.path.lexists(found) and system:
            found = Path(_on(system, inner))
            if any(Path(_on(system, p)).is_symlink() for p in _parents(inner)):
                return f"{source} goes through a symlink of the base image"
        if not os.path.lexists(found):
            return f"{source} is not in the stage (the earlier stages' steps made no such file)"
        into_dir = dest.endswith("/") or len(sources) > 1
        target = (
            posixpath.join(dest_inner, found.name)
            if into_dir and not found.is_dir()
            else dest_inner
        )
        if not found.is_dir() and _safe_target(root, target).is_dir():
            target = posixpath.join(target, found.name)
        _merge(found, root, target)
    return None


def _parents(inner: str) -> list[str]:
    """`/a/b/c` -> `/a`, `/a/b`: the folders on the way to a path."""
    parts = PurePosixPath(inner).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _merge(source: Path, root: Path, inner: str) -> None:
    """Copy `source` (a file or a folder's contents) to `inner` of the layer at root, each
    path checked for symlinks of the layer first (a RUN may have planted one)."""
    _safe_target(root, posixpath.dirname(inner)).mkdir(parents=True, exist_ok=True)
    if not source.is_dir():
        shutil.copy2(source, _safe_target(root, inner), follow_symlinks=False)
        return
    _safe_target(root, inner).mkdir(parents=True, exist_ok=True)
    for folder, dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source).as_posix()
        for name in dirs + files:
            src = Path(folder) / name
            dest = _safe_target(root, posixpath.join(inner, rel, name))
            if src.is_symlink():
                if dest.exists() or dest.is_symlink():
                    dest.unlink()
                os.symlink(os.readlink(src), dest)
            elif src.is_dir():
                dest.mkdir(exist_ok=True)
            else:
                shutil.copy2(src, dest, follow_symlinks=False)
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]


def _check_context(context: Path) -> str | None:
    total = 0
    for folder, _, files in os.walk(context):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return (
        f"{context.name}/ (the build context) is over {MAX_CONTEXT_BYTES >> 20} MB"
        if total > MAX_CONTEXT_BYTES
        else None
    )


def _start_from(plan_: Plan, options: BuildOptions, sandbox: Sandbox, image: Image) -> None:
    """Put the base image's root file system under the build sandbox and its conventions
    (`/usr/local`, shims, ENV, WORKDIR) into the layer; a problem when it cannot be built."""
    base, spec = plan_.base, plan_.spec
    if base is None or spec is None:
        return
    log: list[str] = []
    try:
        system = ensure_rootfs(spec, network=options.network, log=log)
    except RootfsError as e:
        image.problems.append(
            f"FROM {base.image}: {e}"
            + (
                ""
                if options.network
                else " (allow it with --build-network, or env.kwargs.build_network=true)"
            )
        )
        image.transient = True
        return
    image.system_root = str(system)
    sandbox.system_root = system
    sandbox.network = options.network
    root = sandbox.workdir / "root"
    for inner in OWNED:  # the image's own, as the layer's (a `RUN pip install`, `/opt/x`)
        if (system / inner.lstrip("/")).is_dir():
            shutil.copytree(system / inner.lstrip("/"), _safe_target(root, inner), symlinks=True)
    if not os.path.lexists(system / "etc" / "hosts"):  # a mount point for `own_hosts`
        _safe_target(root, "/etc").mkdir(parents=True, exist_ok=True)
        _safe_target(root, "/etc/hosts").write_text("127.0.0.1\tlocalhost\n")
    for inner in (*OWNED, *base.dirs):
        _safe_target(root, inner).mkdir(parents=True, exist_ok=True)
    for inner, target in base.links:
        link = _safe_target(root, inner)
        link.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(link):
            os.symlink(target, link)
    for inner, text, mode in [
        *((p, t, 0o755) for p, t in base.scripts),
        *((p, t, 0o644) for p, t in base.files),
    ]:
        path = _safe_target(root, inner)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
    image.env.update(dict(base.env))
    if base.workdir != "/":
        image.workdir = base.workdir


def _build(
    task_dir: Path,
    text: str,
    digest: str,
    sandbox: Sandbox,
    options: BuildOptions | None = None,
    context: Path | None = None,
    service: bool = False,
) -> Image:
    """Build into sandbox.workdir/root (the caller caches it and closes the sandbox);
    `context`: the build context instead of `environment/` (the compose file's), `service`
    when it is a compose service's (its ENTRYPOINT is not probed)."""
    options = options or BuildOptions()
    image = Image(digest=digest)
    context = context or task_dir / "environment"
    variables: dict[str, str] = {}
    root = sandbox.workdir / "root"
    root.mkdir()
    if sandbox.backend != "bwrap":
        image.problems.append(NO_BWRAP)
        image.transient = True
        return image
    sandbox.mount_workdir = False
    sandbox.address_space = False  # `RUN npm install`: V8 reserves more than it uses
    start = plan(task_dir, text, options)
    if start.problem:
        image.problems.append(start.problem)
        image.log.append(start.problem)
        return image
    if start.base is None:
        image.log.append("base: this machine's own system (env.kwargs.base=host)")
    else:
        note = f" ({start.base.note})" if start.base.note else ""
        image.log.append(
            f"base: {start.base.image}, Debian {start.base.release}'s root file system{note}"
        )
    _start_from(start, options, sandbox, image)
    if image.problems:
        return image
    too_big = _check_context(context) if context.is_dir() else None
    if too_big:
        image.problems.append(f"COPY: {too_big}")
        return image
    stages: list[str] = []
    for n, (word, args) in enumerate(_instructions(text), 1):
        step = f"{word} {args}"  # whole: a pre-flight reason is never cut
        image.log.append(f"#{n} {step}")
        problems = len(image.problems)
        if word == "FROM":
            stages.append((from_words(_expand(args, variables))[1] or str(len(stages))).lower())
        elif word == "WORKDIR":
            image.workdir = posixpath.normpath(
                posixpath.join(image.workdir, _expand(args, variables))
            )
            _safe_target(root, image.workdir).mkdir(parents=True, exist_ok=True)
        elif word in ("ENV", "ARG"):
            # `${PATH}` is the image's PATH, which Docker's base images all set
            known = {"PATH": PATH, **variables, **image.env}
            pairs = {k: _expand(v, known) for k, v in _pairs(args).items()}
            if word == "ENV":
                image.env.update(pairs)
            variables.update(pairs)
        elif word in ("COPY", "ADD"):
            try:
                earlier = (stages[:-1], image.system_root)
                why = _copy_step(
                    args, {**variables, **image.env}, context, root, image.workdir, earlier
                )
            except (OSError, ValueError, shutil.Error) as e:
                why = str(e)
            if why:
                image.problems.append(f"{step}: {why}")
        elif word == "RUN":
            why = _run_step(sandbox, root, image, args, options)
            if why:
                image.problems.append(f"{step}: {why}")
        elif word in ("ENTRYPOINT", "CMD"):
            form = _words(args)
            command = form if form is not None else ["/bin/sh", "-c", args]
            if word == "ENTRYPOINT":
                image.entrypoint, image.command = command, []  # Docker's: it resets CMD
            else:
                image.command = command
        elif word not in (
            "LABEL",
            "EXPOSE",
            "USER",
            "HEALTHCHECK",
            "STOPSIGNAL",
            "VOLUME",
            "MAINTAINER",
            "SHELL",
        ):
            image.problems.append(f"{step}: {word} is not supported")
        image.log += [f"#{n} not as Harbor's image: {p}" for p in image.problems[problems:]]
    if image.entrypoint and not service:  # a service's is its server: its healthcheck says
        why = _probe_entrypoint(sandbox, root, image)
        if why:
            image.problems.append(f"ENTRYPOINT {json.dumps(image.entrypoint)}: {why}")
    if image.system_root and (root / "etc").is_dir():
        _drop_unchanged(root / "etc", Path(image.system_root) / "etc")
    return image


def _drop_unchanged(layer: Path, base: Path) -> None:
    """Remove from the layer's folder what is as the base's (same bytes and mode, the same
    link, an empty folder the base has): an episode copies those from the base with their
    owners (a service's config stays its user's), and the layer keeps what RUN changed."""
    for folder, dirs, files in os.walk(layer, topdown=False):
        rel = os.path.relpath(folder, layer)
        for name in [*files, *dirs]:
            path, original = Path(folder) / name, base / rel / name
            if path.is_symlink():
                if original.is_symlink() and os.readlink(path) == os.readlink(original):
                    path.unlink()
            elif path.is_dir():
                if original.is_dir() and not original.is_symlink() and not any(path.iterdir()):
                    path.rmdir()
            elif (
                path.is_file()
                and original.is_file()
                and not original.is_symlink()
                and stat.S_IMODE(path.stat().st_mode) & 0o777
                == stat.S_IMODE(original.stat().st_mode) & 0o777
                and filecmp.cmp(path, original, shallow=False)
            ):
                path.unlink()


def _prepare_run(sandbox: Sandbox, root: Path, image: Image, network: bool = False) -> None:
    usual_dirs(root)  # /tmp first, as the image's (mode 1777)
    for inner in (image.workdir, "/logs/agent", "/logs/verifier"):
        _safe_target(root, inner).mkdir(parents=True, exist_ok=True)
    base = image.system_root or "/"
    # root inside, as `docker build` runs RUN: over a built root file system only, with the
    # image's /etc in the layer (`useradd`); what RUN leaves unchanged is dropped at the end
    private = ("/etc",) if image.system_root and sandbox.own_users() else ()
    for inner in private:
        _copy_missing(Path(_on(base, inner)), _safe_target(root, inner))
    chown_tree(root, sandbox.uid)
    sandbox.view = [*layer_view(root, base, private), *own_hosts(sandbox), *kit_view(base)]
    sandbox.inner_workdir = image.workdir
    sandbox.env = episode_env(image)
    if network:  # a build with the registries: pip and uv reach their indexes, as in Docker
        for key in ("PIP_NO_INDEX", "UV_OFFLINE", "UV_NO_INDEX"):
            sandbox.env.pop(key, None)
        trusted = [
            f
            for f in HOST_TRUST
            if f != "/etc/hosts" and os.path.exists(f) and os.path.exists(_on(base, f))
        ]
        if base != "/":  # the host's name service and CA bundle, over a layer's own /etc too
            sandbox.view += [arg for f in trusted for arg in ("--ro-bind", f, f)]
        sandbox.env.update(_trust_env(trusted, sandbox.env))


TRUST_VARIABLES = ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO")
"""The host's own CA settings a networked RUN is given where they name the bound bundle."""


def _trust_env(trusted: list[str], env: dict[str, str]) -> dict[str, str]:
    """The CA bundle the host trusts, for the tools of a networked RUN that carry their own
    (a pip from PyPI reads certifi's, not the system's: behind a TLS proxy, `pip install
    --upgrade pip` and the next install fails), and the host's own CA variables that name
    it; never over the image's ENV."""
    bundle = next((f for f in trusted if f.endswith(".crt")), None)
    if bundle is None:
        return {}
    given = {"PIP_CERT": bundle, "REQUESTS_CA_BUNDLE": bundle}
    given |= {k: bundle for k in TRUST_VARIABLES if os.environ.get(k) == bundle}
    return {k: v for k, v in given.items() if k not in env}


def _run_step(
    sandbox: Sandbox, root: Path, image: Image, args: str, options: BuildOptions
) -> str | None:
    form = _words(args)
    command = form if form is not None else ["/bin/sh", "-c", args]
    if form is None:
        _top_files(root, args)
    _prepare_run(sandbox, root, image, network=options.network and sandbox.network)
    result = sandbox.run(command, timeout=BUILD_TIMEOUT_S, tail=True)  # no cap, as docker build
    sandbox.kill_all()
    image.log += [result.stdout.rstrip("\n")] if result.stdout.strip() else []
    image.log += ["--- stderr ---", result.stderr.rstrip("\n")] if result.stderr.strip() else []
    timed_out = ", timed out" if result.timed_out else ""
    image.log.append(f"(exit {result.returncode}{timed_out})")
    if result.returncode == 0:
        failed = [ln.strip() for ln in f"{result.stdout}\n{result.stderr}".splitlines()]
        failed = [ln for ln in failed if _OFFLINE.search(ln)]
        if failed:
            image.hidden_failures.append(
                f"RUN {' '.join(args.split())}: exited 0, but a download in it failed: {failed[-1]}"
            )
        return None
    last = _last_error(result.stderr) or _last_error(result.stdout)
    why = (
        f"failed here (exit {result.returncode}): {last}"
        if last
        else (f"failed here (exit {result.returncode}, no output)")
    )
    if _OFFLINE.search(f"{result.stdout}\n{result.stderr}"):
        why += (
            " (the build sandbox has no network, so nothing can be downloaded at build time; "
            "--build-network allows it)"
            if not sandbox.network
            else " (a download failed although the build had the network)"
        )
    return why


_ERROR_LINE = re.compile(
    r"^(?:ERROR|Error|error|E:|fatal|FATAL|npm ERR!|[\w.]*(?:Error|Exception)\b)"
)
"""A tool's own error line: pip's `ERROR: ...`, apt's `E: ...`, npm's, a Python exception."""


def _last_error(text: str) -> str:
    """The last error line of a tool's output, whole (pip's `ERROR:` line, not the notices
    it prints after it), else its last line, else ''."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERROR_LINE.match(ln)]
    return (errors or lines or [""])[-1]


def _top_files(root: Path, args: str) -> None:
    """Make the files a RUN's shell writes at the top of the image (`printf ... >
    /entrypoint.sh`) in the layer first, so they are bound into the build sandbox and kept
    (the sandbox's `/` is not the layer's; a new file there would be lost)."""
    for m in _TOP_WRITE.finditer(args):
        inner = m.group(1)
        if inner in (*SYSTEM_DIRS, *HIDDEN_DIRS, "/dev", "/proc", "/sys"):
            continue  # no top-level file of the base is in the sandbox's view: only these
        path = _safe_target(root, inner)
        if not os.path.lexists(path):
            path.touch()


def _probe_entrypoint(sandbox: Sandbox, root: Path, image: Image) -> str | None:
    """Start the ENTRYPOINT with a short command, on a throwaway copy of the layer (what it
    writes is no part of the image): None, or what it said when it failed."""
    probe_root = sandbox.workdir / "probe"
    copy_tree(root, probe_root)
    _prepare_run(sandbox, probe_root, image)
    sandbox.network = False
    sandbox.own_network()  # as the episode will have it (root: ports below 1024)
    probe = [*image.entrypoint, "/bin/sh", "-c", f"sleep {PROBE_S}"]
    result = sandbox.run(probe, timeout=PROBE_S + 30)
    sandbox.kill_all()
    shutil.rmtree(probe_root, ignore_errors=True)
    text = f"{result.stdout}\n{result.stderr}"
    errors = [ln for ln in text.splitlines() if re.search(r"Error|error:|denied|not found", ln)]
    if result.returncode != 0 or errors:
        why = errors[-1].strip() if errors else f"exit {result.returncode}"
        return f"fails here: {why}{_culprit(text)}"
    return None


def _culprit(text: str) -> str:
    """` (at FILE line N: CODE)` for the last frame of a Python traceback in `text` that is
    not the standard library's (which step of the task failed), else ''."""
    lines = text.splitlines()
    frames = [
        (m.group(1), m.group(2), lines[i + 1].strip() if i + 1 < len(lines) else "")
        for i, line in enumerate(lines)
        if (m := re.match(r'\s*File "([^"]+)", line (\d+)', line))
        and not m.group(1).startswith(("/usr/lib/", "<"))
    ]
    if not frames:
        return ""
    path, number, code = frames[-1]
    return f" (at {path} line {number}: {code})"
