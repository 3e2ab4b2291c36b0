"""The `tracking` task: variables changed by a list of operations, the final value of one asked.

A problem states a few one-letter variables with digit values and a numbered list of
operations on them, all arithmetic modulo 10:

- `a += 4` / `a -= 8`: add or subtract a digit;
- `a += b`: add another variable's value;
- `a = b`: copy another variable;
- `swap a and b`: exchange two values.

The solver (`solve`) works through it the way a step-by-step reasoning trace does: a line
with the start values, then one line per operation that names it, does its arithmetic and
writes the whole state again, then the answer in `\\boxed{}`. Each step reads the step
before it (the state) and the prompt (its operation); every older step stops mattering once
the next state is written. That is the shape TIP's registers exploit in maths traces
(worked steps that later steps stop referring to), while the prompt stays needed to the end,
which a recent-window cache (StreamingLLM) loses once the trace outgrows its window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TASK = "tracking"
MODULUS = 10
NAMES = "abcdefgh"


@dataclass(frozen=True)
class Operation:
    kind: str  # "add" (a digit), "sub" (a digit), "add_var", "copy", "swap"
    target: str
    source: str | None = None  # the other variable (add_var, copy, swap)
    digit: int = 0  # add / sub

    def text(self) -> str:
        if self.kind == "add":
            return f"{self.target} += {self.digit}"
        if self.kind == "sub":
            return f"{self.target} -= {self.digit}"
        if self.kind == "add_var":
            return f"{self.target} += {self.source}"
        if self.kind == "copy":
            return f"{self.target} = {self.source}"
        return f"swap {self.target} and {self.source}"


@dataclass(frozen=True)
class Problem:
    start: dict[str, int]
    operations: tuple[Operation, ...]
    asked: str

    def question(self) -> str:
        start = ", ".join(f"{v} = {x}" for v, x in self.start.items())
        ops = "\n".join(f"{i}. {op.text()}" for i, op in enumerate(self.operations, 1))
        return (f"Track the variables through the operations below, in order. All arithmetic "
                f"is modulo {MODULUS}.\nStart: {start}.\nOperations:\n{ops}\n"
                f"What is the final value of {self.asked}?")


def generate(rng: random.Random, variables: int = 3, min_ops: int = 6,
             max_ops: int = 30) -> Problem:
    """One problem: `variables` variables, between `min_ops` and `max_ops` operations
    (log-uniformly many)."""
    if not 2 <= variables <= len(NAMES):
        raise ValueError(f"variables must be in 2..{len(NAMES)}, got {variables}")
    if not 1 <= min_ops <= max_ops:
        raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
    names = NAMES[:variables]
    start = {v: rng.randrange(MODULUS) for v in names}
    ops = []
    # log-uniform: most problems short, a long tail up to max_ops (traces past 1,000 tokens)
    count = min(max_ops, int(min_ops * ((max_ops + 1) / min_ops) ** rng.random()))
    for _ in range(count):
        kind = rng.choices(("add", "sub", "add_var", "copy", "swap"), (3, 3, 2, 1, 1))[0]
        target = rng.choice(names)
        if kind in ("add", "sub"):
            ops.append(Operation(kind, target, digit=rng.randint(1, MODULUS - 1)))
        else:
            source = rng.choice([v for v in names if v != target])
            ops.append(Operation(kind, target, source))
    return Problem(start, tuple(ops), rng.choice(names))


def _state(values: dict[str, int]) -> str:
    return ", ".join(f"{v}={x}" for v, x in values.items())


def apply_operation(values: dict[str, int], op: Operation) -> str:
    """Apply `op` to `values` in place; returns the work the trace shows for it."""
    t, s = op.target, op.source
    if op.kind in ("add", "sub"):
        old = values[t]
        values[t] = (old + op.digit if op.kind == "add" else old - op.digit) % MODULUS
        sign = "+" if op.kind == "add" else "-"
        work = f"{t} = {old} {sign} {op.digit} = {values[t]}"
    elif op.kind == "add_var":
        old = values[t]
        values[t] = (old + values[s]) % MODULUS
        work = f"{t} = {old} + {values[s]} = {values[t]}"
    elif op.kind == "copy":
        values[t] = values[s]
        work = f"{t} = {values[t]}"
    else:
        values[t], values[s] = values[s], values[t]
        work = f"{t} = {values[t]} and {s} = {values[s]}"
    return work


def solve(problem: Problem) -> tuple[str, int]:
    """(the step-by-step trace, the answer)."""
    values = dict(problem.start)
    lines = [f"We start with {_state(values)}."]
    for i, op in enumerate(problem.operations, 1):
        work = apply_operation(values, op)
        # no ': ' or '. ' inside a line: the rules annotator's steps are the solver's lines
        lines.append(f"Step {i} ({op.text()}) gives {work}, so {_state(values)}.")
    answer = values[problem.asked]
    lines.append(f"The final value of {problem.asked} is {answer}, so the answer is "
                 f"\\boxed{{{answer}}}.")
    return "\n".join(lines), answer


def make_rows(n: int, seed: int, variables: int = 3, min_ops: int = 6,
              max_ops: int = 30) -> list[dict]:
    """`n` rows {id, task, question, solution, answer}; the same (n, seed, ...) gives the
    same rows, and a row's id names its seed, so two files from different seeds never share
    an id."""
    rng = random.Random(f"{TASK}-{seed}-{variables}-{min_ops}-{max_ops}")
    rows = []
    for i in range(n):
        problem = generate(rng, variables, min_ops, max_ops)
        solution, answer = solve(problem)
        rows.append({"id": f"{TASK}-s{seed}-{i}", "task": TASK,
                     "question": problem.question(), "solution": solution,
                     "answer": str(answer), "operations": len(problem.operations)})
    return rows
