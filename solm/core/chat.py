"""Prompt formatting with the model's own chat template."""

from __future__ import annotations


def prompt_ids(tokenizer, prompt: str, system: str | None = None) -> list[int]:
    """Token ids of a user turn plus the assistant header, ready for decoding."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return messages_ids(tokenizer, messages)


def messages_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation (`role`/`content` dicts) plus the assistant header."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    turns = {"system": "{}\n\n", "user": "User: {}\n", "assistant": "Assistant: {}\n"}
    text = "".join(turns.get(m["role"], m["role"] + ": {}\n").format(m["content"])
                   for m in messages)
    return tokenizer(text + "Assistant:", add_special_tokens=False).input_ids


def text_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def eos_ids(tokenizer) -> tuple[int, ...]:
    """The tokenizer's end-of-sequence id(s) as a tuple (some tokenizers list several)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)
