"""The judge's prompts: package data, each with a version id that enters the cache key.

Two ways to read a verdict, two system prompts: `token` asks for the single character `A` or
`B`, whose log-probabilities give a soft preference (AlpacaEval's weighted annotator reads
GPT-4's the same way); `reply` asks for a line of JSON with a stated confidence, for backends
that return no log-probabilities.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

PROMPTS = Path(__file__).with_name("prompts")
MODES = ("token", "reply")
LABELS = ("A", "B")
_SLOT = re.compile(r"\{(instruction|first|second)\}")


@lru_cache(maxsize=None)
def _read(name: str) -> str:
    return (PROMPTS / name).read_text()


def system_prompt(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown judge mode {mode!r}: expected one of {', '.join(MODES)}")
    return _read(f"pairwise_{mode}_v1.md").strip()


def user_prompt(instruction: str, first: str, second: str) -> str:
    """The comparison, response A first. Filled in one pass, so text that looks like a slot
    (`{second}` inside an instruction) stays as written."""
    values = {"instruction": instruction.strip(), "first": first.strip(),
              "second": second.strip()}
    return _SLOT.sub(lambda m: values[m.group(1)], _read("pairwise_user_v1.md")).strip()


@lru_cache(maxsize=None)
def prompt_version(mode: str) -> str:
    """`pairwise-<mode>-v1+<hash>`: the hash covers both templates, so an edited prompt never
    reuses cached verdicts of the old one."""
    text = system_prompt(mode) + "\0" + _read("pairwise_user_v1.md")
    return f"pairwise-{mode}-v1+{hashlib.sha256(text.encode()).hexdigest()[:8]}"
