"""The prompt a model was trained with is the prompt every command gives it.

A trained model's `solm.json` records the instruction its training appended to each user turn
(`prompt_instruction`: TIP's maths line, or null). Loading a model puts that instruction on
its tokenizer (`solm_instruction`), and `solm.core.chat.prompt_ids` appends it to every user
turn, so decode, eval, serve, bench and the demos all give the model what it saw in training.

Appending is idempotent: a prompt that already ends with the instruction (a problem file
written with it, a stage that adds it itself) is left as it is.

Models trained before the field existed: a TIP model whose recorded settings say
`math_prompt: true` was trained with the maths instruction.
"""

from __future__ import annotations

import json
from pathlib import Path

FIELD = "prompt_instruction"
# the maths instruction TIP's stages append (`solm.core.math_task` reads it from here)
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TOKENIZER_ATTRIBUTE = "solm_instruction"


def recorded_instruction(meta: dict) -> str | None:
    """The instruction a model's solm.json (`meta`) says its training appended, or None."""
    if FIELD in meta:
        value = meta[FIELD]
        return value if isinstance(value, str) and value.strip() else None
    settings = meta.get("settings") or {}
    if meta.get("control_tokens") == "tip" and settings.get("math_prompt"):
        return MATH_INSTRUCTION
    return None


def folder_instruction(folder: str | Path) -> str | None:
    """`recorded_instruction` of the solm.json in `folder` (None: no solm.json)."""
    path = Path(folder) / "solm.json"
    if not path.is_file():
        return None
    try:
        return recorded_instruction(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def attach(tokenizer, instruction: str | None):
    """`tokenizer`, now giving every user turn `instruction` (None: none)."""
    setattr(tokenizer, TOKENIZER_ATTRIBUTE, instruction)
    return tokenizer


def tokenizer_instruction(tokenizer) -> str | None:
    return getattr(tokenizer, TOKENIZER_ATTRIBUTE, None)


def with_instruction(prompt: str, instruction: str | None) -> str:
    """`prompt` followed by `instruction` on its own paragraph, unless it already ends so."""
    if not instruction or prompt.rstrip().endswith(instruction):
        return prompt
    return f"{prompt.strip()}\n\n{instruction}"
