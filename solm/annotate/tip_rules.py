"""TIP's rules annotator: reasoning steps, and registers that kill a step only when later steps
no longer need it.

**Steps.** A trace splits at line breaks and at sentence ends (`.`, `!`, `?` or `:` followed
by white space, not after an abbreviation such as `Mr.` or `e.g.`), outside maths (`$...$`,
`$$...$$`, `\\(...\\)`, `\\[...\\]`, `\\begin{env}...\\end{env}`); pieces merge until a step
has at least `min_step_tokens` tokens (a short tail joins the step before it). Every step is
a slice of the text, white space included, so the steps concatenate to the trace exactly.

**Refer back.** A step's *keys* are what a later step can reuse from it:
- numbers, except 0 and 1 (too common to tie two steps together): `12`, `3.5`, `1/2` gives
  `2`; thousands separators are dropped (`1,000` is `1000`);
- symbols inside maths: single-letter variables (`x`, `n`) and LaTeX names of letters and
  functions that stand for quantities (`\\alpha`, `\\pi`, `\\theta`, ...);
- named quantities: a word of four or more letters directly before `=` or ` is ` + a number
  (`area = 12`, `the radius is 5`) names the quantity, and the name becomes a key wherever it
  appears later;
- variables set outside maths: a single letter directly before `=` (`x=4`, `a = 7`) is the
  key its maths form would be (`x` inside `$...$`), so a step that restates the variables
  refers back to the last step that set them, even when their values are 0 or 1.

Step j refers back to step i (i < j) when they share a key and no step between them holds
that key: the most recent holder of a key is the one a later step reads it from. Step i is
*needed* until the last step that refers back to it.

**Registers.** Step j takes a register whose holder is no longer needed at j (a free one),
the least recently used first (use = opened, or referred back to; among registers last used
by the same step, the one holding the older step). When every register holds a needed step,
the least recently used is taken anyway and the kill is counted as `forced`.
Reusing a register kills its holder, so a step dies only when the registers run out of free
ones, and then the step longest without use goes first.

**Rules** (`rule`): `refers` (the default) is the above; `needs` takes who reads whom from
the problem itself instead (a generated task's rows carry `needs`: per line of the trace,
the lines it reads; the trace's steps must then be its lines), and a step takes a dead
step's register (none of whose readers is still to come) before an unused one, so a step
lives until its last reader and a dead one is gone by the next step that finds it dead;
`lru` ignores what later steps read: every holder counts as free, so a step lives for as
many steps as there are registers (with 2 registers: killed by the step after next,
whatever still reads it). `lru` is the deliberately simple rule a learned
policy can beat (it keeps what nothing reads and kills what a far step still needs).

**Malformed input.** A trace that already contains register-like text (`<reg_`) is refused
(removing the registers could not give it back); an empty trace is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from solm.core.control_tokens import register_token

REGISTER_TEXT = re.compile(r"<reg_\d+>")
_BOUNDARY = re.compile(r"(?<=[.!?:])[ \t]+|\n+")
_MATH = re.compile(r"\\begin\{(?P<env>[a-zA-Z*]+)\}.*?\\end\{(?P=env)\}|\$\$.*?\$\$|\$.*?\$|"
                   r"\\\(.*?\\\)|\\\[.*?\\\]", re.S)
_ABBREVIATION = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|vs|etc|e\.g|i\.e|No|Fig)\.)$")
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)")
_LETTER = re.compile(r"(?<![\\a-zA-Z])([a-zA-Z])(?![a-zA-Z])")
_LATEX_NAME = re.compile(r"\\(alpha|beta|gamma|delta|epsilon|theta|lambda|mu|pi|sigma|phi|"
                         r"omega|rho|tau|sin|cos|tan|log|ln)(?![a-zA-Z])")
_NAMED = re.compile(r"\b([A-Za-z]{4,})\s*(?:=|\bis\b)\s*\$?\s*-?\d")
_SET_VARIABLE = re.compile(r"(?<![\w\\])([a-zA-Z])\s*=(?!=)")
_TRIVIAL_NUMBERS = {"0", "1"}


class NotAnnotatable(ValueError):
    """The trace cannot be annotated; `reason` goes to the rejects file."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


def _math_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _MATH.finditer(text)]


def split_steps(text: str, count: Callable[[str], int], min_step_tokens: int) -> list[str]:
    """Slices of `text` (white space kept) that concatenate to it, each at least
    `min_step_tokens` tokens except possibly a lone step."""
    maths = _math_spans(text)
    cuts = [m.end() for m in _BOUNDARY.finditer(text)
            if not any(a < m.start() < b for a, b in maths) and 0 < m.end() < len(text)
            and not _ABBREVIATION.search(text[max(0, m.start() - 12):m.start()])]
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    steps: list[str] = []
    current = ""
    for piece in pieces:
        current += piece
        if count(current) >= min_step_tokens:
            steps.append(current)
            current = ""
    if current:
        if steps and count(current) < min_step_tokens:
            steps[-1] += current
        else:
            steps.append(current)
    return steps


def step_keys(step: str, names: set[str]) -> set[str]:
    """What later steps can refer back to in `step` (see the module docstring)."""
    keys = set()
    for m in _NUMBER.finditer(step):
        number = m.group(1).replace(",", "")
        if number not in _TRIVIAL_NUMBERS:
            keys.add("#" + number)
    spans = _math_spans(step)
    for a, b in spans:
        maths = step[a:b]
        keys.update("$" + m.group(1) for m in _LETTER.finditer(maths))
        keys.update("\\" + m.group(1) for m in _LATEX_NAME.finditer(maths))
    keys.update("$" + m.group(1) for m in _SET_VARIABLE.finditer(step)
                if not any(a <= m.start() < b for a, b in spans))
    lowered = step.lower()
    keys.update("@" + n for n in names if re.search(rf"\b{re.escape(n)}\b", lowered))
    return keys


def named_quantities(text: str) -> set[str]:
    return {m.group(1).lower() for m in _NAMED.finditer(text)}


def needed_until(steps: list[str]) -> tuple[list[int], list[list[int]]]:
    """Per step: the last step that refers back to it (itself if none), and per step the
    earlier steps it refers back to."""
    names = named_quantities("".join(steps))
    last_holder: dict[str, int] = {}
    needed = list(range(len(steps)))
    refers: list[list[int]] = []
    for j, step in enumerate(steps):
        keys = step_keys(step, names)
        sources = sorted({last_holder[k] for k in keys if k in last_holder})
        for i in sources:
            needed[i] = j
        refers.append(sources)
        for k in keys:
            last_holder[k] = j
    return needed, refers


@dataclass
class TipAnnotation:
    annotated: str
    steps: int
    registers_used: int
    killed: int  # steps killed by a later register reuse
    forced: int  # of those, killed while a later step still referred back to them
    step_registers: list[int] = field(default_factory=list)

    @property
    def reuses(self) -> bool:
        return self.killed > 0


def assign_registers(needed: list[int], refers: list[list[int]], registers: int,
                     dead_first: bool = False) -> tuple[list[int], int, int]:
    """Register per step, with the kill count and the forced kills among them. `dead_first`:
    a step takes a dead step's register (one no later step reads) before an unused one, so
    only the steps still read stay alive (the `needs` rule, whose reads are exact)."""
    holder: dict[int, int] = {}  # register -> step
    last_use: dict[int, int] = {}  # register -> step index of its last use
    out, killed, forced = [], 0, 0
    for j in range(len(needed)):
        for i in refers[j]:
            reg = out[i]
            if holder.get(reg) == i:
                last_use[reg] = j
        unused = [r for r in range(registers) if r not in holder]
        free = [r for r in holder if needed[holder[r]] < j]
        if unused and not (dead_first and free):
            reg = unused[0]
        else:
            pool = free or list(holder)
            # the step longest without use dies; among steps last used together, the older
            reg = min(pool, key=lambda r: (last_use[r], holder[r]))
            killed += 1
            forced += not free
        holder[reg] = j
        last_use[reg] = j
        out.append(reg)
    return out, killed, forced


RULES = ("refers", "needs", "lru")


def needs_to_refers(needs: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """`needed_until`'s pair from a problem's own reads: per step its last reader (itself if
    none), and per step the steps it reads."""
    needed = list(range(len(needs)))
    for j, reads in enumerate(needs):
        for i in reads:
            if not 0 <= i < j:
                raise NotAnnotatable("bad_needs", f"step {j} reads step {i}")
            needed[i] = max(needed[i], j)
    return needed, [sorted(r) for r in needs]


def annotate_tip_rules(text: str, count: Callable[[str], int], registers: int = 4,
                       min_step_tokens: int = 16, rule: str = "refers",
                       needs: list[list[int]] | None = None) -> TipAnnotation:
    """The trace with `<reg_i>` opening each step; raises NotAnnotatable."""
    if registers < 1:
        raise ValueError("registers must be >= 1")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    if not text or not text.strip():
        raise NotAnnotatable("empty", "no trace text")
    if "<reg_" in text:
        raise NotAnnotatable("register_text", "the trace already contains '<reg_'")
    steps = split_steps(text, count, min_step_tokens)
    if rule == "needs":
        if needs is None:
            raise NotAnnotatable("no_needs", "--rule needs reads a row's `needs` (a generated "
                                             "task's rows carry it)")
        if len(needs) != len(steps):
            raise NotAnnotatable("steps_not_lines", f"{len(steps)} steps, {len(needs)} lines "
                                                    f"in `needs` (lower --min-step-tokens)")
        needed, refers = needs_to_refers(needs)
    elif rule == "lru":
        needed, refers = list(range(len(steps))), [[] for _ in steps]
    else:
        needed, refers = needed_until(steps)
    regs, killed, forced = assign_registers(needed, refers, registers,
                                            dead_first=rule == "needs")
    annotated = "".join(register_token(r) + s for r, s in zip(regs, steps))
    return TipAnnotation(annotated, len(steps), len(set(regs)), killed, forced, regs)


def strip_registers(annotated: str) -> str:
    return REGISTER_TEXT.sub("", annotated)


def tip_faithful(annotated: str, source: str) -> bool:
    """Removing the registers gives back the trace, character for character."""
    return strip_registers(annotated) == source
