"""Environment turns as tokens, the way the tokenizer's chat template writes them.

A model turn ends with its stop token (SmolLM's <|im_end|>); what the template writes after an assistant
message beyond that token (ChatML: a newline), the environment's message (ChatML: <|im_start|>tool ...
<|im_end|>), and the opening of the next assistant turn are the environment's tokens: in the context,
out of the loss. They are found by rendering a short conversation with and without the new message
and taking the difference, so any template that renders earlier turns the same way works (ChatML,
Qwen's <tool_response> wrapping, Llama 3's headers).
"""
from __future__ import annotations

from rlvr.errors import RlvrError

_CHARS_PER_TOKEN = 64   # more than any vocabulary's longest token: a text this long has enough tokens to cut
_SENTINEL = "\u2063rlvr-model-turn\u2063"
_BASE = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _SENTINEL}]


class TurnRender:
    """Prompt and environment-turn tokens for one tokenizer (and the tools its template renders)."""

    def __init__(self, tok, tools: list[dict] | None = None):
        self.tok, self.tools = tok, tools or None
        self.closed = self._text(_BASE)  # a conversation ending with an assistant message
        self.after_model = self.closed[self.closed.rindex(_SENTINEL) + len(_SENTINEL):]  # ChatML: '<|im_end|>\n'
        self._glue: dict[int, str] = {}

    def _text(self, messages: list[dict], generation_prompt: bool = False) -> str:
        kw = {"tools": self.tools} if self.tools else {}
        return self.tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False, **kw)

    def prompt(self, messages: list[dict]) -> list[int]:
        """Token ids of a chat prompt ending with the assistant turn's opening (rlvr.tasks.encode_prompt
        with tools when the template renders them)."""
        return self.tok(self._text(messages, True), add_special_tokens=False)["input_ids"]

    def message_text(self, role: str, content: str) -> str:
        """What the template writes for one more message after an assistant turn, up to the next
        assistant turn's opening."""
        before = self.closed
        after = self._text(_BASE + [{"role": role, "content": content}], True)
        if not after.startswith(before):
            raise RlvrError(f"the chat template renders the conversation before a {role!r} message differently "
                            "once the message is added; rlvr cannot append turns for this template")
        return after[len(before):]

    def glue(self, last_token: int) -> str:
        """What follows the model's last token before the next message: the template's text after an
        assistant message, less the stop token the model already wrote."""
        if last_token not in self._glue:
            stop = self.tok.decode([last_token])
            self._glue[last_token] = self.after_model.removeprefix(stop) if stop else self.after_model
        return self._glue[last_token]

    def env_tokens(self, last_token: int, role: str, content: str) -> list[int]:
        """The environment's turn after a model turn that ended with `last_token`."""
        text = self.glue(last_token) + self.message_text(role, content)
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def cap(self, content: str, max_tokens: int) -> tuple[str, bool]:
        """content cut to max_tokens tokens (marked), and whether it was cut. Only its first
        _CHARS_PER_TOKEN * max_tokens characters are tokenized (a tool's megabytes took seconds to keep
        64 tokens), and a lone surrogate (bytes decoded with surrogateescape) is written as its escape:
        the tokenizer refuses such a string, which ended the run."""
        head = content[:max_tokens * _CHARS_PER_TOKEN].encode("utf-8", "backslashreplace").decode("utf-8")
        ids = self.tok(head, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens and len(content) <= max_tokens * _CHARS_PER_TOKEN:
            return head, False
        return self.tok.decode(ids[:max_tokens]) + " ...[cut]", True
