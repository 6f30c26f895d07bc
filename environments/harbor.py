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
"""

from __future__ import annotations

import contextlib
import filecmp
import functools
import hashlib
import json
import os
import posixpath
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from environments.base_images import Base, base_for, final_base, from_words, spec_of
from environments.bash import chown_tree
from environments.rootfs import RootfsError, RootfsSpec, ensure_rootfs
from environments.sandbox import HIDDEN_DIRS, HOST_TRUST, PATH, SYSTEM_DIRS, Limits, Sandbox

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
]

BUILD_VERSION = "10"
"""Part of every image digest: bump when the build's meaning changes."""
KIT = "/.skyrl-offline"
"""Where the offline kit (shims, uv, wheels) appears inside a sandbox."""
DEFAULT_UV = "0.9.7"
"""The uv a `https://astral.sh/uv/install.sh` without a version gets."""
BUILD_TIMEOUT_S = 600.0
NO_BWRAP = "every step: bubblewrap is missing, so Harbor's paths cannot be made"
"""The one problem that is the host's, not the task's: an image with it is never cached."""
PROBE_S = 1.5
"""How long the ENTRYPOINT probe lets the entrypoint run before its command exits."""
MAX_CONTEXT_BYTES = 64 * 1024 * 1024
_PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[\w,.-]+\])?)==([0-9][\w.+!-]*)")
_OFFLINE = re.compile(
    r"No matching distribution|Could not resolve|Temporary failure in name resolution|"
    r"Network is unreachable|Failed to establish a new connection|Could not fetch URL|"
    r"ERR! network|Failed to fetch|dial tcp|getaddrinfo"
)
"""What a download that found no network says (pip, apt, npm, go, curl)."""
_HEREDOC = re.compile(r"<<-?(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
"""A heredoc of a RUN line: its delimiter word (group 2)."""
_TOP_WRITE = re.compile(
    r"(?:>>?|\btee\s+(?:-a\s+)?)\s*(/[A-Za-z0-9_][A-Za-z0-9._-]*)(?=$|[\s;&|)])"
)
"""A RUN's shell writing a file at the top of the image (`> /entrypoint.sh`)."""
_UV_URL = re.compile(r"https?://astral\.sh/uv/(?:([0-9][\w.]*)/)?install\.sh")
_APT_INSTALL = re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\s+([^;&|<>()\n]+)")
BASE_ENV = "SKYRL_HARBOR_BASE"
"""`host`: every task's `FROM` is this machine's own system (the fallback a user asks for);
unset or `image`: the root file system the table of base images gives."""
OWNED = ("/usr/local", "/opt")
"""Over a base image's root file system, these folders are the layer's, bound whole and
writable during the build (a `RUN pip install` writes there, a tool unpacks into `/opt`, as
in the image)."""


@dataclass(frozen=True)
class BuildOptions:
    """How a task's image is built."""

    network: bool = False
    """RUN steps, and building a base image's root file system, may use the network
    (as `docker build` reaches the package registries)."""
    base: str = "image"
    """`image`: FROM is the root file system the table of base images gives; `host`: this
    machine's own system stands for every FROM."""

    @classmethod
    def from_kwargs(
        cls, network: bool | str | None = None, base: str | None = None
    ) -> BuildOptions:
        """Options from env.kwargs (strings from `--set` too), `$SKYRL_HARBOR_BASE` the
        default of `base`; ValueError (one sentence) for a value it does not know."""
        chosen = base or os.environ.get(BASE_ENV) or "image"
        if chosen not in ("image", "host"):
            raise ValueError(f"unknown Harbor base {chosen!r}; known: image, host")
        if isinstance(network, str):
            if network.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"build_network must be true or false, got {network!r}")
            network = network.lower() in ("1", "true", "yes", "on")
        return cls(network=bool(network), base=chosen)


def cache_root() -> Path:
    """`$SKYRL_HARBOR_CACHE`, else `skyrl-harbor-<uid>` in the temp dir: a folder the
    sandbox's uid can read (a home folder is often mode 0700). Refused when someone else
    owns it or may write it."""
    env = os.environ.get("SKYRL_HARBOR_CACHE")
    root = Path(env) if env else Path(tempfile.gettempdir()) / f"skyrl-harbor-{os.geteuid()}"
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ValueError(f"the Harbor cache {root} is not a folder of ours that only we may write")
    root.chmod(0o755)
    if os.geteuid() == 0:  # sandboxes run as uids of their own, which own none of its parents
        shut = next((p for p in root.resolve().parents if not p.stat().st_mode & 0o001), None)
        if shut is not None:
            raise ValueError(
                f"the Harbor cache {root} is inside {shut} (mode "
                f"{stat.S_IMODE(shut.stat().st_mode):04o}), which the sandbox's user cannot "
                f"enter: set SKYRL_HARBOR_CACHE to a folder outside it (the default, "
                f"{Path(tempfile.gettempdir()) / 'skyrl-harbor-<uid>'}, works) or let others "
                f"enter it (chmod o+x {shut})"
            )
    return root


# ---------------------------------------------------------------------------- the Dockerfile


@dataclass
class Image:
    """What a built Dockerfile gives an episode."""

    digest: str
    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    """The Dockerfile's CMD (what a compose service runs after the ENTRYPOINT)."""
    problems: list[str] = field(default_factory=list)
    """Steps not honoured here, each `STEP: why` (empty: the image is as Harbor's)."""
    layer: str = ""
    """Host folder of the built layer (paths below it are paths from the sandbox's root)."""
    system_root: str = ""
    """Host folder of the root file system standing in for FROM ('': the host's system)."""
    transient: bool = False
    """A problem of this machine's state (no bubblewrap, a base not built offline): never
    cached."""


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped;
    a RUN's heredocs (BuildKit's `RUN python3 - <<'EOF'` ... `EOF`) kept in its arguments,
    lines as written, for the shell that runs it."""
    steps: list[tuple[str, str]] = []
    current = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        rest = rest.strip()
        if word.upper() == "RUN":
            for m in _HEREDOC.finditer(rest):
                body = []
                while i < len(lines) and lines[i].strip() != m.group(2):
                    body.append(lines[i])
                    i += 1
                i += 1
                rest += "\n" + "\n".join(body) + "\n" + m.group(2)
        steps.append((word.upper(), rest))
        current = ""
    if current.strip():
        word, _, rest = current.strip().partition(" ")
        steps.append((word.upper(), rest.strip()))
    return steps


def _expand(text: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, "")

    return re.sub(r"\$\{(\w+)(?::-[^}]*)?\}|\$(\w+)", sub, text)


def _words(args: str) -> list[str] | None:
    """The exec form (`["a", "b"]`) as a list, or None for the shell form."""
    if args.startswith("["):
        with contextlib.suppress(ValueError):
            value = json.loads(args)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
    return None


def _pairs(args: str) -> dict[str, str]:
    """ENV/ARG arguments: `K=V K2="V 2"` or the old `K V`."""
    if "=" not in args.split(" ", 1)[0]:
        key, _, value = args.partition(" ")
        return {key: value.strip()}
    out = {}
    for token in shlex.split(args):
        key, _, value = token.partition("=")
        out[key] = value
    return out


def _context_digest(env_dir: Path, dockerfile: str) -> str:
    h = hashlib.sha256(f"{BUILD_VERSION}\0{dockerfile}\0".encode())
    if _HEREDOC.search(dockerfile):  # read line by line before heredocs were: built anew
        h.update(b"heredocs\0")
    if _TOP_WRITE.search(dockerfile):  # such a file was lost before `_top_files`: built anew
        h.update(b"top files\0")
    for folder, dirs, files in os.walk(env_dir):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
            path = Path(folder) / name
            rel = path.relative_to(env_dir).as_posix()
            st = path.lstat()
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(path.read_bytes())
    return h.hexdigest()[:32]


def dockerfile_of(task_dir: Path) -> str:
    """The task's Dockerfile, or the one a folder of skyrl's older form implies
    (`environment/files/` copied to /app, `environment/setup.sh` run there)."""
    path = task_dir / "environment" / "Dockerfile"
    if path.is_file() and not path.is_symlink():
        return path.read_text(encoding="utf-8", errors="replace")
    lines = ["FROM host", "WORKDIR /app"]
    if (task_dir / "environment" / "files").is_dir():
        lines.append("COPY files/ /app/")
    if (task_dir / "environment" / "setup.sh").is_file():
        lines += ["COPY setup.sh /tmp/setup.sh", "RUN bash /tmp/setup.sh && rm /tmp/setup.sh"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the layout


def _on(base: str, path: str) -> str:
    """`path` of the root file system at `base` (the host's `/`, or a base image's)."""
    return path if base == "/" else os.path.join(base, path.lstrip("/"))


def _shown(path: str) -> bool:
    """True when `path` exists in a bare sandbox's view (a host system dir, read-only)."""
    parts = PurePosixPath(path).parts
    if len(parts) < 2 or f"/{parts[1]}" not in SYSTEM_DIRS:
        return False
    return not any(path == d or path.startswith(d + "/") for d in HIDDEN_DIRS)


def layer_view(root: Path, base: str = "/", private: tuple[str, ...] = ()) -> list[str]:
    """bwrap arguments that show the layer at `root` at its paths over the system at `base`
    (the host's `/`, or a base image's root file system, whose `OWNED` folders are the
    layer's).

    A new entry in a system dir (`/etc/x`) shadows that dir with a tmpfs holding the system's
    entries (read-only) and the layer's; an entry that is new at the top, or under a
    sandbox tmpfs (`/tmp`), is bound whole. Layer symlinks are made inside the sandbox.
    `private` folders (`/etc` of an episode that is root inside) are the layer's, bound whole,
    as `OWNED` ones."""
    args: list[str] = []
    owned = (*OWNED, *private) if base != "/" else ()

    def walk(rel: str) -> None:
        here = root / rel.lstrip("/")
        names = sorted(os.listdir(here))
        system = _on(base, rel)
        if rel != "/" and _shown(rel) and any(not os.path.lexists(f"{system}/{n}") for n in names):
            args.extend(["--tmpfs", rel])
            for name in sorted(os.listdir(system)):
                host, inner = f"{system}/{name}", f"{rel}/{name}"
                if name in names:
                    continue
                if os.path.islink(host):
                    args.extend(["--symlink", os.readlink(host), inner])
                elif os.path.isdir(host) or os.path.isfile(host):
                    args.extend(["--ro-bind", host, inner])
        for name in names:
            src, dest = here / name, posixpath.join(rel, name)
            if src.is_symlink():
                if not os.path.lexists(_on(base, dest)):
                    args.extend(["--symlink", os.readlink(src), dest])
            elif src.is_dir() and dest in owned:
                args.extend(["--bind", str(src), dest])
            elif src.is_dir() and _shown(dest) and os.path.isdir(_on(base, dest)):
                walk(dest)
            elif src.is_dir() or src.is_file():
                args.extend(["--bind", str(src), dest])

    walk("/")
    return args


def _safe_target(root: Path, inner: str) -> Path:
    """root/inner for writing, refusing any symlink on the way (a layer link to the host)."""
    parts = PurePosixPath(posixpath.normpath("/" + inner)).parts[1:]
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise ValueError(f"{inner} goes through a symlink of the image")
    return path


@dataclass
class Layout:
    """One episode's private copy of an image, bound at its paths in `sandbox`."""

    image: Image
    sandbox: Sandbox
    join_net: int | None = None
    """A process whose network namespace the episode's commands join (a compose sidecar
    joins its episode's); None: a network namespace of the sandbox's own."""

    def __post_init__(self) -> None:
        sb = self.sandbox
        if sb.backend != "bwrap":
            raise ValueError(
                "Harbor tasks need bubblewrap (Debian package `bubblewrap`) for their paths "
                "(/app, /logs, /tests); the fallback sandbox has none"
            )
        self.root = sb.workdir / "root"
        shutil.copytree(self.image.layer, self.root, symlinks=True)
        for inner in (self.image.workdir, "/logs/agent", "/logs/verifier"):
            _safe_target(self.root, inner).mkdir(parents=True, exist_ok=True)
        usual_dirs(self.root)
        base = self.image.system_root or "/"
        # root inside, as in the image's container: over a built root file system only (the
        # host's own /etc is never copied), with a private /etc to add users to
        private = ("/etc",) if self.image.system_root and sb.own_users() else ()
        copied = []
        for inner in ("/etc", "/var") if private else ():  # the image's, as apt left them
            source, skip = Path(_on(base, inner)), ("lib/dpkg",)  # dpkg's: bound read-only
            copied += _copy_missing(source, _safe_target(self.root, inner), skip)
        chown_tree(sb.workdir, sb.uid)
        for path, uid, gid, mode in copied:  # their owners inside as in the image (redis:redis)
            os.lchown(path, sb.host_id(uid) or -1, sb.host_id(gid) or -1)
            if not path.is_symlink():
                path.chmod(mode)  # chown cleared set-id bits
        sb.mount_workdir = False
        sb.address_space = False  # node, Go, the JVM: the memory cgroup bounds the episode
        sb.system_root = Path(base) if self.image.system_root else None
        sb.view = [*layer_view(self.root, base, private), *own_hosts(sb), *kit_view(base)]
        sb.inner_workdir = self.image.workdir
        sb.env = episode_env(self.image)
        sb.entrypoint = list(self.image.entrypoint)
        if self.join_net is not None:  # a sidecar, on its episode's loopback
            sb.join_net = self.join_net
        else:
            sb.own_network()  # one network for the episode, as a container's (root: ports < 1024)

    def private(self, name: str, source: Path, sealed: str | None = None) -> list[str]:
        """A copy of `source` (tests/, solution/) bound at `/name` for one command; `sealed`,
        a file of it (`/tests/test.sh`), executable and bound read-only on top, so that code
        it runs cannot rewrite the script under the shell reading it."""
        dest = self.sandbox.workdir / f"{name}-copy"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(source, dest, symlinks=True)
        chown_tree(dest, self.sandbox.uid)
        view = ["--bind", str(dest), f"/{name}"]
        if sealed is not None:
            host = _safe_target(dest, posixpath.relpath(sealed, f"/{name}"))
            if host.is_file():
                host.chmod(0o755)
                view += ["--ro-bind", str(host), sealed]
        return view

    def fresh_dir(self, inner: str) -> Path:
        """The host path of the layer dir `inner`, made anew and empty when the verifier
        starts: whatever the agent left there (reward files, links it would write through,
        FIFOs) is gone."""
        parent = _safe_target(self.root, posixpath.dirname(inner))
        path = parent / posixpath.basename(inner)
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        chown_tree(path, self.sandbox.uid)
        return path

    def collect(self, inner: str) -> Path:
        """The host path of the layer dir `inner` after a command wrote it (a link there,
        which the command may have made, is refused)."""
        return _safe_target(self.root, inner)

    def host_path(self, inner: str) -> Path:
        """Where the sandbox's `inner` path (in the layer) is on the host."""
        return _safe_target(self.root, inner)


def _copy_missing(
    source: Path, dest: Path, skip: tuple[str, ...] = ()
) -> list[tuple[Path, int, int, int]]:
    """Copy the tree at `source` into `dest`, keeping what `dest` has (the layer's files win
    over the base's) and leaving out `skip` (paths relative to `source`); symlinks are copied
    as links, other special files skipped. (copy, owner, group, mode) of every entry copied,
    the owners the source's."""
    copied = []
    for folder, dirs, files in os.walk(source):
        rel = os.path.relpath(folder, source)
        target = dest if rel == "." else _safe_target(dest, rel)
        if not target.exists():
            target.mkdir(parents=True)
            st = os.lstat(folder)
            copied.append((target, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
        for name in [*dirs, *files]:
            src, out = os.path.join(folder, name), target / name
            if os.path.normpath(os.path.join(rel, name)) in skip:
                dirs.remove(name)
                continue
            if os.path.lexists(out):
                if out.is_symlink() and name in dirs:
                    dirs.remove(name)  # the layer's link stands; nothing is written through it
                continue
            if os.path.islink(src):
                os.symlink(os.readlink(src), out)
                if name in dirs:
                    dirs.remove(name)  # os.walk does not follow it; nothing to copy under it
            elif os.path.isfile(src):
                shutil.copy2(src, out)
            else:
                continue
            st = os.lstat(src)
            copied.append((out, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
    return copied


USUAL_VAR = ("log", "tmp", "cache", "lib", "spool", "mail", "opt", "backups", "local")
"""`/var`'s folders in a Debian image: the layer has them, so `/var` is the image's (bound
from the layer, writable), not a host folder; `/var/run` and `/var/lock` stay links to /run."""


def usual_dirs(root: Path) -> None:
    """Make the layer at root hold the usual Linux `/var` (`/var/log` above all) and `/run`,
    as an image does; folders a build made already are kept. `/run` is the layer's, so a
    service's socket there (supervisor's) is seen by every command of the episode, as in
    one container, not a tmpfs of each command's own."""
    var = _safe_target(root, "/var")
    for name in USUAL_VAR:
        _safe_target(root, f"/var/{name}").mkdir(parents=True, exist_ok=True)
    _safe_target(root, "/run/lock").mkdir(parents=True, exist_ok=True)
    for name, target in (("run", "/run"), ("lock", "/run/lock")):
        if not os.path.lexists(var / name):
            os.symlink(target, var / name)


def own_hosts(sandbox: Sandbox) -> list[str]:
    """A writable /etc/hosts of the sandbox's own, as Docker gives each container."""
    hosts = sandbox.workdir / "hosts"
    if not hosts.exists():
        shutil.copyfile("/etc/hosts", hosts)
        if sandbox.uid is not None:
            os.lchown(hosts, sandbox.uid, sandbox.uid)
    return ["--bind", str(hosts), "/etc/hosts"]


def episode_env(image: Image) -> dict[str, str]:
    """What every command of an episode gets: Harbor's root HOME, the image's ENV, the kit."""
    env = {"HOME": "/root", "DEBIAN_FRONTEND": "noninteractive", **image.env}
    env["PATH"] = f"{KIT}/bin:{env.get('PATH', PATH)}"
    env |= {"UV_OFFLINE": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": f"{KIT}/wheels"}
    env |= {"UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON": "/usr/bin/python3"}
    env["SKYRL_UV_DIR"] = f"{KIT}/uv"
    env |= pip_env()
    return env


def pip_env() -> dict[str, str]:
    """pip's own configuration (its `PIP_*` variables) for the same offline kit as uv: a
    verifier's `pip install pytest==X` finds the pinned wheel with no index. PEP 668's refusal
    is off, as in the official python images most such tasks start from (the host's Debian
    python stands for them); a read-only system site makes pip install to the user's."""
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{KIT}/wheels",
        "PIP_BREAK_SYSTEM_PACKAGES": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_ROOT_USER_ACTION": "ignore",
    }


# ---------------------------------------------------------------------------- offline kit

_APT = r"""#!/bin/sh
# skyrl offline apt: the host's installed packages stand for the image's (no network)
case "$1" in
  install)
    shift; missing=""
    for p in "$@"; do
      case "$p" in -*) continue ;; esac
      p="${p%%=*}"
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
      echo "E: Unable to locate package$missing (skyrl: offline, and the host lacks it)" >&2
      exit 100
    fi ;;
esac
exit 0
"""
_CURL = r"""#!/bin/sh
# skyrl offline curl: Astral's uv installer is served from the kit; the rest is real curl
for a in "$@"; do
  case "$a" in
    *astral.sh/uv/*install.sh) exec cat "$(dirname "$0")/uv-install.sh" ;;
  esac
done
exec /usr/bin/curl "$@"
"""
_UV_INSTALL = r"""#!/bin/sh
# skyrl offline stand-in for https://astral.sh/uv/install.sh: the same files in the same place
set -e
dir="${UV_INSTALL_DIR:-${XDG_BIN_HOME:-$HOME/.local/bin}}"
src="$(ls -d "$SKYRL_UV_DIR"/* | tail -1)"
mkdir -p "$dir"
cp "$src/uv" "$src/uvx" "$dir/"
cat > "$dir/env" <<EOF
case ":\${PATH}:" in *:"$dir":*) ;; *) export PATH="$dir:\$PATH" ;; esac
EOF
echo "installing to $dir"
"""


def verifier_needs(test_sh: str) -> tuple[list[str], list[str]]:
    """(uv versions, `NAME==VERSION` pins) that an offline run of `test_sh` needs."""
    uvs = sorted({m.group(1) or DEFAULT_UV for m in _UV_URL.finditer(test_sh)})
    uses_uv = bool(uvs) or re.search(r"\buvx?\b", test_sh) is not None
    pins = sorted({f"{m.group(1)}=={m.group(2)}" for m in _PIN.finditer(test_sh)})
    return (uvs or ([DEFAULT_UV] if uses_uv else [])), pins


def _pip_download(args: list[str], dest: Path) -> str | None:
    """None, or why pip could not fetch `args` into dest."""
    py = (
        subprocess.run(
            [
                "/usr/bin/python3",
                "-c",
                "import sys;print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        or f"{sys.version_info[0]}.{sys.version_info[1]}"
    )
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
    cmd += ["--only-binary=:all:", "--python-version", py, "-d", str(dest), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")] or [""]
        return lines[-1][:300] or f"pip exited {done.returncode}"
    return None


def provision(test_sh: str) -> list[str]:
    """Fetch (once, cached) what `test_sh` would download: uv and its pinned wheels.
    Returns the problems (`uv 0.9.7: why`); none when all is in the kit."""
    kit = cache_root() / "kit"
    (kit / "bin").mkdir(parents=True, exist_ok=True)
    (kit / "wheels").mkdir(exist_ok=True)
    (kit / "uv").mkdir(exist_ok=True)
    for name, text in (
        ("apt-get", _APT),
        ("apt", _APT),
        ("curl", _CURL),
        ("uv-install.sh", _UV_INSTALL),
    ):
        path = kit / "bin" / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            path.chmod(0o755)
    problems = []
    uvs, pins = verifier_needs(test_sh)
    for version in uvs:
        target = kit / "uv" / version
        if (target / "uvx").is_file():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            why = _pip_download(["--no-deps", f"uv=={version}"], Path(tmp))
            wheels = list(Path(tmp).glob("uv-*.whl"))
            if why or not wheels:
                problems.append(f"the uv {version} installer: uv could not be fetched ({why})")
                continue
            part = Path(tmp) / "uv"
            part.mkdir()
            with zipfile.ZipFile(wheels[0]) as whl:
                for info in whl.infolist():
                    member = PurePosixPath(info.filename)
                    if member.parent.name == "scripts" and member.name in ("uv", "uvx"):
                        (part / member.name).write_bytes(whl.read(info))
                        (part / member.name).chmod(0o755)
            if not (part / "uvx").is_file():
                problems.append(f"the uv {version} installer: its wheel holds no uv/uvx")
                continue
            shutil.move(str(part), target)
    marker = kit / "wheels" / ".pins"
    have = set(marker.read_text().split()) if marker.is_file() else set()
    todo = [p for p in pins if p not in have]
    if todo:
        why = _pip_download(todo, kit / "wheels")
        if why:
            problems.append(f"the verifier's pins {' '.join(todo)}: {why}")
        else:
            marker.write_text("\n".join(sorted(have | set(todo))) + "\n")
    for path in kit.rglob("*"):
        path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    return problems


def kit_view(base: str = "/") -> list[str]:
    """bwrap arguments for the kit (read-only) and the system's dpkg status (for the apt
    shim): the host's, or that of the root file system at `base`."""
    kit = cache_root() / "kit"
    args = ["--ro-bind", str(kit), KIT] if kit.is_dir() else []
    dpkg = _on(base, "/var/lib/dpkg")
    if os.path.isdir(dpkg):
        args += ["--ro-bind", dpkg, "/var/lib/dpkg"]
    return args


# ---------------------------------------------------------------------------- the build


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


@dataclass(frozen=True)
class Plan:
    """What stands for a Dockerfile's FROM: the host's system, or a root file system."""

    base: Base | None = None
    spec: RootfsSpec | None = None
    problem: str | None = None
    """`FROM ...: why` when no root file system stands in for the image."""

    def key(self) -> str:
        return self.spec.key() if self.spec else ("host" if self.problem is None else "none")


def apt_packages(text: str) -> tuple[str, ...]:
    """The packages `apt-get install` lines of a Dockerfile or script name (variables and
    flags left out, `=VERSION` dropped): a base image's root file system includes them."""
    found = set()
    for m in _APT_INSTALL.finditer(text.replace("\\\n", " ")):
        for word in m.group(1).split():
            if word.startswith("-") or "$" in word or not re.fullmatch(r"[a-z0-9][\w.+:=-]*", word):
                continue
            found.add(word.split("=", 1)[0].split(":", 1)[0])
    return tuple(sorted(found))


def apt_recommends(text: str) -> bool:
    """Whether an `apt-get install` line of a Dockerfile installs Recommends (apt's default:
    the line has no `--no-install-recommends`)."""
    return any(
        "--no-install-recommends" not in m.group(0)
        for m in _APT_INSTALL.finditer(text.replace("\\\n", " "))
    )


def plan(task_dir: Path, text: str, options: BuildOptions) -> Plan:
    """The base the Dockerfile `text` starts from, as `options` ask (`base=host`: the host's)."""
    if options.base == "host":
        return Plan()
    variables: dict[str, str] = {}
    froms: list[str] = []
    for word, args in _instructions(text):
        if word == "ARG" and not froms:  # an ARG before the first FROM serves FROM lines
            variables.update(_pairs(args))
        elif word == "FROM":
            froms.append(_expand(args, variables))
    name, stages = final_base(froms)
    if name.lower() in ("host", ""):  # skyrl's older task form (no Dockerfile)
        return Plan()
    base = base_for(name)
    if base is None:
        return Plan(
            problem=f"FROM {name}: no root file system here stands in for the base image "
            f"{name} (the known base images are in the table of docs/environments.md; "
            f"env.kwargs.base=host runs the task on this machine's own system instead)"
        )
    test_sh = task_dir / "tests" / "test.sh"
    verifier = test_sh.read_text(errors="replace") if test_sh.is_file() else ""
    extra = {*apt_packages(text), *apt_packages(verifier)}
    for other in stages:  # the tools of earlier stages (a golang build stage) are there too
        known = base_for(other)
        extra |= set(known.spec().packages) if known else set()
    return Plan(base, spec_of(base, tuple(sorted(extra)), apt_recommends(text)))


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
    for inner, text in base.scripts:
        path = _safe_target(root, inner)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
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
        return image
    _start_from(start, options, sandbox, image)
    if image.problems:
        return image
    too_big = _check_context(context) if context.is_dir() else None
    if too_big:
        image.problems.append(f"COPY: {too_big}")
        return image
    stages: list[str] = []
    for word, args in _instructions(text):
        step = f"{word} {args}"  # whole: a pre-flight reason is never cut
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
    for inner in (image.workdir, "/tmp", "/logs/agent", "/logs/verifier"):
        _safe_target(root, inner).mkdir(parents=True, exist_ok=True)
    usual_dirs(root)
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
        if base != "/":  # the host's name service and CA bundle, over a layer's own /etc too
            sandbox.view += [
                arg
                for f in HOST_TRUST
                if f != "/etc/hosts" and os.path.exists(f) and os.path.exists(_on(base, f))
                for arg in ("--ro-bind", f, f)
            ]


def _run_step(
    sandbox: Sandbox, root: Path, image: Image, args: str, options: BuildOptions
) -> str | None:
    form = _words(args)
    command = form if form is not None else ["/bin/sh", "-c", args]
    if form is None:
        _top_files(root, args)
    _prepare_run(sandbox, root, image, network=options.network and sandbox.network)
    result = sandbox.run(command, timeout=BUILD_TIMEOUT_S)
    sandbox.kill_all()
    if result.returncode == 0:
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
    shutil.copytree(root, probe_root, symlinks=True)
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
            return Image(**{**data, "layer": str(folder / "layer")})
        shutil.rmtree(folder, ignore_errors=True)  # built before bwrap, or its base is gone
    if dockerfile is not None:
        text = _read_dockerfile(dockerfile)
    elif service and context is not None:
        text = _service_dockerfile(context)
    else:
        text = dockerfile_of(task_dir)
    sandbox = Sandbox(Limits(timeout_s=BUILD_TIMEOUT_S, disk_mb=2048, cpu_seconds=600))
    try:
        image = _build(task_dir, text, digest, sandbox, options, context, service)
        if image.transient:  # about this host's state, not the task: never cached
            return image
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{digest}-"))
        shutil.copytree(sandbox.workdir / "root", tmp / "layer", symlinks=True)
        data = {k: v for k, v in asdict(image).items() if k != "layer"}
        (tmp / "image.json").write_text(json.dumps(data, indent=1))
        try:
            tmp.rename(folder)
        except OSError:  # built meanwhile by another process
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        sandbox.close()
    data = json.loads(meta.read_text())
    return Image(**{**data, "layer": str(folder / "layer")})


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


def _read_dockerfile(path: Path) -> str:
    if not path.is_file() or path.is_symlink():
        return "FROM scratch\n"  # no root file system stands for it: a pre-flight problem
    return path.read_text(encoding="utf-8", errors="replace")


def _service_dockerfile(context: Path) -> str:
    return _read_dockerfile(context / "Dockerfile")


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
