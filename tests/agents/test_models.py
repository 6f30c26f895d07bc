"""Model presets: the seeded `tiny` build, folder and name resolution, and the real SmolLM2."""

from __future__ import annotations

import fcntl
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents import models
from agents.models import PRESETS, TAG_TOKENS, resolve_model


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tiny(tmp_cache: Path) -> Path:
    return resolve_model("tiny", quiet=True)


def test_tiny_builds_into_the_cache_and_loads(tmp_cache: Path, tiny: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert tiny == tmp_cache / "models" / "tiny-v1"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in tiny.iterdir()
    }
    assert list((tmp_cache / "models").glob(".tiny-v1.tmp*")) == []  # the temp dir was renamed
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(tokenizer) <= 1000
    assert tokenizer.eos_token == "<|im_end|>"
    assert (
        model.config.eos_token_id == model.generation_config.eos_token_id == tokenizer.eos_token_id
    )
    assert model.config.pad_token_id == tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.bos_token_id == tokenizer.bos_token_id
    assert resolve_model("tiny") == tiny  # built once, then found


def test_tiny_tokenizer_has_single_token_tags_and_digits(tiny: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    for tag in TAG_TOKENS:
        assert len(tokenizer.encode(tag)) == 1, tag
    assert len({tokenizer.encode(tag)[0] for tag in TAG_TOKENS}) == len(TAG_TOKENS)
    assert [len(tokenizer.encode(d)) for d in "0123456789"] == [1] * 10
    assert len(tokenizer.encode("2024")) == 4  # digits never merge: numbers read digit by digit
    ids = tokenizer.encode("<answer>7</answer>")
    assert len(ids) == 3
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<answer>7</answer>"
    chat = tokenizer.encode("<|im_start|>assistant\n<sql>SELECT 1</sql><|im_end|>")
    assert tokenizer.decode(chat, skip_special_tokens=True) == "assistant\n<sql>SELECT 1</sql>"


@pytest.mark.parametrize(
    "text",
    ["é 中 \x00 🤗", "  two  spaces\n\n\ttab", "SELECT name FROM users WHERE age > 30;", "ß" * 50],
)
def test_tiny_tokenizer_round_trips_any_text(tiny: Path, text: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tiny_chat_template_is_chatml_without_a_default_system_prompt(tiny: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<answer>1</answer>"},
    ]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<answer>1</answer><|im_end|>\n"
    )
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_tiny_greedy_generation_runs(tiny: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "2+2?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    assert (out[0, -1] < len(tokenizer)).item()


def test_tiny_is_identical_on_every_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    folders = []
    for name in ("a", "b"):
        monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / name))
        folders.append(resolve_model("tiny", quiet=True))
    first, second = (load_file(f / "model.safetensors") for f in folders)
    assert first.keys() == second.keys() and len(first) > 10
    assert all(first[k].equal(second[k]) for k in first)
    for name in ("tokenizer.json", "config.json"):
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes()


def test_a_build_waiting_on_the_lock_uses_the_folder_the_holder_built(tmp_cache: Path) -> None:
    root = tmp_cache / "models"
    root.mkdir(parents=True)
    stale = root / ".tiny-v1.tmpkilled"  # what a build killed half-way leaves behind
    stale.mkdir()
    results: list[Path] = []
    with open(root / ".tiny-v1.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "another process" is building
        waiter = threading.Thread(target=lambda: results.append(resolve_model("tiny", quiet=True)))
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not results  # blocked on the lock, not building alongside
        built = root / ".tiny-v1.tmpother"
        models._build_tiny(built, quiet=True)
        (built / "built-by-the-holder").touch()
        built.rename(root / "tiny-v1")
    waiter.join(timeout=60)
    assert results == [root / "tiny-v1"]
    assert (root / "tiny-v1" / "built-by-the-holder").exists()  # not rebuilt
    assert stale.exists()  # only a build that takes the lock cleans up


def test_stale_temp_dirs_are_removed_by_the_next_build(tmp_cache: Path) -> None:
    stale = tmp_cache / "models" / ".tiny-v1.tmpkilled"
    stale.mkdir(parents=True)
    resolve_model("tiny", quiet=True)
    assert not stale.exists()


def test_a_local_folder_is_returned_as_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path


def test_a_folder_without_config_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no config\.json") as err:
        resolve_model(str(tmp_path))
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("name", ["no-such-model", "./missing/folder", "org-that-does-not-exist/x"])
def test_an_unknown_name_names_the_presets(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the same answer with or without a network
    with pytest.raises(ValueError) as err:
        resolve_model(name)
    message = str(err.value)
    assert f"'{name}'" in message and "no model hub is reachable" in message
    assert all(preset in message for preset in PRESETS)
    assert "\n" not in message


@pytest.mark.slow
def test_smollm2_converts_from_its_gguf_and_answers_in_english() -> None:
    """Converts into the user's real cache (once per machine: ~30 s plus a 93 MB download)."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model("smollm2-135m", quiet=True)
    assert not list(folder.rglob("*.gguf"))
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    inputs = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=20, do_sample=False)
    reply = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert len(re.findall(r"\b[A-Za-z]{2,}\b", reply)) >= 3, reply
    assert "Paris" in reply, reply


def test_loading_a_model_does_not_import_scikit_learn(tiny: Path) -> None:
    """transformers imports scikit-learn and scipy.stats with its decoding code for assisted
    decoding's confidence threshold, which skyrl never uses: 2.8 s of every process that
    loads a tokenizer or a model (agents/hf_imports.py), and scipy.optimize with its
    object-detection losses. A fresh process that imports the trainer as the driver does
    loads a tokenizer and a model and samples without them; scikit-learn stays importable
    for whoever wants it."""
    code = (
        "import sys, torch\n"
        "import trainers.sync\n"
        "from transformers import AutoTokenizer\n"
        "from agents.weights import from_pretrained\n"
        f"tok = AutoTokenizer.from_pretrained({str(tiny)!r})\n"
        f"model = from_pretrained({str(tiny)!r}, torch.float32)\n"
        "out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3, do_sample=True)\n"
        "assert out.shape == (1, 6), out.shape\n"
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n"
        "import sklearn.metrics\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
