"""A model folder's tokenizer for the processes that only format chats: no transformers import.

The `skyrl train` driver turns chats into token ids and sampled ids back into text; the
model runs in its workers. transformers' `AutoTokenizer` costs a driver about 2.5 CPU-s of
imports (its auto classes pull in generation and model-loading code), every run. A folder
whose tokenizer transformers itself reads as a plain `tokenizers` file (`tokenizer.json`
and a `tokenizer_config.json` naming the generic class, as skyrl's presets and many chat
models are saved) is read here with the `tokenizers` library, and its chat template is
rendered with jinja2 the way transformers renders it (the same sandboxed environment,
filters and globals). Any other folder gets `AutoTokenizer`, unchanged.

    tok = load_tokenizer(path)     # ChatTokenizer or a transformers tokenizer
    tok("hi", add_special_tokens=False)["input_ids"]; tok.decode(ids, skip_special_tokens=True)
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

_GENERIC = {"TokenizersBackend", "PreTrainedTokenizerFast"}
"""tokenizer classes transformers runs as the bare `tokenizers` file, with nothing of its own."""
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")
_KNOWN_KEYS = {"backend", "tokenizer_class", "model_max_length", "chat_template", *_SPECIAL}
"""tokenizer_config.json keys this reader honours; a folder with any other goes to
transformers, whose handling of it (extra special tokens, prefix spaces, clean-up) this
does not repeat."""


class ChatTokenizer:
    """The part of a transformers tokenizer that `ChatFormat` and the agent loop use."""

    def __init__(self, backend: Any, config: dict[str, Any], chat_template: str) -> None:
        self._backend = backend
        self.chat_template = chat_template
        for key in _SPECIAL:
            setattr(self, key, config.get(key))
        self._special = {k: config[k] for k in _SPECIAL if config.get(k)}
        self._template = _compile(chat_template)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self._backend.encode(text, add_special_tokens=add_special_tokens).ids}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        tokenize: bool = True,
        add_generation_prompt: bool = False,
    ) -> str | list[int]:
        text = self._template.render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self._special,
        )
        return self(text, add_special_tokens=False)["input_ids"] if tokenize else text


def load_tokenizer(path: Path | str) -> Any:
    """`ChatTokenizer` for a folder transformers would read as a plain `tokenizers` file,
    else transformers' `AutoTokenizer`."""
    light = _read_plain(Path(path))
    if light is not None:
        return light
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def _read_plain(folder: Path) -> ChatTokenizer | None:
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        text = (folder / "tokenizer.json").read_text()
        spec = json.loads(text)
    except (OSError, ValueError):
        return None
    if config.get("tokenizer_class") not in _GENERIC or set(config) - _KNOWN_KEYS:
        return None
    if spec.get("padding") or spec.get("truncation"):
        return None  # transformers turns these off per call; not repeated here
    added = {t["content"] for t in spec.get("added_tokens", [])}
    # transformers adds a special token the file lacks (a new id): not repeated here
    if not all(isinstance(config.get(k, ""), str) for k in _SPECIAL):
        return None
    if any(config.get(k) and config[k] not in added for k in _SPECIAL):
        return None
    template_file = folder / "chat_template.jinja"
    template = template_file.read_text() if template_file.is_file() else config.get("chat_template")
    if not isinstance(template, str) or re.search(r"\{%-?\s*generation\s*-?%\}", template):
        return None  # none, a named set of templates, or `{% generation %}` blocks
    from tokenizers import Tokenizer

    try:
        return ChatTokenizer(Tokenizer.from_str(text), config, template)
    except Exception:  # noqa: BLE001 - anything this reader cannot take, transformers may
        return None


def _compile(template: str) -> Any:
    """The template in the jinja2 environment transformers renders chat templates in."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
