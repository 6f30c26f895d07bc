"""A hostile SWE-bench episode, instance or patch never runs code or touches files on the host.

Every attack aims at a canary in the test's own temp dir (a file an attack would create, or
a host folder an attack would delete from): the episode runs in the sandbox, where that dir is
hidden, so only the host side of the harness could touch it. Each attack must leave the
canary untouched, and a refused instance says why in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from environments.swe import SWEEnv, instance_task
from environments.swe_harness import GradeResult, grade
from tasks.swe import load_instances
from tests.conftest import skyrl

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # the sandbox's fallback notice

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    proc = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip # arguments grouped by meaning, as a reader scans them
    return proc.stdout


def _diff(repo: Path) -> str:
    _git(repo, "add", "-A")
    out = _git(repo, "diff", "--cached", "--binary")
    _git(repo, "reset", "-q", "--hard")
    _git(repo, "clean", "-qfdx")
    return out


def _make_repo(repos: Path, files: dict[str, str] | None = None) -> tuple[Path, dict[str, Any]]:
    """`acme/calc`: `add` subtracts; the gold patch fixes it and the test patch adds
    `tests/test_add.py` (a new test file, as real SWE-bench test patches often do)."""
    repo = repos / "acme__calc"
    (repo / "tests").mkdir(parents=True)
    _git(repo, "init", "-q")
    for rel, text in {"calc.py": CALC, "tests/test_calc.py": TEST, "README.md": "calc\n",
                      **(files or {})}.items():  # fmt: skip # arguments grouped by meaning, as a reader scans them
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text(CALC.replace("a - b", "a + b"))
    patch = _diff(repo)
    (repo / "tests/test_add.py").write_text(NEW_TEST)
    (repo / "tests/test_calc.py").write_text(TEST + "    assert add(1, 0) == 1\n")
    test_patch = _diff(repo)
    instance = {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "version": "1.0",
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "add() subtracts",
        "FAIL_TO_PASS": ["tests/test_add.py::test_add"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
    }
    return repo, instance


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SKYRL_SWE_PIP_INDEX", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def calc(tmp_path: Path, cache: Path) -> tuple[Path, dict[str, Any]]:
    """(repos dir, instance) of a clean `acme/calc`."""
    repos = tmp_path / "repos"
    _, instance = _make_repo(repos)
    return repos, instance


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """Where an attack that ran on the host would leave a file (must stay absent)."""
    return tmp_path / "canary"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A host folder an attack would delete from (must keep its files)."""
    folder = tmp_path / "victim"
    folder.mkdir()
    for name in ("test_add.py", "test_calc.py", "keep.txt"):
        (folder / name).write_text("host data\n")
    return folder


def _intact(victim: Path) -> bool:
    return sorted(p.name for p in victim.iterdir()) == ["keep.txt", "test_add.py", "test_calc.py"]


def test_the_clean_instance_resolves(calc: tuple[Path, dict[str, Any]]) -> None:
    """The fixture is a real, solvable instance (so the refusals below are not accidents)."""
    repos, inst = calc
    result = grade(inst, inst["patch"], repos_dir=repos)
    assert result.resolved and result.error is None, (result.error, result.log)


# --------------------------------------------- 1. host git never runs what the episode wrote

AGENT_GIT_ATTACKS = {
    "fsmonitor": 'git config core.fsmonitor "touch {canary}; false"',
    "clean-filter": (
        'git config filter.x.clean "touch {canary}; cat" && echo "* filter=x" > .gitattributes'
    ),
    "textconv": (
        'git config diff.x.textconv "touch {canary}; cat" && echo "* diff=x" > .gitattributes'
    ),
    "hook": (
        "for h in post-index-change post-checkout pre-commit reference-transaction; do "
        "printf '#!/bin/sh\\ntouch {canary}\\n' > .git/hooks/$h; chmod +x .git/hooks/$h; done"
    ),
    "hooks-path": (
        "mkdir -p h && printf '#!/bin/sh\\ntouch {canary}\\n' > h/post-index-change && "
        "chmod +x h/post-index-change && git config core.hooksPath h"
    ),
    "nested-repo": (
        "mkdir sub && cd sub && git init -q && git config core.fsmonitor 'touch {canary}; false'"
        " && echo x > f && git add f && cd .."
    ),
    "gitfile": "rm -rf .git && printf 'gitdir: /nonexistent-{canary}\\n' > .git",
}


@pytest.mark.parametrize("attack", sorted(AGENT_GIT_ATTACKS))
def test_git_config_written_by_the_agent_never_runs_on_the_host(
    calc: tuple[Path, dict[str, Any]], canary: Path, attack: str
) -> None:
    """The agent's `.git` (config, hooks, attributes) is its own: taking its diff on the host
    after <submit/> reads none of it, and the fix still counts."""
    repos, inst = calc
    env = SWEEnv(max_turns=4, repos_dir=repos)
    env.reset(options={"task": instance_task(inst)})
    obs, *_ = env.step(f"<bash>{AGENT_GIT_ATTACKS[attack].format(canary=canary)}</bash>")
    assert "[exit code: 0]" in obs, obs
    obs, *_ = env.step("<bash>sed -i 's/a - b/a + b/' calc.py && echo x >> README.md</bash>")
    assert "[exit code: 0]" in obs, obs
    obs, reward, done, _, info = env.step("<submit/>")
    assert not canary.exists(), f"{attack}: the host ran the episode's git config"
    assert done and info["resolved"] and reward == 1.0, (obs, info["grade_error"])
    assert "calc.py" in info["model_patch"] and ".git/" not in info["model_patch"]


def test_an_agent_function_cannot_plant_git_config_either(
    calc: tuple[Path, dict[str, Any]], canary: Path
) -> None:
    """`grade(agent=...)` edits a checkout the host then diffs: same rule as the sandbox."""
    repos, inst = calc

    def agent(work: Path, instance: dict[str, Any]) -> None:
        with open(work / ".git" / "config", "a") as f:
            f.write(f'[core]\n\tfsmonitor = "touch {canary}; false"\n')
            f.write(f'[filter "x"]\n\tclean = "touch {canary}; cat"\n')
        (work / ".gitattributes").write_text("* filter=x\n")
        (work / "calc.py").write_text(CALC.replace("a - b", "a + b"))

    result = grade(inst, agent=agent, repos_dir=repos)
    assert not canary.exists()
    assert result.resolved, (result.error, result.log)


def _git_dir_patch(canary: Path) -> str:
    """A model patch that appends an fsmonitor command to `.git/config` and adds a hook (git
    apply refuses `.git/` paths; `patch --fuzz` does not)."""
    config = (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
        "\tlogallrefupdates = true\n"
    )
    lines = config.splitlines()
    hunk = "".join(f" {line}\n" for line in lines) + f'+\tfsmonitor = "touch {canary}; false"\n'
    hook = f"#!/bin/sh\ntouch {canary}\n"
    return (
        "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n"
        f"@@ -1,{len(lines)} +1,{len(lines) + 1} @@\n{hunk}"
        "diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\n"
        "new file mode 100755\n--- /dev/null\n+++ b/.git/hooks/post-checkout\n"
        "@@ -0,0 +1,2 @@\n" + "".join(f"+{line}\n" for line in hook.splitlines())
    )


def test_a_model_patch_into_git_dir_is_refused(
    calc: tuple[Path, dict[str, Any]], canary: Path
) -> None:
    repos, inst = calc
    for patch in (_git_dir_patch(canary) + inst["patch"], inst["patch"] + _git_dir_patch(canary)):
        result = grade(inst, patch, repos_dir=repos)
        assert not canary.exists(), "the fallback `patch` wrote .git/ and host git ran it"
        assert not result.resolved and not result.patch_applied
        assert result.error is not None and ".git" in result.error and "\n" not in result.error


def test_git_dir_writes_are_inert_even_past_the_patch_check(
    calc: tuple[Path, dict[str, Any]], canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class, not the instance: with the path check switched off, the `.git/` that
    `patch --fuzz` writes in the graded tree is plain files, since that tree's repository
    lives outside it; host git never reads them and the fix is still graded."""
    import environments.swe_harness as harness

    monkeypatch.setattr(harness, "check_patch", lambda text, what: [])
    repos, inst = calc
    files = {
        ".git/config": f'[core]\n\tfsmonitor = "touch {canary}; false"\n\thooksPath = .git/h\n',
        ".git/hooks/post-checkout": f"#!/bin/sh\ntouch {canary}\n",
        ".git/h/post-checkout": f"#!/bin/sh\ntouch {canary}\n",
        ".git/HEAD": "ref: refs/heads/main\n",
    }
    patch = "".join(
        f"diff --git a/{rel} b/{rel}\nnew file mode 100755\n--- /dev/null\n+++ b/{rel}\n"
        f"@@ -0,0 +1,{len(text.splitlines())} @@\n"
        + "".join(f"+{line}\n" for line in text.splitlines())
        for rel, text in files.items()
    )
    result = grade(inst, patch + inst["patch"], repos_dir=repos, keep_workdir=True)
    assert result.workdir is not None
    assert (result.workdir / "box/repo/.git/config").is_file()  # written, as plain data
    shutil.rmtree(result.workdir)
    assert "patch --batch --fuzz=5 -p1 -i model.patch  (exit 0)" in result.log, result.log
    assert not canary.exists(), "host git read the .git/ a patch wrote"
    assert result.resolved, (result.error, result.log)


# ------------------------------------------------------ 2. option injection through fields

INJECT = "--upload-pack=touch {canary}; git-upload-pack"


def test_a_base_commit_that_is_an_option_is_refused(
    calc: tuple[Path, dict[str, Any]], canary: Path, tmp_path: Path
) -> None:
    repos, inst = calc
    evil = {**inst, "base_commit": INJECT.format(canary=canary)}
    result = grade(evil, inst["patch"], repos_dir=repos)
    assert not canary.exists()
    assert result.error is not None and "base_commit" in result.error
    assert "\n" not in result.error and not result.resolved
    with pytest.raises(ValueError, match="base_commit"):
        SWEEnv(repos_dir=repos).reset(options={"task": instance_task(evil)})
    assert not canary.exists()
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(evil) + "\n")
    with pytest.raises(ValueError, match="base_commit"):
        load_instances(path)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("base_commit", "HEAD"),
        ("base_commit", "abc"),
        ("base_commit", "-c core.fsmonitor=x"),
        ("repo", "--upload-pack=x/y"),
        ("repo", "../acme"),
        ("repo", "acme/calc/extra"),
        ("instance_id", "../../escaped"),
        ("instance_id", "/abs"),
        ("instance_id", ".."),
        ("version", "../../../../escaped"),
        ("version", "1.0/x"),
    ],
)
def test_malformed_instance_fields_are_refused(
    calc: tuple[Path, dict[str, Any]], tmp_path: Path, key: str, value: str
) -> None:
    repos, inst = calc
    evil = {**inst, key: value}
    result = grade(evil, inst["patch"], repos_dir=repos)
    assert not result.resolved and result.error is not None and key in result.error
    assert "\n" not in result.error
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(evil) + "\n")
    with pytest.raises(ValueError, match=key):
        load_instances(path)
    assert not list(tmp_path.parent.rglob("escaped*"))


# ------------------------------------------------ 3. the repository's build never runs here

BACKEND = """import pathlib
pathlib.Path({canary!r}).write_text("built on the host")
def get_requires_for_build_wheel(config_settings=None):
    return []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("no")
"""
PYPROJECT = """[build-system]
requires = []
build-backend = "evil_backend"
backend-path = ["."]

[project]
name = "calc"
version = "1.0"
"""


def test_a_local_requirement_is_not_built_on_the_host(
    tmp_path: Path, cache: Path, canary: Path
) -> None:
    files = {
        "requirements.txt": ".\n",
        "pyproject.toml": PYPROJECT,
        "evil_backend.py": BACKEND.format(canary=str(canary)),
    }
    repos = tmp_path / "repos"
    _, inst = _make_repo(repos, files)
    result = grade(inst, inst["patch"], repos_dir=repos)
    assert not canary.exists(), "pip ran the repository's build backend on the host"
    assert not result.resolved and result.error is not None and "\n" not in result.error
    assert "'.'" in result.error, result.error
    listed = {**inst, "version": "2.0", "requirements": ["-e ."]}
    result = grade(listed, inst["patch"], repos_dir=repos)
    assert not canary.exists() and result.error is not None and "'-e .'" in result.error


@pytest.mark.parametrize(
    "line",
    [
        ".",
        "./sub",
        "-e .",
        "--editable=.",
        "/abs/dir",
        "../up",
        "git+https://example.com/x.git",
        "file:///tmp/x",
        "https://example.com/x.tar.gz",
        "x @ file:///tmp/x",
        "-r other.txt",
        "--requirement=other.txt",
        "-c constraints.txt",
        "--index-url http://example.com/simple",
        "--extra-index-url=http://example.com/simple",
        "-f /tmp/wheels",
        "--find-links /tmp/wheels",
        "--trusted-host example.com",
        "x==1 --config-settings=a=b",
        "x==1 --install-option=--prefix=/",
        "${HOME}/x",
        "x \\",
    ],
)
def test_requirement_lines_that_could_build_or_redirect_are_refused(
    calc: tuple[Path, dict[str, Any]], canary: Path, line: str
) -> None:
    repos, inst = calc
    result = grade({**inst, "requirements": ["six", line]}, inst["patch"], repos_dir=repos)
    assert result.error is not None and repr(line) in result.error, result.error
    assert "\n" not in result.error and "pip install" not in result.log


# ----------------------------------------------------- 4. paths stay inside their folders


def _up_to_root() -> str:
    """`../` enough times to climb from a harness checkout (`<tmp>/skyrl-swe-X/repo`) to /."""
    return "../" * (len(Path(tempfile.gettempdir()).resolve().parts) + 1)


@pytest.mark.parametrize("form", ["absolute", "dotdot", "git-dir", "option"])
def test_a_test_patch_path_outside_the_checkout_is_refused(
    calc: tuple[Path, dict[str, Any]], victim: Path, form: str
) -> None:
    repos, inst = calc
    target = str(victim / "test_add.py")
    path = {
        "absolute": target,
        "dotdot": _up_to_root() + target.lstrip("/"),
        "git-dir": ".git/hooks/post-checkout",
        "option": f"--rootdir={victim}",
    }[form]
    evil_test_patch = (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        "@@ -0,0 +1 @@\n+x = 1\n"
    ) + inst["test_patch"]
    result = grade({**inst, "test_patch": evil_test_patch}, inst["patch"], repos_dir=repos)
    assert _intact(victim), "the harness deleted a host file named by the test patch"
    assert result.error is not None and "test_patch" in result.error and not result.resolved
    assert "\n" not in result.error


def _symlink_patch(repos: Path, inst: dict[str, Any], target: Path) -> str:
    """A model patch: the fix, and `tests/` replaced by a symlink to `target`."""
    work = repos.parent / "scratch"
    _git(repos.parent, "clone", "-q", str(repos / "acme__calc"), str(work))
    _git(work, "checkout", "-q", inst["base_commit"])
    _git(work, "rm", "-rq", "tests")
    (work / "tests").symlink_to(target)
    (work / "calc.py").write_text(CALC.replace("a - b", "a + b"))
    return _diff(work)


def test_a_symlink_from_the_model_patch_does_not_lead_the_reset_out(
    calc: tuple[Path, dict[str, Any]], victim: Path
) -> None:
    """`tests -> /host/folder`, then the reset of the test patch's new file
    `tests/test_add.py` must not delete `/host/folder/test_add.py`."""
    repos, inst = calc
    patch = _symlink_patch(repos, inst, victim)
    assert "new file mode 120000" in patch
    result = grade(inst, patch, repos_dir=repos)
    assert _intact(victim), "the test-file reset followed the patch's symlink to the host"
    assert result.patch_applied and result.resolved, (result.error, result.log)


def test_a_model_patch_cannot_write_through_its_own_symlink(
    calc: tuple[Path, dict[str, Any]], victim: Path
) -> None:
    """`link -> /host/folder` and then `link/pwned` in one patch: every way of applying it
    refuses the second file (git apply: beyond a symlink; GNU patch: invalid file name)."""
    repos, inst = calc
    patch = (
        f"diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n"
        f"@@ -0,0 +1 @@\n+{victim}\n\\ No newline at end of file\n"
        "diff --git a/link/pwned b/link/pwned\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/link/pwned\n@@ -0,0 +1 @@\n+pwned\n"
    ) + inst["patch"]
    result = grade(inst, patch, repos_dir=repos)
    assert _intact(victim) and not result.resolved


def test_an_ed_script_patch_runs_nothing(calc: tuple[Path, dict[str, Any]], canary: Path) -> None:
    """GNU patch hands ed-style diffs to `ed`; the fallback runs without a PATH to find it."""
    repos, inst = calc
    script = f"Index: a/calc.py\n2c\n    return a + b\n.\n!touch {canary}\nw\n"
    result = grade(inst, script, repos_dir=repos)
    assert not canary.exists() and not result.resolved


def test_a_symlink_made_by_the_agent_does_not_lead_the_reset_out(
    calc: tuple[Path, dict[str, Any]], victim: Path
) -> None:
    repos, inst = calc
    env = SWEEnv(max_turns=3, repos_dir=repos)
    env.reset(options={"task": instance_task(inst)})
    cmd = f"rm -rf tests && ln -s {victim} tests && sed -i 's/a - b/a + b/' calc.py"
    obs, *_ = env.step(f"<bash>{cmd}</bash>")
    assert "[exit code: 0]" in obs, obs
    _, reward, _, _, info = env.step("<submit/>")
    assert _intact(victim)
    assert "new file mode 120000" in info["model_patch"] and reward == 1.0, info["grade_error"]


def test_an_instance_id_cannot_write_logs_outside_the_output(
    calc: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    from agents.eval_swe import save_result

    out = tmp_path / "deep" / "out"
    with pytest.raises(ValueError, match="instance_id"):
        save_result(out, GradeResult("../../../escaped", "diff"))
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.rglob("result.json"))

    repos, inst = calc
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps({**inst, "instance_id": "../../../escaped"}) + "\n")
    proc = skyrl("eval", "--suite", str(path), "--repos", str(repos), "--agent", "empty",
                 "--output", str(out), cwd=tmp_path, check=False)  # fmt: skip # the command line reads as typed
    assert proc.returncode == 2, proc.stderr
    assert "instance_id" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.rglob("result.json"))


# --------------------------------------------------------- the patch path reader, directly


@pytest.mark.parametrize(
    "header",
    [
        "diff --git a/x b/.GIT/config",
        'diff --git "a/x" "b/\\056git/config"',
        "rename to ../outside",
        "copy to /etc/x",
        "Index: .git/config",
        "+++ b/sub/.git/hooks/pre-commit\t2024-01-01",
        "*** /etc/passwd",
    ],
)
def test_every_header_form_is_checked(header: str) -> None:
    from tasks.swe.checks import check_patch

    with pytest.raises(ValueError, match="the model patch names the path"):
        check_patch(f"{header}\n", "the model patch")


def test_hunk_lines_that_look_like_headers_are_content() -> None:
    """A removed line `-- see ../x` is `--- see ../x` in the patch: content, not a path."""
    from tasks.swe.checks import check_patch

    patch = (
        "diff --git a/q.sql b/q.sql\n--- a/q.sql\n+++ b/q.sql\n@@ -1,3 +1,2 @@\n"
        " select 1;\n--- see ../../etc/passwd\n+++ /abs/too\n-*** x\n"
    )
    assert check_patch(patch, "the model patch") == ["q.sql", "q.sql", "q.sql", "q.sql"]


@pytest.mark.skipif(
    subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True).returncode
    != 0
    or not shutil.which("bwrap"),
    reason="official environments are built with /usr/bin/python3's pip, under bwrap",
)
def test_a_rows_own_spec_runs_its_commands_only_in_the_sandbox(tmp_path: Path, monkeypatch) -> None:
    """A row's `spec` is shell commands the harness runs (pre_install, install,
    eval_commands, test_cmd): each one tries to write a canary in the test's temp dir, to
    read a host secret into the log, and to write into the environment cache. None reaches
    the host: the canaries do not exist, the secret is not in the log, the cached
    environment is as built."""
    top = Path(tempfile.mkdtemp(prefix="skyrl-hostile-spec-"))
    top.chmod(0o755)
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(top / "cache"))
    secret = tmp_path / "secret.txt"
    secret.write_text("host-secret-4711")
    canary = tmp_path / "canary"

    def attack(n: int) -> str:
        return (
            f"echo pwned > {canary}{n} || true; cat {secret} || true; "
            f"touch {top}/cache/escaped{n} || true; echo pwned > /usr/local/injected{n} || true"
        )

    repo = tmp_path / "repos" / "evil__spec"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "test_calc.py").write_text(NEW_TEST)
    _git(repo, "add", "-A")
    test_patch = _git(repo, "diff", "--cached", base)
    _git(repo, "reset", "-q", "--hard", base)
    row = {
        "instance_id": "evil__spec-1", "repo": "evil/spec", "base_commit": base,
        "environment_setup_commit": base, "version": "1.0",
        "patch": "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n",
        "test_patch": test_patch, "FAIL_TO_PASS": ["test_calc.py::test_add"], "PASS_TO_PASS": [],
        "spec": {"python": "3.11", "pre_install": [attack(1)], "install": attack(2),
                 "eval_commands": [attack(3)], "test_cmd": f"{attack(4)}; true"},
    }  # fmt: skip # one row
    result = grade(row, row["patch"], repos_dir=tmp_path / "repos")
    try:
        assert result.python_env == "built", (result.error, result.log[-2000:])
        for n in (1, 2, 3, 4):
            assert not Path(f"{canary}{n}").exists()
            assert not (top / "cache" / f"escaped{n}").exists()
        assert "host-secret-4711" not in result.log + result.build_log
        assert f"cat: {secret}: No such file" in result.build_log  # the attack did run, inside
        env_dirs = list((top / "cache" / "swe-envs" / "official").glob("evil__spec-*"))
        assert len(env_dirs) == 1
        assert not list((env_dirs[0] / "local").glob("injected*"))  # only the copy was written
    finally:
        shutil.rmtree(top, ignore_errors=True)
