"""The shared scaffold of the built-in text environments (`environments.text_env`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from environments.spaces import ActionError
from environments.text_env import Tags


def test_import_environments_alone_registers_the_builtins():
    """The README's promise: `import environments`, then gymnasium.make works."""
    code = (
        "import gymnasium, environments\n"
        "env = gymnasium.make('skyrl/SQL-v0')\n"
        "print(type(env.unwrapped).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "SQLEnv"


@pytest.mark.parametrize("name", ["math", "python", "search", "sql"])
def test_reset_takes_a_task_file_row_as_a_task(name):
    from environments.registry import BUILTINS, bundled_tasks, make_env

    task = bundled_tasks(BUILTINS[name], "dev")[0]
    env = make_env(BUILTINS[name])
    try:
        from_task = env.reset(seed=0, options={"task": task})
        from_row = env.reset(seed=0, options={"task": json.loads(task.to_json())})
        assert from_row == from_task
        with pytest.raises(ValueError, match="missing the field"):
            env.reset(options={"task": {"id": "x", "env": name}})
    finally:
        env.close()


def test_tags_follow_the_first_tag_rule():
    tags = Tags("bash", "submit/")
    assert tags.stop_strings == ("</bash>", "<submit/>")
    assert tags.parse("think <bash> ls </bash> <submit/>") == ("bash", "ls")
    assert tags.parse("x <bash> ls </bash>", strip=False) == ("bash", " ls ")
    assert tags.parse("done: <submit/> <bash>rm</bash>") == ("submit", "")
    for text, error in [
        ("nothing", "no <bash> or <submit/> tag found"),
        ("<bash>ls", "<bash> is not closed with </bash>"),
        ("<bash>a <submit/></bash>", "<bash> contains another tag"),
        ("<bash><bash>a</bash>", "<bash> contains another tag"),
        ("<bash>  </bash>", "<bash></bash> is empty"),
    ]:
        with pytest.raises(ActionError, match=error):
            tags.parse(text)


@pytest.mark.parametrize(
    ("name", "knobs", "message"),
    [
        ("search", {"top_k": 0}, "top_k must be between 1 and 50, got 0"),
        ("search", {"reward": "bleu"}, "unknown reward 'bleu'; known: em, f1"),
        ("sql", {"float_decimals": 16}, "float_decimals must be between 0 and 15, got 16"),
        ("sql", {"schema_format": "yaml"}, "unknown schema_format 'yaml'; known: compact, create"),
        ("shell", {"backend": "lxc"}, "unknown backend 'lxc'; known: bwrap, docker, podman"),
    ],
)
def test_a_bad_knob_is_refused_in_one_sentence_that_names_it(name, knobs, message):
    from environments.registry import BUILTINS, make_env

    with pytest.raises(ValueError) as refused:
        make_env(BUILTINS[name], **knobs)
    assert str(refused.value) == message
    make_env(BUILTINS[name], **{k: None for k in knobs if k in ("float_decimals", "schema_format")})


@pytest.mark.parametrize("name", ["python", "shell", "swe"])
def test_a_sandboxed_builtin_takes_its_knobs_by_name_and_sets_up_as_the_others(name):
    """Python-v0, Shell-v0 and SWE-v0 set up alike (`text_env.turn_limit`, `sandbox_limits`):
    the turn budget checked, `timeout_s` folded into the limits, no sandbox before `reset`.
    Every knob is keyword-only, so a positional value is refused instead of landing on
    another knob."""
    from environments.registry import BUILTINS, load_class
    from environments.sandbox import Limits

    cls = load_class(BUILTINS[name].entry)
    env = cls(max_turns=3, timeout_s=7, limits=Limits(output_bytes=1234), format_penalty=0.5)
    assert (env.max_turns, env.format_penalty, env._turns_left) == (3, 0.5, 0)
    assert (env.limits.timeout_s, env.limits.output_bytes) == (7.0, 1234)
    assert env._sandbox is None and env.observation_space.contains("x")
    with pytest.raises(ValueError, match="max_turns must be at least 1, got 0"):
        cls(max_turns=0)
    with pytest.raises(TypeError, match="positional"):
        cls(3)
