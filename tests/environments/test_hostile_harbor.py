"""Hostile Harbor tasks and agents: a task folder is data, and the verifier's reward is the
verifier's own.

A task folder is attacker-controlled: its task.toml cannot read the trainer's environment
(`${VAR}`), its symlinks cannot reach host files, its numbers cannot break an episode. An
agent cannot forge the reward: not by planting files the verifier writes through, not by
code the verifier runs (the bundled `fix-sum-script` runs the agent's `sum.sh`), not by
killing or outliving the verifier, not by a repository config that git executes.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pytest

from environments import harbor
from environments.sandbox import bwrap_available
from environments.shell import ShellEnv
from tasks.harbor import SUITE_DIR, load_harbor_task

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="Harbor's paths need bubblewrap")
TOKEN = "tok-" + secrets.token_hex(12)


@pytest.fixture(scope="module", autouse=True)
def cache():
    """An image cache the sandbox's uid can reach (pytest's temp dirs are 0700)."""
    root = tempfile.mkdtemp(prefix="skyrl-harbor-hostile-")
    old = os.environ.get("SKYRL_HARBOR_CACHE")
    os.environ["SKYRL_HARBOR_CACHE"] = root
    harbor._built.cache_clear()
    yield Path(root)
    if old is None:
        os.environ.pop("SKYRL_HARBOR_CACHE", None)
    else:
        os.environ["SKYRL_HARBOR_CACHE"] = old
    harbor._built.cache_clear()


def make_folder(root: Path, toml: str = 'version = "1.0"\n', test_sh: str | None = None) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM x\nWORKDIR /app\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(
        test_sh or "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    )
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(
        '#!/bin/bash\necho "solution saw [$WANT]" > /app/seen\n'
    )
    (root / "instruction.md").write_text("Do the thing.")
    (root / "task.toml").write_text(toml)
    return root


def episode(task, *commands: str, timeout_s: float = 20.0, oracle: bool = False):
    """Run `commands` as the agent, then submit: (reward, info)."""
    env = ShellEnv(timeout_s=timeout_s, max_turns=len(commands) + 2)
    try:
        env.reset(options={"task": task})
        for command in commands:
            obs = env.step(f"<bash>{command}</bash>")[0]
            assert "[exit code:" in obs, obs
        if oracle:
            env.run_oracle()
            seen = env.files / "seen"
            info_seen = seen.read_text() if seen.is_file() else ""
        _, reward, terminated, _, info = env.step("<submit/>")
        assert terminated
        if oracle:
            info["seen"] = info_seen
        return reward, info
    finally:
        env.close()


# ---------------------------------------------------------------------------- task.toml env

LEAKY_TEST = '#!/bin/bash\necho "verifier saw [$TOKEN]"\nprintf \'{"%s": 1}\' "$TOKEN" > /logs/verifier/reward.json\n'


@pytest.mark.parametrize("table", ["verifier", "solution"])
def test_task_toml_cannot_read_the_trainers_environment(tmp_path, monkeypatch, table):
    monkeypatch.setenv("SKYRL_HOSTILE_SECRET", TOKEN)
    toml = f'version = "1.0"\n[{table}.env]\nTOKEN = "${{SKYRL_HOSTILE_SECRET}}"\n'
    root = make_folder(tmp_path / "t", toml, LEAKY_TEST)
    with pytest.raises(ValueError) as refused:
        load_harbor_task(root)
    message = str(refused.value)
    assert "SKYRL_HOSTILE_SECRET" in message and f"[{table}" in message and TOKEN not in message
    assert "\n" not in message


@needs_bwrap
def test_a_default_is_used_and_the_host_value_never(tmp_path, monkeypatch):
    """`${NAME:-default}` reads as its default (Harbor's reading where NAME is unset); text
    around a `${...}` is a literal, as in Harbor."""
    monkeypatch.setenv("SKYRL_HOSTILE_SECRET", TOKEN)
    monkeypatch.setenv("WANT", TOKEN)
    toml = (
        'version = "1.0"\n[verifier.env]\nTOKEN = "${SKYRL_HOSTILE_SECRET:-public}"\n'
        'OTHER = "x-${SKYRL_HOSTILE_SECRET}"\n[solution.env]\nWANT = "${WANT:-seven}"\n'
    )
    test_sh = LEAKY_TEST + 'echo "other [$OTHER]"\n'
    task = load_harbor_task(make_folder(tmp_path / "t", toml, test_sh))
    assert task.metadata["verifier_env"] == {
        "TOKEN": "public",
        "OTHER": "x-${SKYRL_HOSTILE_SECRET}",
    }
    reward, info = episode(task, "true", oracle=True)
    assert TOKEN not in repr(info) and info["rewards"] == {"public": 1.0}, info
    assert "other [x-${SKYRL_HOSTILE_SECRET}]" in info["verifier"]["output"]
    assert info["seen"] == "solution saw [seven]\n"


# ---------------------------------------------------------------------------- symlinks


@pytest.mark.parametrize(
    "link",
    ["instruction.md", "environment", "tests/extra.txt", "environment/files/x", "solution"],
)
def test_a_symlink_out_of_the_task_folder_is_refused_at_load(tmp_path, link):
    secret_dir = tmp_path / "host"
    secret_dir.mkdir()
    (secret_dir / "id_ed25519").write_text(TOKEN)
    (secret_dir / "Dockerfile").write_text("FROM x\nWORKDIR /app\nCOPY . /app/\n")
    (secret_dir / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    root = make_folder(tmp_path / "t")
    target = secret_dir if link in ("environment", "solution") else secret_dir / "id_ed25519"
    path = root / link
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    elif path.exists():
        path.unlink()
    path.symlink_to(target)
    with pytest.raises(ValueError) as refused:
        task = load_harbor_task(root)
        assert TOKEN not in task.prompt  # what happened before: the host file was the prompt
    message = str(refused.value)
    assert link in message and "outside" in message and TOKEN not in message, message
    assert "\n" not in message


def test_links_inside_the_task_folder_are_fine(tmp_path):
    root = make_folder(tmp_path / "t")
    (root / "environment" / "files").mkdir()
    (root / "environment" / "files" / "a.txt").write_text("a")
    (root / "environment" / "files" / "b.txt").symlink_to("a.txt")
    (root / "docs.md").symlink_to("instruction.md")
    assert load_harbor_task(root).prompt == "Do the thing."


@needs_bwrap
def test_a_task_row_naming_a_folder_with_outside_links_is_refused_at_reset(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(TOKEN)
    root = make_folder(tmp_path / "t")
    (root / "environment" / "leak.txt").symlink_to(secret)
    row = {"id": "t", "env": "shell", "prompt": "x", "metadata": {"task_dir": str(root)}}
    env = ShellEnv(timeout_s=10)
    try:
        with pytest.raises(ValueError, match="outside the task folder"):
            env.reset(options={"task": row})
        (root / "environment" / "leak.txt").unlink()
        (root / "instruction.md").unlink()  # a row brings its own prompt: not needed
        (root / "task.toml").unlink()
        assert env.reset(options={"task": row})[0].startswith("x")
    finally:
        env.close()


# ---------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    "toml, field",
    [
        ("[verifier]\ntimeout_sec = 1e300\n", "[verifier] timeout_sec"),
        ("[verifier]\ntimeout_sec = nan\n", "[verifier] timeout_sec"),
        ("[verifier]\ntimeout_sec = inf\n", "[verifier] timeout_sec"),
        ("[verifier]\ntimeout_sec = -1\n", "[verifier] timeout_sec"),
        (f"[verifier]\ntimeout_sec = {'9' * 400}\n", "[verifier] timeout_sec"),
        ("[agent]\ntimeout_sec = 1e300\n", "[agent] timeout_sec"),
        ("[agent]\ntimeout_sec = nan\n", "[agent] timeout_sec"),
        ("[environment]\nbuild_timeout_sec = inf\n", "[environment] build_timeout_sec"),
        ("[environment]\ncpus = nan\n", "[environment] cpus"),
        ("[environment]\nmemory_mb = 1e30\n", "[environment] memory_mb"),
        ("[environment]\nstorage_mb = -5\n", "[environment] storage_mb"),
        ("[metadata]\nexpert_time_estimate_min = nan\n", "[metadata] expert_time_estimate_min"),
        ("[metadata]\nscores = [1.0, -inf]\n", "[metadata] scores"),
    ],
)
def test_every_number_in_task_toml_is_checked_at_load(tmp_path, toml, field):
    root = make_folder(tmp_path / "t", 'version = "1.0"\n' + toml)
    with pytest.raises(ValueError) as refused:
        load_harbor_task(root)
    message = str(refused.value)
    assert field in message and "\n" not in message, message


@needs_bwrap
def test_a_huge_timeout_never_raises_out_of_step(tmp_path):
    """Before: `timeout_sec = 1e300` loaded, and `<submit/>` raised OverflowError."""
    huge = make_folder(tmp_path / "huge", 'version = "1.0"\n[verifier]\ntimeout_sec = 1e300\n')
    row = {"id": "t", "env": "shell", "prompt": "x", "metadata": {"task_dir": str(huge)}}
    plain = make_folder(tmp_path / "plain")
    row_huge = {**row, "metadata": {"task_dir": str(plain), "verifier_timeout_s": 1e300}}
    env = ShellEnv(timeout_s=10)
    try:
        for task in (row, row_huge):
            with pytest.raises(ValueError, match="timeout"):
                env.reset(options={"task": task})
    finally:
        env.close()


# ---------------------------------------------------------------------------- the reward


def bundled(name: str):
    return load_harbor_task(SUITE_DIR / name)


def fix_sum(extra: str) -> str:
    """The agent's sum.sh: a correct sum, with `extra` run first."""
    body = (
        f'{extra}\ntotal=0\nwhile read -r n; do total=$((total + n)); done < "$1"\necho "$total"\n'
    )
    return f"cat > sum.sh <<'EOF'\n#!/bin/bash\n{body}EOF"


FORGES = {
    # the red team's: write a 1, then kill every process the verifier has
    "kill-all": "cat > sum.sh <<'EOF'\necho 1 > /logs/verifier/reward.txt; kill -9 -1\nEOF",
    "kill-parents": "cat > sum.sh <<'EOF'\necho 1 > /logs/verifier/reward.txt; kill -9 $PPID 1\nEOF",
    # reward.json wins over the reward.txt the verifier writes afterwards
    "reward-json": "cat > sum.sh <<'EOF'\necho '{\"reward\": 1}' > /logs/verifier/reward.json\nEOF",
    # a writer left behind races the verifier's own write
    "straggler": "cat > sum.sh <<'EOF'\n(while :; do echo 1 > /logs/verifier/reward.txt; "
    "echo '{\"reward\": 1}' > /logs/verifier/reward.json; done) >/dev/null 2>&1 &\nEOF",
    # the verifier script itself rewritten while it runs (bash reads it as it goes)
    "rewrite-test-sh": "cat > sum.sh <<'EOF'\nprintf '\\necho 1 > /logs/verifier/reward.txt; exit\\n' "
    ">> /tests/test.sh 2>/dev/null\nEOF",
    # ... or replaced whole, padded past where the shell has read to
    "replace-test-sh": "cat > sum.sh <<'EOF'\n{ yes '' | head -n 65536; "
    "echo 'echo 1 > /logs/verifier/reward.txt; exit'; } > /tests/test.sh 2>/dev/null\nEOF",
}


@needs_bwrap
@pytest.mark.parametrize("forge", sorted(FORGES))
def test_agent_code_run_by_the_verifier_cannot_forge_the_reward(forge):
    reward, info = episode(bundled("fix-sum-script"), FORGES[forge])
    assert reward == 0.0 and not info["correct"], info


@needs_bwrap
def test_a_correct_fix_with_side_effects_scores_exactly_one():
    """A solved task whose sum.sh also writes reward files still gets the verifier's own 1."""
    writes = (
        "echo 7 > /logs/verifier/reward.txt; echo '{\"reward\": 7}' > /logs/verifier/reward.json"
    )
    reward, info = episode(bundled("fix-sum-script"), fix_sum(writes))
    assert reward == 1.0 and info["rewards"] == {"reward": 1.0}, info


@needs_bwrap
def test_a_file_planted_in_the_reward_folder_is_gone_when_the_verifier_starts():
    """Before: a link `one.txt -> reward.json` made the verifier write 42 into reward.json."""
    plant = "ln -s reward.json /logs/verifier/one.txt; mkfifo /logs/verifier/extracted"
    reward, info = episode(bundled("fix-sum-script"), fix_sum(""), plant)
    assert reward == 1.0 and info["rewards"] == {"reward": 1.0}, info


@needs_bwrap
def test_a_verifier_that_did_not_finish_scores_zero_with_the_cause(tmp_path):
    test_sh = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\nsleep 60\necho done\n"
    toml = 'version = "1.0"\n[verifier]\ntimeout_sec = 2.0\n'
    reward, info = episode(load_harbor_task(make_folder(tmp_path / "t", toml, test_sh)), "true")
    assert reward == 0.0 and "did not finish" in info["reward_error"], info
    assert "2 s" in info["reward_error"]


@needs_bwrap
def test_the_verifier_outlives_agent_code_that_kills_everything(tmp_path):
    """A task's own verifier that runs the agent's code: that code cannot end it early."""
    test_sh = (
        "#!/bin/bash\nbash /app/run.sh > /dev/null 2>&1\n"
        "echo 0 > /logs/verifier/reward.txt\necho verifier-finished\n"
    )
    run_sh = "echo 1 > /logs/verifier/reward.txt; kill -9 -1 $PPID 1; kill -STOP 1"
    task = load_harbor_task(make_folder(tmp_path / "t", test_sh=test_sh))
    reward, info = episode(task, f"echo '{run_sh}' > run.sh")
    assert reward == 0.0 and info["reward_error"] is None, info
    assert "verifier-finished" in info["verifier"]["output"]


@needs_bwrap
def test_a_writer_the_agent_left_running_never_reaches_the_verifiers_reward(tmp_path):
    """The agent's processes run on while the verifier runs (as in Harbor's container): one
    that keeps writing reward files writes into a folder the verifier never reads."""
    forge = (
        "(while :; do echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > "
        "/logs/verifier/reward.json; sleep 0.01; done) >/dev/null 2>&1 & disown"
    )
    test_sh = "#!/bin/bash\nsleep 1\necho 0 > /logs/verifier/reward.txt\n"
    reward, info = episode(load_harbor_task(make_folder(tmp_path / "t", test_sh=test_sh)), forge)
    assert reward == 0.0 and info["rewards"] == {"reward": 0.0}, info


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="an episode's own network is made as root")
def test_the_episodes_own_network_has_only_loopback_and_ends_with_it(tmp_path):
    """Ports below 1024 are open in the episode's network namespace: it holds no interface
    but its loopback, and its holder process is gone when the episode closes."""
    task = load_harbor_task(make_folder(tmp_path / "t"))
    env = ShellEnv(timeout_s=20)
    try:
        env.reset(options={"task": task})
        sandbox = env.sandbox
        assert sandbox is not None and sandbox.join_net is not None
        holder = sandbox.join_net
        names = "import socket; print(sorted(n for _, n in socket.if_nameindex()))"
        assert env.step(f'<bash>python3 -c "{names}"</bash>')[0].startswith("['lo']")
    finally:
        env.close()
    assert not os.path.exists(f"/proc/{holder}") or "sleep" not in Path(
        f"/proc/{holder}/cmdline"
    ).read_text(errors="replace")


@needs_bwrap
def test_git_does_not_run_the_agents_repository_config_in_the_verifier():
    """git runs commands a repository's config names (core.fsmonitor): the bundled git tasks'
    verifiers read the agent's repository without its config."""
    solve = (SUITE_DIR / "git-initial-commit" / "solution" / "solve.sh").read_text()
    hook = 'echo {\\"reward\\": 1} > /logs/verifier/reward.json; false'
    attack = f"cd /app/project && echo junk > untracked && git config core.fsmonitor '{hook}'"
    reward, info = episode(bundled("git-initial-commit"), solve, attack)
    assert reward == 0.0 and info["rewards"] == {"reward": 0.0}, info


@needs_bwrap
def test_fix_permissions_does_not_run_the_agents_script():
    solve = (SUITE_DIR / "fix-permissions" / "solution" / "solve.sh").read_text()
    forge = "printf '#!/bin/bash\\necho deployed\\necho 9 > /logs/verifier/reward.txt\\n' > bin/deploy.sh"
    reward, info = episode(bundled("fix-permissions"), solve, forge)
    assert reward == 0.0 and info["rewards"] == {"reward": 0.0}, info
