"""Token-level chat formatting for multi-turn episodes.

The prompt is rendered once with the model's chat template. After each model turn we need
the tokens that close the assistant message, carry the environment's observation as a
user message and open the next assistant message. We get them from the template itself:
render a conversation whose last assistant message is a marker, add the observation, and
take the text after the marker. The model's own sampled tokens are never re-tokenised.
"""

from __future__ import annotations

from typing import Any

_MARK = "\ue000SKYRL\ue000"


class ChatFormat:
    """Wraps a tokenizer's chat template for incremental, token-in/token-out episodes."""

    def __init__(self, tokenizer: Any, system_prompt: str | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the model's tokenizer has no chat template; pick an instruct/chat model"
            )
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.eos_text = tokenizer.eos_token or ""

    def _render(self, messages: list[dict[str, str]], gen: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen
        )

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the opening messages plus the assistant generation prompt."""
        if self.system_prompt and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        text = self._render(messages, gen=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def observation_ids(self, observation: str, model_ended_turn: bool) -> list[int]:
        """Tokens after a model turn: end of that turn, the observation, next generation prompt.

        `model_ended_turn` is True when the model's last sampled token already closed its
        message (it sampled EOS), so the closing marker must not be added twice.
        """
        convo = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": _MARK},
            {"role": "user", "content": observation},
        ]
        text = self._render(convo, gen=True)
        suffix = text[text.index(_MARK) + len(_MARK) :]
        if model_ended_turn and self.eos_text and suffix.startswith(self.eos_text):
            suffix = suffix[len(self.eos_text) :]
        return self.tokenizer(suffix, add_special_tokens=False)["input_ids"]
