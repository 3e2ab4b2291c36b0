"""Long TIP traces for the runtime benchmark: worked solutions (MATH / GSM8K) concatenated
until a trace reaches `min_tokens`, then annotated by TIP's rules annotator
(`solm.annotate.tip_rules`: steps at sentence ends, registers that kill a step once later
steps stop referring back to it)."""

from __future__ import annotations

from typing import Callable, Iterator

from solm.annotate.tip_rules import annotate_tip_rules


def build_traces(solutions: Iterator[tuple[str, str]], count: Callable[[str], int],
                 n_traces: int, min_tokens: int = 4000, registers: int = 16,
                 min_step_tokens: int = 24) -> list[dict]:
    """Rows {id, prompt, response} whose responses carry `<reg_i>` tags in text form."""
    out: list[dict] = []
    for t in range(n_traces):
        prompt, parts, tokens = None, [], 0
        for question, solution in solutions:
            prompt = prompt or f"Solve step by step, reusing thought registers.\n\n{question}"
            parts.append(solution.strip() + "\n\n")
            tokens += count(parts[-1])
            if tokens >= min_tokens:
                break
        if tokens < min_tokens:
            raise ValueError(f"ran out of solutions after {t} traces of {min_tokens} tokens")
        a = annotate_tip_rules("".join(parts), count, registers, min_step_tokens)
        out.append({"id": f"tip-trace-{t}", "prompt": prompt, "response": a.annotated,
                    "steps": a.steps, "registers": registers, "killed": a.killed})
    return out
