"""TIP's annotation prompt for the LLM annotators: the register rules, demonstrations written
for this project (`prompts/tip_demos.jsonl`; those that need more registers than the run has
are left out), a version id, and the check every reply must pass."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache

from solm.annotate.prompt import PROMPTS, Demo, extract_annotation, user_prompt
from solm.annotate.tip_rules import REGISTER_TEXT, strip_registers

_REGISTER_INDEX = re.compile(r"<reg_(\d+)>")


@dataclass(frozen=True)
class TipDemo(Demo):
    """A demonstration trace: its response is the trace without registers."""

    @property
    def response(self) -> str:
        return strip_registers(self.annotated)

    @property
    def registers_needed(self) -> int:
        return 1 + max(int(i) for i in _REGISTER_INDEX.findall(self.annotated))


@lru_cache(maxsize=1)
def tip_demonstrations() -> tuple[TipDemo, ...]:
    lines = (PROMPTS / "tip_demos.jsonl").read_text().splitlines()
    return tuple(TipDemo(**json.loads(line)) for line in lines if line.strip())


def tip_system_prompt(registers: int) -> str:
    demos = [d for d in tip_demonstrations() if d.registers_needed <= registers]
    if not demos:
        raise ValueError(f"the TIP annotation prompt needs at least 2 registers, got "
                         f"{registers}")
    rules = (PROMPTS / "tip_system.md").read_text().strip()
    rules = rules.replace("REGISTERS", str(registers)).replace("LAST", str(registers - 1))
    parts = [rules, "", "## Demonstrations"]
    for i, d in enumerate(demos, 1):
        parts += ["", f"### Example {i}", "", user_prompt(d.prompt, d.response), "",
                  f"<annotated>\n{d.annotated}\n</annotated>"]
    return "\n".join(parts)


def tip_prompt_version(registers: int) -> str:
    digest = hashlib.sha256(tip_system_prompt(registers).encode()).hexdigest()[:10]
    return f"tip-v1-r{registers}-{digest}"


def register_sequence(annotated: str) -> list[int]:
    return [int(i) for i in _REGISTER_INDEX.findall(annotated)]


def kills(sequence: list[int]) -> int:
    """Steps killed: each opening of a register already held kills its holder."""
    held: set[int] = set()
    killed = 0
    for r in sequence:
        killed += r in held
        held.add(r)
    return killed


def check_tip_annotation(annotated: str, source: str, registers: int) -> dict:
    """The output fields of an accepted TIP annotation; raises `Rejection`."""
    from solm.annotate.llm_job import Rejection

    if strip_registers(annotated) != source:
        raise Rejection("unfaithful", "removing the registers does not give back the trace")
    if not REGISTER_TEXT.match(annotated):
        raise Rejection("invalid", "the trace does not open with a register")
    sequence = register_sequence(annotated)
    bad = [r for r in sequence if r >= registers]
    if bad:
        raise Rejection("invalid", f"<reg_{bad[0]}> is beyond the {registers} registers")
    if any(not s for s in REGISTER_TEXT.split(annotated)[1:]):
        raise Rejection("invalid", "an empty step (two registers in a row)")
    return {"annotated": annotated, "steps": len(sequence), "registers": registers,
            "killed": kills(sequence), "registers_used": len(set(sequence))}


def tip_task(registers: int):
    from solm.annotate.llm_job import AnnotationTask

    return AnnotationTask("tip", tip_system_prompt(registers), tip_prompt_version(registers),
                          user_prompt,
                          lambda annotated, source: check_tip_annotation(annotated, source,
                                                                         registers))


__all__ = ["check_tip_annotation", "extract_annotation", "kills", "register_sequence",
           "tip_demonstrations", "tip_prompt_version", "tip_system_prompt", "tip_task"]
