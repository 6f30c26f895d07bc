"""The driver's tokenizer (agents/tokenizer.py): the same ids, text and chat renders as
transformers' AutoTokenizer for a folder it takes, transformers for every other folder, and
no transformers import on the way. The reference is the real AutoTokenizer of each folder."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from transformers import AutoTokenizer

from agents.chat import ChatFormat
from agents.models import resolve_model
from agents.tokenizer import ChatTokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tiny() -> Path:
    return resolve_model("tiny", quiet=True)


def _corpus() -> list[str]:
    rng = random.Random(0)
    alphabet = "abc XYZ<>|_/\\\n\t.,;:'\"0123456789éü日🙂"
    fixed = [
        "",
        " ",
        " leading space",
        "SELECT name FROM t WHERE x = 'a';",
        "<sql>SELECT 1</sql><solution>42</solution>",
        "<|im_end|>x<|im_start|>assistant\n",
        "a  b\n\n\tc ., ;",
        "x" * 300,
    ]
    return fixed + ["".join(rng.choices(alphabet, k=rng.randint(0, 60))) for _ in range(200)]


CONVERSATION = [
    {"role": "system", "content": "You answer in SQL."},
    {"role": "user", "content": "How many 🙂?"},
    {"role": "assistant", "content": "<sql>SELECT 1</sql>"},
    {"role": "user", "content": "1"},
]


def test_a_preset_gives_the_same_ids_text_and_chat_as_transformers(tiny: Path) -> None:
    light, ref = load_tokenizer(tiny), AutoTokenizer.from_pretrained(str(tiny))
    assert isinstance(light, ChatTokenizer)
    for text in _corpus():
        ids = light(text, add_special_tokens=False)["input_ids"]
        assert ids == ref(text, add_special_tokens=False)["input_ids"], text
        for skip in (True, False):
            assert light.decode(ids, skip_special_tokens=skip) == ref.decode(
                ids, skip_special_tokens=skip
            )
    sampled = random.Random(1).choices(range(len(ref)), k=1000)  # special tokens included
    for i in range(0, len(sampled), 40):
        for skip in (True, False):
            assert light.decode(sampled[i : i + 40], skip_special_tokens=skip) == ref.decode(
                sampled[i : i + 40], skip_special_tokens=skip
            )
    for messages in (CONVERSATION, CONVERSATION[1:], CONVERSATION[1:2]):
        for gen in (True, False):
            assert light.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=gen
            ) == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    a, b = ChatFormat(light), ChatFormat(ref)
    assert a.eos_text == b.eos_text == "<|im_end|>"
    assert a.prompt_ids(CONVERSATION[1:2]) == b.prompt_ids(CONVERSATION[1:2])
    for ended in (True, False):
        assert a.observation_ids("3 rows", ended) == b.observation_ids("3 rows", ended)


def test_it_loads_without_importing_transformers(tiny: Path) -> None:
    code = (
        "import sys; from agents.tokenizer import load_tokenizer; "
        f"t = load_tokenizer({str(tiny)!r}); "
        "print(type(t).__name__, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ChatTokenizer", "False"]


def _copy(tiny: Path, tmp_path: Path, **config_changes: object) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny, folder)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.update(config_changes)
    config_file.write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "changes",
    [
        {"tokenizer_class": "GPT2TokenizerFast"},  # a class with behaviour of its own
        {"add_prefix_space": True},  # a setting this reader does not repeat
        {"pad_token": "<|not-in-the-file|>"},  # transformers would add it as a new token
    ],
)
def test_a_folder_transformers_treats_its_own_way_goes_to_transformers(
    tiny: Path, tmp_path: Path, changes: dict
) -> None:
    tok = load_tokenizer(_copy(tiny, tmp_path, **changes))
    assert not isinstance(tok, ChatTokenizer)
    assert type(tok).__module__.startswith("transformers.")


TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('system message not first') }}{% endif %}"
    "{% if m.role == 'skip' %}{% continue %}{% endif %}"
    "<{{ m.role }}>{{ m.content | tojson }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_a_template_with_transformers_globals_and_filters_renders_alike(
    tiny: Path, tmp_path: Path
) -> None:
    folder = _copy(tiny, tmp_path)
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    light, ref = load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    assert isinstance(light, ChatTokenizer)
    messages = [
        *CONVERSATION[1:],
        {"role": "skip", "content": "x"},
        {"role": "user", "content": "é"},
    ]
    for gen in (True, False):
        assert light.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen
        ) == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    bad = [CONVERSATION[1], CONVERSATION[0]]
    with pytest.raises(jinja2.TemplateError, match="system message not first"):
        light.apply_chat_template(bad, tokenize=False)
    with pytest.raises(jinja2.TemplateError, match="system message not first"):
        ref.apply_chat_template(bad, tokenize=False)
