"""Synthetic TIP traces: real reasoning text with registers placed by a rule.

Worked solutions (MATH / GSM8K) are split into steps at sentence and line ends (short
sentences are merged until a step has at least `min_step_tokens` tokens); step k opens with
register `k mod registers`, so each step stays live for exactly `registers` steps, which is
the pattern a TIP model trained with a KV penalty converges to. Solutions are concatenated
until a trace reaches `min_tokens`.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from solm.core.control_tokens import register_token

_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+|\n+")


def split_steps(text: str, count: Callable[[str], int], min_step_tokens: int) -> list[str]:
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    steps: list[str] = []
    current = ""
    for p in pieces:
        current = f"{current} {p}" if current else p
        if count(current) >= min_step_tokens:
            steps.append(current)
            current = ""
    if current:
        steps.append(current)
    return steps


def build_traces(solutions: Iterator[tuple[str, str]], count: Callable[[str], int],
                 n_traces: int, min_tokens: int = 4000, registers: int = 16,
                 min_step_tokens: int = 24) -> list[dict]:
    """Rows {id, prompt, response} whose responses carry `<reg_i>` tags in text form."""
    out: list[dict] = []
    for t in range(n_traces):
        prompt, parts, tokens, step = None, [], 0, 0
        for question, solution in solutions:
            prompt = prompt or f"Solve step by step, reusing thought registers.\n\n{question}"
            for s in split_steps(solution, count, min_step_tokens):
                text = f"{register_token(step % registers)}{s}\n"
                parts.append(text)
                tokens += count(text)
                step += 1
            if tokens >= min_tokens:
                break
        if tokens < min_tokens:
            raise ValueError(f"ran out of solutions after {t} traces of {min_tokens} tokens")
        out.append({"id": f"tip-trace-{t}", "prompt": prompt, "response": "".join(parts),
                    "steps": step, "registers": registers})
    return out
