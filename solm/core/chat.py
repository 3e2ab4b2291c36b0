"""Prompt formatting with the model's own chat template."""

from __future__ import annotations


def prompt_ids(tokenizer, prompt: str, system: str | None = None) -> list[int]:
    """Token ids of a user turn plus the assistant header, ready for decoding; the user turn
    ends with the instruction the model was trained with (`solm.core.prompt_format`)."""
    from solm.core.prompt_format import tokenizer_instruction, with_instruction

    prompt = with_instruction(prompt, tokenizer_instruction(tokenizer))
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return messages_ids(tokenizer, messages)


def context_length(tokenizer) -> int | None:
    """The most tokens (prompt and answer together) the model loaded with `tokenizer` holds:
    `load_model` sets `model_max_length` to the model's position limit; None where unknown."""
    n = getattr(tokenizer, "model_max_length", None)
    return int(n) if isinstance(n, int) and 0 < n < 10 ** 9 else None


def check_prompt_fits(tokenizer, ids, record) -> None:
    """A one-line DataError (file, line, field) for a prompt that leaves the model no room to
    answer: refused before any decoding, on every engine."""
    from solm.core.errors import DataError

    limit = context_length(tokenizer)
    if limit is None or len(ids) < limit:
        return
    path, line, field = getattr(record, "origin", None) or (None, None, None)
    raise DataError(f"prompt {record.id!r} has {len(ids)} tokens; the model's context holds "
                    f"{limit} (prompt and answer together): shorten it or leave it out",
                    path=path or None, line=line or None, field=field or None)


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
