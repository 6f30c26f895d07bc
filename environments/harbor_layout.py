"""Where a Harbor image's files appear: the cache folder (`cache_root`), one episode's private
copy of the layer bound at its paths in the sandbox (`Layout`, with its own `/etc/hosts` and
the image's ENV), and the offline kit (`provision`, `kit_view`): the apt, curl and uv shims and
the wheels a verifier's pins name, fetched ahead of time, so that a verifier runs offline.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from environments.bash import chown_tree
from environments.harbor_dockerfile import Image
from environments.sandbox import HIDDEN_DIRS, PATH, SYSTEM_DIRS, Sandbox

KIT = "/.skyrl-offline"
"""Where the offline kit (shims, uv, wheels) appears inside a sandbox."""


DEFAULT_UV = "0.9.7"
"""The uv a `https://astral.sh/uv/install.sh` without a version gets."""


_PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[\w,.-]+\])?)==([0-9][\w.+!-]*)")


_UV_URL = re.compile(r"https?://astral\.sh/uv/(?:([0-9][\w.]*)/)?install\.sh")


def _copy_entry(src: str, dst: str) -> None:
    """Copy one file of a layer as what it is: a named pipe stays a pipe (GNU make's jobserver
    leaves one in /tmp), a socket or device is left out (it means nothing once its process is
    gone, and no unprivileged sandbox may make a device); anything else as `shutil.copy2`."""
    mode = os.lstat(src).st_mode
    if stat.S_ISFIFO(mode):
        os.mkfifo(dst, stat.S_IMODE(mode))
        shutil.copystat(src, dst, follow_symlinks=False)
    elif stat.S_ISREG(mode):
        shutil.copy2(src, dst, follow_symlinks=False)


def copy_tree(source: Path, dest: Path) -> None:
    """Copy a layer (or any tree of one), symlinks as symlinks, special files as `_copy_entry`
    copies them, as a Docker layer keeps them (`shutil.copytree` alone fails on a pipe)."""
    shutil.copytree(source, dest, symlinks=True, copy_function=_copy_entry)


OWNED = ("/usr/local", "/opt")
"""Over a base image's root file system, these folders are the layer's, bound whole and
writable during the build (a `RUN pip install` writes there, a tool unpacks into `/opt`, as
in the image)."""


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
        copy_tree(Path(self.image.layer), self.root)
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
    """Make the layer at root hold the usual Linux `/var` (`/var/log` above all), `/run` and
    a `/tmp` any user may write (mode 1777), as an image does; folders a build made already
    are kept. `/run` is the layer's, so a
    service's socket there (supervisor's) is seen by every command of the episode, as in
    one container, not a tmpfs of each command's own."""
    var = _safe_target(root, "/var")
    for inner in ("/tmp", "/var/tmp"):  # every user's, sticky, as in any image
        if not os.path.lexists(path := _safe_target(root, inner)):
            path.mkdir(parents=True)
            path.chmod(0o1777)
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
