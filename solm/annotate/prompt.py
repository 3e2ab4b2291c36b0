"""The annotation prompt: Pasta-Lang's description, seven demonstrations, a version id."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from solm.core.pasta_lang import strip

PROMPTS = Path(__file__).with_name("prompts")
REPLY_RE = re.compile(r"<annotated>\s*\n?(.*?)\n?\s*</annotated>", re.S)


@dataclass(frozen=True)
class Demo:
    name: str
    prompt: str
    annotated: str

    @property
    def response(self) -> str:
        return strip(self.annotated)


@lru_cache(maxsize=1)
def demonstrations() -> tuple[Demo, ...]:
    lines = (PROMPTS / "pasta_demos.jsonl").read_text().splitlines()
    return tuple(Demo(**json.loads(line)) for line in lines if line.strip())


def _user_block(prompt: str, response: str) -> str:
    return (f"Annotate this response.\n\n<instruction>\n{prompt}\n</instruction>\n\n"
            f"<response>\n{response}\n</response>")


@lru_cache(maxsize=1)
def system_prompt() -> str:
    parts = [(PROMPTS / "pasta_system.md").read_text().strip(), "", "## Demonstrations"]
    for i, d in enumerate(demonstrations(), 1):
        parts += ["", f"### Example {i}", "", _user_block(d.prompt, d.response), "",
                  f"<annotated>\n{d.annotated}\n</annotated>"]
    return "\n".join(parts)


def prompt_version() -> str:
    return "pasta-v1-" + hashlib.sha256(system_prompt().encode()).hexdigest()[:10]


def user_prompt(prompt: str, response: str) -> str:
    return _user_block(prompt, response)


def extract_annotation(reply: str) -> str | None:
    """The text inside <annotated>…</annotated>, or None if the reply has no such block."""
    m = REPLY_RE.search(reply)
    return m.group(1) if m else None


def response_from_user_prompt(user: str) -> str | None:
    """Inverse of user_prompt (used by test servers)."""
    m = re.search(r"<response>\n(.*)\n</response>\s*$", user, re.S)
    return m.group(1) if m else None
