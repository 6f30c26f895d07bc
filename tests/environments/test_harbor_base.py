"""A Harbor task's `FROM` image stood in for by a Debian root file system: the table of base
images, an unknown image named in one pre-flight sentence, and a task whose build step and
oracle run inside the root file system, not on the host.

No test reaches the Debian mirror: the root file system here is FAKE (`fake_rootfs`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from environments import harbor, harbor_dockerfile
from environments.base_images import GCC13_C_HOOK, GCC13_C_SCRIPT, base_for, final_base
from environments.rootfs import ROOTFS_DIR_ENV, ensure_rootfs
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import load_harbor_task
from tests.environments import fake_rootfs
from tests.environments.fake_rootfs import MARKER

# ---------------------------------------------------------------------------- the table


@pytest.mark.parametrize(
    ("image", "release", "packages"),
    [
        ("debian:bookworm", "bookworm", ()),
        ("debian:12", "bookworm", ()),
        ("debian:bookworm-slim", "bookworm", ()),
        ("docker.io/library/debian:12-slim", "bookworm", ()),
        ("public.ecr.aws/docker/library/ubuntu:24.04@sha256:0d39", "trixie", ()),
        ("python:3.12-slim@sha256:adc0", "trixie", ("python3-pip",)),
        ("debian:bullseye", "bullseye", ()),
        ("debian:11", "bullseye", ()),
        ("ubuntu:22.04", "bookworm", ()),
        ("ubuntu:24.04", "trixie", ("procps",)),  # Ubuntu's image has ps, Debian's not
        ("python:3.11", "bookworm", ("python3", "python3-pip", "python3-venv")),
        ("python:3.11-slim", "bookworm", ("python3", "python3-pip", "python3-venv")),
        ("python:3.11-slim-bookworm", "bookworm", ("python3-pip",)),
        ("python:3.9-slim", "bullseye", ("python3-pip",)),
        ("python:3.13", "trixie", ("python3-pip",)),
        ("python:3.12-slim-bookworm", "bookworm", ("python3-pip",)),
        ("golang:1.22", "trixie", ("golang-go",)),
        ("node:20-slim", "trixie", ("nodejs", "npm")),
        ("rust:1.80", "trixie", ("rustc", "cargo")),
        ("ghcr.io/astral-sh/uv:python3.12-bookworm-slim", "bookworm", ("python3",)),
        # Terminal-Bench's own bases (most of its tasks start from one of them)
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "trixie", ("python3-pip", "tmux")),
        ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", "trixie", ("asciinema",)),
    ],
)
def test_the_table_maps_common_base_images(image, release, packages):
    base = base_for(image)
    assert base is not None, image
    assert base.release == release
    assert set(packages) <= set(base.spec().packages)


@pytest.mark.parametrize(
    ("tag", "release", "note"),
    [
        ("3.9-slim", "bullseye", ""),
        ("3.11", "bookworm", ""),
        ("3.13-slim", "trixie", ""),
        ("3.10-slim", "bookworm", "Python 3.11 (Debian bookworm's) for 3.10"),
        ("3.12-slim", "trixie", "Python 3.13 (Debian trixie's) for 3.12"),
    ],
)
def test_a_python_tag_gets_the_release_whose_python_is_that_version(tag, release, note):
    """python:3.9 is bullseye's Python, 3.11 bookworm's, 3.13 trixie's, exactly; a version
    no Debian release has (3.10, 3.12) gets the nearest newer one, and a note that says so."""
    base = base_for(f"python:{tag}")
    assert base is not None
    assert (base.release, base.note) == (release, note)


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("python:3.13-slim-bookworm", "trixie"),  # trixie's Python is 3.13, bookworm's 3.11
        ("python:3.11-slim-trixie", "bookworm"),
        ("python:3.12-slim-bookworm", "bookworm"),  # no release has 3.12: the one named
        ("python:3.10-bullseye", "bullseye"),
        ("ghcr.io/astral-sh/uv:python3.13-bookworm-slim", "trixie"),
    ],
)
def test_a_python_tag_gets_the_release_with_its_python_over_the_release_it_names(image, release):
    """flux-accounting's `python:3.13-slim-bookworm` ran on bookworm's Python 3.11, whose
    argparse help differs from 3.13's, and its test failed. The official image is Python 3.13
    built on bookworm: the Python is what its programs see, so a release whose own Python is
    the tag's stands in, and the named release only where none is."""
    base = base_for(image)
    assert base is not None and base.release == release, base


def test_python_images_have_python_and_a_pip_that_installs():
    base = base_for("python:3.11-slim")
    assert base is not None
    assert ("/usr/local/bin/python", "/usr/bin/python3") in base.links
    assert "/usr/local/bin/pip" in dict(base.scripts)
    assert ("PIP_BREAK_SYSTEM_PACKAGES", "1") in base.env
    # `pip install --upgrade pip==24.0` (harbor-hell's Dockerfile) installs beside Debian's
    # pip instead of failing to uninstall it from the read-only system
    assert ("PIP_IGNORE_INSTALLED", "1") in base.env
    golang = base_for("golang:1.19-bookworm")
    assert golang is not None and golang.release == "bookworm" and golang.workdir == "/go"


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("golang:1.22.12-bookworm", "trixie"),  # bookworm's Go is 1.19: no log/slog
        ("golang:1.21-bullseye", "trixie"),
        ("golang:1.19-bullseye", "bookworm"),
        ("golang:1.15-bullseye", "bullseye"),
        ("golang:1.19-bookworm", "bookworm"),
        ("golang:1.30-bookworm", "trixie"),  # newer than any: the newest
    ],
)
def test_a_golang_tag_newer_than_its_releases_go_gets_a_newer_release(image, release):
    """Go is backward compatible, so a tag whose Go is newer than the Go of the Debian release
    it names gets the nearest release whose Go is at least the tag's (before:
    `golang:1.22.12-bookworm` got bookworm's Go 1.19 and `RUN make build` failed)."""
    base = base_for(image)
    assert base is not None and base.release == release, base


@pytest.mark.parametrize("image", ["alpine:3.20", "python:3.12-alpine", "example.com/own:1"])
def test_the_table_knows_no_other_images(image):
    assert base_for(image) is None


def test_stages_and_platforms():
    froms = ["--platform=linux/amd64 golang:1.22 AS build", "build AS test", "python:3.11-slim"]
    assert final_base(froms) == (
        "python:3.11-slim",
        ["golang:1.22", "golang:1.22", "python:3.11-slim"],
    )
    assert final_base(["golang:1.22 AS build", "build"])[0] == "golang:1.22"


def _mmdebstrap_args(tmp_path: Path, monkeypatch, spec) -> list[str]:
    """The arguments `ensure_rootfs(spec)` gives mmdebstrap. mmdebstrap is a stand-in here
    (the Debian mirror is not reachable from tests): it records them and makes the tree."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mmdebstrap").write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS"\nfor a; do last2=$last; last=$a; done\n'
        'mkdir -p "$last2/usr"\n'
    )
    (bin_dir / "mmdebstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ARGS", str(tmp_path / "args"))
    top = Path(tempfile.mkdtemp(prefix="skyrl-rootfs-args-"))  # sandbox uids reach it
    top.chmod(0o755)
    monkeypatch.setenv(ROOTFS_DIR_ENV, str(top))
    try:
        ensure_rootfs(spec, network=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return (tmp_path / "args").read_text().splitlines()


@pytest.mark.parametrize(
    "run, recommends",
    [
        ("RUN apt-get update && apt-get install -y gcc make python3", True),
        ("RUN apt-get install -y --no-install-recommends gcc", False),
        ("RUN apt-get -y --no-install-recommends install \\\n  gcc", False),
        ("RUN echo no apt here", False),
    ],
)
def test_an_apt_line_without_no_install_recommends_brings_recommends(
    tmp_path, monkeypatch, run, recommends
):
    """sha256's `apt-get install -y gcc` on ubuntu:24.04 brings libc6-dev (gcc's Recommends)
    there; the root file system built without Recommends had gcc and no stdio.h. mmdebstrap
    is a stand-in here (the Debian mirror is not reachable from tests): it records its
    arguments and makes the tree."""
    plan = harbor.plan(tmp_path, f"FROM ubuntu:24.04\n{run}\n", harbor.BuildOptions())
    assert plan.spec is not None and plan.spec.recommends is recommends
    args = _mmdebstrap_args(tmp_path, monkeypatch, plan.spec)
    assert ('--aptopt=APT::Install-Recommends "true"' in args) is recommends, args


# ---------------------------------------------------------------------------- the sandbox

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="root file systems need bubblewrap")


@pytest.fixture()
def fake_root(monkeypatch):
    """Image and rootfs caches in the temp dir (sandbox uids must reach them) and a fake
    bookworm root file system where the table's spec for `debian:bookworm` is looked up;
    the host fallback the rest of the suite asks for is off."""
    with fake_rootfs.installed(monkeypatch) as target:
        yield target


TEST_SH = """#!/bin/bash
ok=1
[ "$(cat /app/from-run)" = "fake bookworm" ] || ok=0
[ "$(cat /app/from-oracle)" = "fake bookworm" ] || ok=0
[ -e /usr/bin/python3 ] && ok=0
[ -e /etc/debian_version ] && ok=0
[ "$(cat /usr/local/share/kept)" = "fake bookworm" ] || ok=0
echo $ok > /logs/verifier/reward.txt
"""


def _task(root: Path, dockerfile: str):
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "instruction.md").write_text("Do it.")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 20.0\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\ncat {MARKER} > /app/from-oracle\n")
    return load_harbor_task(root)


def test_run_and_oracle_run_inside_the_base_images_root(tmp_path, fake_root):
    """FROM debian:bookworm: the RUN step and the oracle see the fake root's /etc and /usr
    (its marker; no python3, no /etc/debian_version, which the host has), so the verifier
    scores 1 there; on the host's system it would score 0. What RUN writes in /usr/local
    (where pip installs) is the image's."""
    assert Path("/usr/bin/python3").exists() and Path("/etc/debian_version").exists()
    task = _task(
        tmp_path / "t",
        f"FROM debian:bookworm AS final\nWORKDIR /app\nRUN cat {MARKER} > from-run\n"
        f"RUN mkdir -p /usr/local/share && cat {MARKER} > /usr/local/share/kept\n",
    )
    img = harbor.image(Path(task.metadata["task_dir"]))
    assert img.problems == [] and img.system_root == str(fake_root)
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        env.run_oracle()
        _, reward, _, _, info = env.step("<submit/>")
        assert (reward, info["reward_error"]) == (1.0, None), info["verifier"]["output"]
    finally:
        env.close()


DIGEST = "@sha256:" + "0d39" * 16


@pytest.mark.parametrize(
    ("image", "note"),
    [
        (f"python{DIGEST}", "a digest with no tag, read as python:latest (Debian trixie; "),
        (f"python:3.12-slim{DIGEST}", "Python 3.13 (Debian trixie's) for 3.12"),
        (f"python:3.13-slim{DIGEST}", ""),
        (f"docker.io/library/debian{DIGEST}", "read as debian:latest (Debian trixie; "),
    ],
)
def test_a_digest_with_no_tag_says_what_it_was_read_as(image, note):
    """psij-recovery-pipeline's `python@sha256:...` (Python 3.10 by its notes) ran on
    trixie's 3.13, without distutils, and scored 0 with only the verifier's import error to
    say why. A digest cannot be resolved offline; the stand-in says what it read instead."""
    base = base_for(image)
    assert base is not None
    assert (note in base.note) if note else base.note == "", base.note


def test_a_digest_with_no_tag_says_how_to_name_its_image():
    """The note of a digest read as `:latest` names the setting that reads it as its image."""
    base = base_for(f"python{DIGEST}")
    assert base is not None
    assert base.note.endswith(
        "a digest cannot be resolved offline: "
        "--set env.kwargs.image_as.sha256:0d390d390d39=IMAGE:TAG names its image)"
    ), base.note


def test_a_digest_is_read_as_the_image_the_user_names(tmp_path, fake_root, capsys):
    """psij-recovery-pipeline's `python@sha256:...` is Python 3.10 by its notes; offline
    the digest reads as `python:latest` (trixie's 3.13, no distutils). With
    `env.kwargs.image_as` naming the digest's image (a prefix of 12 hex digits or more),
    the stand-in is that image's: here `debian:bookworm`, the fake root, where the RUN
    step and the oracle run (the verifier checks both saw its marker)."""
    from skyrl_cli.eval_oracle import run_reference_agent

    task = _task(
        tmp_path / "t",
        f"FROM debian{DIGEST}\nWORKDIR /app\nRUN cat {MARKER} > from-run\n"
        f"RUN mkdir -p /usr/local/share && cat {MARKER} > /usr/local/share/kept\n",
    )
    task_dir = Path(task.metadata["task_dir"])
    text = (task_dir / "environment" / "Dockerfile").read_text()
    named = harbor.BuildOptions.from_kwargs(image_as={"sha256:0d390d390d39": "debian:bookworm"})
    plan = harbor_dockerfile.plan(task_dir, text, named)
    assert plan.base is not None and plan.base.release == "bookworm"
    assert plan.base.note == f"debian{DIGEST} read as debian:bookworm (env.kwargs.image_as)"
    unnamed = harbor_dockerfile.plan(task_dir, text, harbor.BuildOptions.from_kwargs())
    assert unnamed.base is not None and unnamed.base.release == "trixie"
    # the whole episode, the setting given as `--set` gives it (a whole digest, no prefix)
    run_reference_agent(
        "oracle", [task], {}, {"timeout_s": 20, "image_as": {"0d39" * 16: "debian:bookworm"}}
    )
    out = capsys.readouterr().out
    assert "t: reward 1" in out, out
    # a 0 there names the image the digest was read as, not `:latest`
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    run_reference_agent(
        "oracle", [task], {}, {"timeout_s": 20, "image_as": {"0d39" * 16: "debian:bookworm"}}
    )
    zero = next(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("t: reward 0")
    )
    assert zero.endswith(
        f"(stand-in: debian{DIGEST} read as debian:bookworm (env.kwargs.image_as))"
    ), zero


@pytest.mark.parametrize(
    ("image_as", "why"),
    [
        ("python:3.10", "env.kwargs.image_as maps a digest to the image it stands for, e.g. "
         "--set env.kwargs.image_as.sha256:8e5387460bf1=python:3.10-slim"),
        ({"latest": "python:3.10"}, "env.kwargs.image_as: 'latest' is not a digest "
         "(sha256: and 12 to 64 hex digits)"),
        ({"sha256:8e53": "python:3.10"}, "env.kwargs.image_as: 'sha256:8e53' is not a digest "
         "(sha256: and 12 to 64 hex digits)"),
        ({"8e5387460bf1": "alpine:3.20"}, "env.kwargs.image_as: no root file system here "
         "stands in for 'alpine:3.20' (the known base images are in the table of "
         "docs/environments.md)"),
    ],
)  # fmt: skip # each case with its whole sentence
def test_a_wrong_image_as_is_one_sentence(image_as, why):
    with pytest.raises(ValueError) as e:
        harbor.BuildOptions.from_kwargs(image_as=image_as)
    assert str(e.value) == why


def test_skyrl_eval_reads_image_as_from_set(tmp_path):
    """`--set env.kwargs.image_as.sha256:HEX=IMAGE` reaches the shell env as a mapping (the
    reference agents' path once split each --set at its first `=` and took the dotted rest
    as a parameter's name); a wrong one is its one sentence, exit 2, before any build."""
    from tests.conftest import skyrl

    _task(tmp_path / "tasks" / "t", f"FROM python{DIGEST}\n")
    for value, why in (
        ("sha256:zz=python:3.10", "error: env.kwargs.image_as: 'sha256:zz' is not a digest"),
        ("8e5387460bf1=alpine:3.20", "error: env.kwargs.image_as: no root file system here "
         "stands in for 'alpine:3.20'"),
    ):  # fmt: skip # each case with its sentence
        res = skyrl(
            "eval", "--env", "shell", "--agent", "oracle", "--tasks", str(tmp_path / "tasks"),
            "--set", f"env.kwargs.image_as.{value}", cwd=tmp_path, check=False, timeout=60,
        )  # fmt: skip # the command line reads as typed
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.startswith(why), res.stderr
        assert "Traceback" not in res.stderr and "image 1/1" not in res.stderr


def test_output_keeps_each_tasks_build_log_whether_it_ran_or_not(tmp_path, fake_root, capsys):
    """`--output`: every task's folder has its image's build log, each step and what a RUN
    printed; above all a task whose build failed at pre-flight (harbor-hell's pip step:
    its one line named pip's last error, and nothing kept the rest of what pip said)."""
    from skyrl_cli.eval_oracle import run_reference_agent

    ran = _task(
        tmp_path / "ran",
        f"FROM debian:bookworm\nWORKDIR /app\nRUN echo said-by-run && cat {MARKER} > from-run\n"
        f"RUN mkdir -p /usr/local/share && cat {MARKER} > /usr/local/share/kept\n",
    )
    failed = _task(
        tmp_path / "failed",
        "FROM debian:bookworm\nRUN echo collecting-thing-1.0 && echo 'no wheel for thing' >&2 && exit 3\n",
    )
    out = tmp_path / "out"
    run_reference_agent("oracle", [ran, failed], {}, {"timeout_s": 20}, out)
    said = capsys.readouterr().out
    assert "ran: reward 1" in said and "failed: not run" in said, said
    ran_log = (out / "ran" / "build.log").read_text()
    assert "FROM debian:bookworm" in ran_log and "RUN echo said-by-run" in ran_log
    assert "said-by-run" in ran_log.split("RUN echo said-by-run", 1)[1]  # its output, after it
    assert (out / "ran" / "verifier" / "reward.txt").is_file()
    preflight = next(line for line in said.splitlines() if line.startswith("pre-flight: failed:"))
    assert preflight.endswith(f"(build log: {out / 'failed' / 'build.log'})"), preflight
    failed_log = (out / "failed" / "build.log").read_text()
    for part in ("collecting-thing-1.0", "no wheel for thing", "exit 3"):
        assert part in failed_log, failed_log


BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@pytest.mark.skipif(not os.path.isfile(BUNDLE), reason=f"this machine has no {BUNDLE}")
@pytest.mark.parametrize("network", [True, False])
def test_a_networked_build_trusts_the_ca_bundle_the_host_trusts(
    tmp_path, fake_root, monkeypatch, network
):
    """harbor-hell's `pip install --upgrade pip==24.0`, then its requirements: the new pip
    (PyPI's, with certifi's bundle) refused this machine's TLS proxy ("self-signed
    certificate in certificate chain") where Debian's pip, reading the system bundle bound
    in from the host, had reached the index. A RUN with the registries gets the bundle the
    host's pip is given (PIP_CERT, REQUESTS_CA_BUNDLE), readable where it points; offline,
    none. A host variable pointing elsewhere (a file the sandbox cannot see) is not passed."""
    monkeypatch.setenv("SSL_CERT_FILE", BUNDLE)
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", "/root/private/ca.pem")
    (fake_root / "etc" / "ssl" / "certs").mkdir(parents=True, exist_ok=True)
    (fake_root / "etc" / "ssl" / "certs" / "ca-certificates.crt").write_text("the image's own\n")
    task = _task(
        tmp_path / "t",
        "FROM debian:bookworm\n"
        'RUN echo "pip=[$PIP_CERT] requests=[$REQUESTS_CA_BUNDLE] ssl=[$SSL_CERT_FILE] '
        'node=[$NODE_EXTRA_CA_CERTS]" && if [ -n "$PIP_CERT" ]; then grep -q "image.s own" '
        '"$PIP_CERT" || echo the-hosts-bundle; fi\n',
    )
    image = harbor.image(Path(task.metadata["task_dir"]), harbor.BuildOptions(network=network))
    harbor.save_build_log(image, tmp_path / "out")
    log = (tmp_path / "out" / "build.log").read_text()
    if network:
        assert f"pip=[{BUNDLE}] requests=[{BUNDLE}] ssl=[{BUNDLE}] node=[]" in log, log
        assert "the-hosts-bundle" in log.split("node=[]", 1)[1], log  # not the image's own
    else:
        assert "pip=[] requests=[] ssl=[] node=[]" in log, log


def test_a_zero_on_a_stand_in_shows_how_it_differs_from_the_image(tmp_path, fake_root, capsys):
    """`skyrl eval --agent oracle`: a task that scores 0 on a stand-in that is not its image
    (here a digest read as debian:latest) has that on its line, after the verifier's error;
    one whose FROM is stood in exactly has none."""
    from environments.rootfs import rootfs_dir
    from skyrl_cli.eval_oracle import run_reference_agent

    latest = base_for(f"debian{DIGEST}")
    assert latest is not None
    target = rootfs_dir(latest.spec())
    target.mkdir(parents=True)
    fake_rootfs.build(target)  # as debian:bookworm's: found, so nothing is fetched
    failing = "#!/bin/bash\necho 'AssertionError: wrong' >&2\necho 0 > /logs/verifier/reward.txt\n"
    tasks = []
    for name, image in (("digest", f"debian{DIGEST}"), ("tagged", "debian:bookworm")):
        _task(tmp_path / name, f"FROM {image}\nWORKDIR /app\n")
        (tmp_path / name / "tests" / "test.sh").write_text(failing)
        tasks.append(load_harbor_task(tmp_path / name))
    run_reference_agent("oracle", tasks, {}, {"timeout_s": 20})
    out = capsys.readouterr().out.splitlines()
    digest_line = next(line for line in out if line.startswith("digest: reward 0"))
    assert digest_line.endswith(
        "(verifier: AssertionError: wrong) (stand-in: a digest with no tag, read as "
        "debian:latest (Debian trixie; a digest cannot be resolved offline: "
        "--set env.kwargs.image_as.sha256:0d390d390d39=IMAGE:TAG names its image))"
    ), digest_line
    tagged_line = next(line for line in out if line.startswith("tagged: reward 0"))
    assert "stand-in" not in tagged_line, tagged_line


def test_a_zero_on_a_task_that_asks_for_more_cpus_than_the_machine_has_says_so(
    tmp_path, fake_root, capsys
):
    """durable-relay-integrity asks for `cpus = 4` in task.toml and its verifier times its
    service to 250 ms; on this machine's 2 cores its oracle scored 1 in 3 of 5 runs, each 0
    with only a broken pipe to say why. A 0 on a task that asks for more CPUs or memory than
    the machine has says so after the verifier's error; one that asks for what it has does
    not."""
    from skyrl_cli.eval_oracle import run_reference_agent

    failing = "#!/bin/bash\necho 'write x: broken pipe' >&2\necho 0 > /logs/verifier/reward.txt\n"
    tasks = []
    for name, table in (("big", "cpus = 1000\nmemory_mb = 16000000\n"), ("small", "cpus = 1\n")):
        _task(tmp_path / name, "FROM debian:bookworm\nWORKDIR /app\n")
        toml = tmp_path / name / "task.toml"
        toml.write_text(toml.read_text() + "[environment]\n" + table)
        (tmp_path / name / "tests" / "test.sh").write_text(failing)
        tasks.append(load_harbor_task(tmp_path / name))
    run_reference_agent("oracle", tasks, {}, {"timeout_s": 20})
    out = capsys.readouterr().out.splitlines()
    big = next(line for line in out if line.startswith("big: reward 0"))
    cores = len(os.sched_getaffinity(0))
    assert (
        f"(verifier: write x: broken pipe) (machine: the task asks for 1000 CPUs and "
        f"16000000 MB of memory, this machine has {cores} CPUs and "
    ) in big, big
    assert re.search(r"and \d+ MB of memory; timings and limits may not hold\)$", big), big
    small = next(line for line in out if line.startswith("small: reward 0"))
    assert "machine:" not in small, small


def test_an_unknown_base_image_is_one_preflight_sentence(tmp_path, fake_root):
    task = _task(tmp_path / "t", "FROM alpine:3.20\nWORKDIR /app\n")
    img = harbor.image(Path(task.metadata["task_dir"]))
    line = harbor.preflight_line("t", img)
    assert line is not None and line.count(". ") == 0 and "\n" not in line
    assert "alpine:3.20" in line and "docs/environments.md" in line, line


def test_a_base_not_built_yet_names_the_flag(tmp_path, fake_root):
    """Offline, a root file system that is not in the cache is named with the flag that
    allows building it, and nothing runs on the host instead."""
    task = _task(tmp_path / "t", "FROM python:3.13-slim\nWORKDIR /app\n")
    line = harbor.preflight_line("t", harbor.image(Path(task.metadata["task_dir"])))
    assert line is not None and "--build-network" in line and "trixie" in line, line


def test_the_host_fallback_is_asked_for(tmp_path, fake_root, monkeypatch):
    """With the host fallback asked for, FROM is this machine's system again."""
    monkeypatch.setenv(harbor.BASE_ENV, "host")
    task = _task(tmp_path / "t", "FROM alpine:3.20\nWORKDIR /app\n")
    img = harbor.image(Path(task.metadata["task_dir"]))
    assert img.problems == [] and img.system_root == ""


def _outside_interfaces() -> int:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sum(1 for line in lines if not line.strip().startswith("lo:"))


@pytest.mark.skipif(_outside_interfaces() == 0, reason="this machine has no network interface")
def test_build_network_gives_run_the_hosts_network(tmp_path, fake_root):
    """`skyrl eval ... --build-network`: the RUN step shares the host's network (it sees the
    host's interfaces; it sends nothing), the episode does not; without the flag the build
    has only its own loopback. The real command, the fake root as before."""
    count = "grep -vc -e 'lo:' -e '|' /proc/net/dev"
    test_sh = (
        "#!/bin/bash\n"
        f'[ "$(cat /app/build-ifaces)" -gt 0 ] && [ "$({count})" = 0 ] && echo 1 > '
        "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    _task(
        tmp_path / "tasks" / "net",
        f"FROM debian:12\nWORKDIR /app\nRUN ({count} || true) > build-ifaces\n",
    )
    (tmp_path / "tasks" / "net" / "tests" / "test.sh").write_text(test_sh)
    cmd = [sys.executable, "-m", "skyrl_cli.main", "eval", "--env", "shell", "--agent", "oracle"]
    cmd += ["--tasks", str(tmp_path / "tasks"), "--no-tracking"]
    for flag, want in (
        ("--no-build-network", "net: reward 0"),
        ("--build-network", "net: reward 1"),
    ):
        done = subprocess.run([*cmd, flag], capture_output=True, text=True, timeout=300)
        assert want in done.stdout, done.stdout + done.stderr


def test_an_unknown_base_is_refused_by_the_shell_env(tmp_path, fake_root):
    """`reset` refuses a task whose base image the table does not know (one sentence), and
    `env.kwargs.base` takes only the names it knows."""
    task = _task(tmp_path / "t", "FROM alpine:3.20\nWORKDIR /app\n")
    env = ShellEnv(timeout_s=20)
    with pytest.raises(ValueError, match="alpine:3.20"):
        env.reset(options={"task": task})
    env.close()
    with pytest.raises(ValueError, match="unknown Harbor base 'docker'"):
        ShellEnv(base="docker")


def test_the_bundled_tasks_run_on_this_machine_offline_unless_a_base_is_chosen(
    tmp_path, monkeypatch
):
    """The bundled tasks (FROM debian:bookworm-slim) are written for this machine's system
    and `skyrl train --env shell` must start offline: with no base chosen they run on the
    host; the same folder copied elsewhere is a user's task, built over its image (offline:
    a pre-flight sentence naming the flag)."""
    from tasks.harbor import SUITE_DIR, load_suite

    top = Path(tempfile.mkdtemp(prefix="skyrl-harbor-base-"))
    top.chmod(0o755)
    monkeypatch.setenv("SKYRL_HARBOR_CACHE", str(top / "cache"))
    monkeypatch.setenv(ROOTFS_DIR_ENV, str(top / "rootfs"))  # empty: nothing built
    monkeypatch.delenv(harbor.BASE_ENV, raising=False)
    harbor._built.cache_clear()
    bundled = load_suite("train")[0]
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": bundled})  # no pre-flight error: the host stands for FROM
        copy = tmp_path / Path(bundled.metadata["task_dir"]).name
        shutil.copytree(Path(bundled.metadata["task_dir"]), copy)
        assert not copy.resolve().is_relative_to(SUITE_DIR.resolve())
        with pytest.raises(ValueError, match="--build-network"):
            env.reset(options={"task": load_harbor_task(copy)})
    finally:
        env.close()
        harbor._built.cache_clear()
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize(
    "image, run, has_file",
    [
        ("ubuntu:24.04", "RUN apt-get update && apt-get install -y gcc", True),
        ("ubuntu:22.04", "RUN apt-get install -y gcc", True),
        ("ubuntu:24.04", "RUN apt-get install -y --no-install-recommends gcc", False),
        ("ubuntu:24.04", "RUN echo no apt here", False),
        ("debian:trixie", "RUN apt-get install -y gcc", False),
    ],
)
def test_an_ubuntu_apt_line_with_recommends_brings_file(tmp_path, image, run, has_file):
    """sha256's `apt-get install -y gcc` on ubuntu:24.04 brings `file` (Ubuntu's Recommends
    reach it, Debian trixie's do not); one of its tests runs `file`. The Ubuntu stand-in adds
    `file` when an apt line installs with Recommends; a Debian image does not get it."""
    plan = harbor.plan(tmp_path, f"FROM {image}\n{run}\n", harbor.BuildOptions())
    assert plan.spec is not None
    assert ("file" in plan.spec.packages) is has_file


@pytest.mark.parametrize(
    "image, run, permissive",
    [
        ("ubuntu:24.04", "RUN apt-get install -y --no-install-recommends build-essential", True),
        ("ubuntu@sha256:4fbb8e6a", "RUN apt-get install -y gcc", True),  # no tag: latest, 24.04
        ("ubuntu:22.04", "RUN apt-get install -y gcc", False),  # bookworm's GCC 12, as 22.04's
        ("debian:trixie", "RUN apt-get install -y gcc", False),  # trixie's own GCC 14
        ("python:3.13-slim", "RUN apt-get install -y gcc", False),
    ],
)
def test_ubuntu_24_04s_c_compiler_rules_hold_on_trixies_gcc_14(
    tmp_path, monkeypatch, image, run, permissive
):
    """mpifileutils-dsync's Dockerfile builds lwgrp on ubuntu:24.04, whose GCC 13 warns of an
    implicit function declaration; the stand-in's GCC 14 (Debian trixie's) makes that an error
    and the build failed. The stand-in's root file system is built with a customize hook that
    gives GCC's C compiler `-fpermissive` (GCC 14 then warns as GCC 13 did); an image whose
    GCC the stand-in's is (trixie's 14, bookworm's 12 for 22.04) gets no hook. mmdebstrap is
    a stand-in here, as above: it records its arguments."""
    plan = harbor.plan(tmp_path, f"FROM {image}\n{run}\n", harbor.BuildOptions())
    assert plan.spec is not None
    assert (GCC13_C_HOOK in plan.spec.hooks) is permissive, plan.spec
    args = _mmdebstrap_args(tmp_path, monkeypatch, plan.spec)
    assert (f"--customize-hook={GCC13_C_HOOK}" in args) is permissive, args


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler (gcc)")
def test_the_gcc_hook_writes_a_specs_file_gcc_reads_for_c_and_not_for_cpp(tmp_path):
    """The hook's script, run with this machine's real GCC (its `-print-file-name=`, where GCC
    looks for a `specs` file, pointed at a temp folder): GCC reading the specs file it writes
    passes `-fpermissive` to the C compiler (cc1) and not to the C++ one (cc1plus, where it
    would accept far more)."""
    real = shutil.which("gcc")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcc").write_text(
        f'#!/bin/sh\n[ "$1" = "-print-file-name=" ] && {{ echo "{tmp_path}/"; exit 0; }}\n'
        f'exec {real} "$@"\n'
    )
    (bin_dir / "gcc").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["sh", "-c", GCC13_C_SCRIPT], env=env, check=True, timeout=60)
    specs = tmp_path / "specs"
    (tmp_path / "a.c").write_text("int main(void) { return helper(); }\n")
    (tmp_path / "a.cc").write_text("int main() { return 0; }\n")

    def driven(source: str) -> str:
        cmd = [real, f"-specs={specs}", "-###", "-c", str(tmp_path / source), "-o", "/dev/null"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return "\n".join(x for x in proc.stderr.splitlines() if "/cc1" in x)

    assert "-fpermissive" in driven("a.c")
    assert "cc1plus" in driven("a.cc") and "-fpermissive" not in driven("a.cc")


def test_a_zero_after_a_run_step_that_hid_a_failed_download_names_it(tmp_path, fake_root, capsys):
    """three-body-problem's `RUN curl ... https://sh.rustup.rs | sh` exited 0 on this
    machine (the pipe's status is sh's), so the build went on without `cargo` and the
    oracle scored 0 with only `cargo: command not found` to say why. A RUN step that exits 0
    with a failed download in its output is kept with the image, and a 0's line names it.
    (The step prints curl's message itself: tests send no traffic beyond loopback.)"""
    from skyrl_cli.eval_oracle import run_reference_agent

    failing = (
        "#!/bin/bash\necho 'cargo: command not found' >&2\necho 0 > /logs/verifier/reward.txt\n"
    )
    tasks = []
    for name, run in (
        ("hidden", "echo 'curl: (6) Could not resolve host: sh.rustup.invalid' >&2 | true"),
        ("plain", "echo fine"),
    ):
        _task(tmp_path / name, f"FROM debian:bookworm\nWORKDIR /app\nRUN {run}\n")
        (tmp_path / name / "tests" / "test.sh").write_text(failing)
        tasks.append(load_harbor_task(tmp_path / name))
    run_reference_agent("oracle", tasks, {}, {"timeout_s": 20})
    out = capsys.readouterr().out.splitlines()
    hidden = next(line for line in out if line.startswith("hidden: reward 0"))
    assert hidden.endswith(
        "(verifier: cargo: command not found) (build: RUN echo 'curl: (6) Could not resolve "
        "host: sh.rustup.invalid' >&2 | true: exited 0, but a download in it failed: curl: (6) "
        "Could not resolve host: sh.rustup.invalid)"
    ), hidden
    plain = next(line for line in out if line.startswith("plain: reward 0"))
    assert "build:" not in plain, plain


PYTEST_TAIL = """../tests/test_outputs.py FF
E   AssertionError: decrypted.txt should exist in /app
E   FileNotFoundError: [Errno 2] No such file or directory: '/app/decrypted.txt'
=========================== short test summary info ============================
FAILED ../tests/test_outputs.py::test_decrypted_file_exists - AssertionError:...
FAILED ../tests/test_outputs.py::test_decrypted_message_matches - FileNotFoun...
============================== 2 failed in 0.03s ===============================
"""


def test_a_zero_names_pytests_failing_test_not_its_summary_bar():
    """Real verifiers end with pytest's `=== 2 failed in 0.03s ===` bar, which a 0's line
    showed as the verifier's error (cipher, three-body-problem); the last failing test's
    line says more."""
    from skyrl_cli.eval_oracle import last_error_line

    assert last_error_line(PYTEST_TAIL) == (
        "FAILED ../tests/test_outputs.py::test_decrypted_message_matches - FileNotFoun..."
    )
    assert last_error_line("ok\nModuleNotFoundError: No module named 'x'\ndone\n") == (
        "ModuleNotFoundError: No module named 'x'"
    )
