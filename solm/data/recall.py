"""The `recall` task: tracking's variables and operations, plus operations that read a value
back from an earlier step, so which steps must stay alive is decided by the problem.

A problem states a few one-letter variables with digit values and a numbered list of
operations, all arithmetic modulo 10, as in `tracking` (`a += 4`, `a -= 8`, `a += b`,
`a = b`, `swap a and b`), and one more kind:

- `a = b from step 4`: `a` takes the value `b` had right after step 4.

The solver writes one line per step, as `tracking` does (the operation, its arithmetic, the
whole state again), so the step before is what the next step reads. A recall step also reads
the line of the step it names: that line must stay alive until its last reader, however many
steps lie between (a reasoning trace's lemma, proved early and used much later), while every
other old line dies at the next step. `needs` lists, per step, the earlier steps it reads.

What it adds to `tracking`: there, the one live step is always the last, so a fixed rule
(keep the prompt and the last step) does what TIP's registers do. Here the live steps are far
apart and placed by the problem, so a recent window drops the ones a later step still needs,
and an eviction must read the problem (the operation list names every later reader) or
learn where its reads go.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from solm.data.tracking import MODULUS, NAMES, Operation, _state, apply_operation

TASK = "recall"
MIN_GAP = 3  # a recall reads a step at least this many steps back (else it is the last state)


@dataclass(frozen=True)
class Recall:
    """`target = source from step step`."""

    target: str
    source: str
    step: int

    def text(self) -> str:
        return f"{self.target} = {self.source} from step {self.step}"


@dataclass(frozen=True)
class RecallProblem:
    start: dict[str, int]
    operations: tuple  # Operation | Recall
    asked: str

    def question(self) -> str:
        start = ", ".join(f"{v} = {x}" for v, x in self.start.items())
        ops = "\n".join(f"{i}. {op.text()}" for i, op in enumerate(self.operations, 1))
        return (f"Track the variables through the operations below, in order. All arithmetic "
                f"is modulo {MODULUS}; 'x = y from step k' sets x to the value y had right "
                f"after step k.\nStart: {start}.\nOperations:\n{ops}\n"
                f"What is the final value of {self.asked}?")


def generate(rng: random.Random, variables: int = 3, min_ops: int = 12, max_ops: int = 36,
             recall_share: float = 0.3, max_open: int = 6) -> RecallProblem:
    """One problem: between `min_ops` and `max_ops` operations (log-uniformly many), about
    `recall_share` of them recalls (each of a step at least `MIN_GAP` back, drawn uniformly
    over those); at most `max_open` earlier steps are waiting for a reader at any step, so a
    trace never needs more live steps than registers allow."""
    if not 2 <= variables <= len(NAMES):
        raise ValueError(f"variables must be in 2..{len(NAMES)}, got {variables}")
    if not 1 <= min_ops <= max_ops:
        raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
    if not 0 <= recall_share <= 1:
        raise ValueError(f"recall_share must be in 0..1, got {recall_share}")
    names = NAMES[:variables]
    start = {v: rng.randrange(MODULUS) for v in names}
    count = min(max_ops, int(min_ops * ((max_ops + 1) / min_ops) ** rng.random()))
    ops: list = []
    # plan the recalls first: which step reads which, keeping the open reads bounded
    reads: dict[int, int] = {}  # reader step -> step read
    for k in range(1, count + 1):
        if k - MIN_GAP >= 1 and rng.random() < recall_share:
            choice = rng.randint(1, k - MIN_GAP)
            if all(len(open_reads(reads, s) | {choice}) <= max_open for s in range(choice, k)):
                reads[k] = choice
    for k in range(1, count + 1):
        target = rng.choice(names)
        if k in reads:
            ops.append(Recall(target, rng.choice(names), reads[k]))
            continue
        kind = rng.choices(("add", "sub", "add_var", "copy", "swap"), (3, 3, 2, 1, 1))[0]
        if kind in ("add", "sub"):
            ops.append(Operation(kind, target, digit=rng.randint(1, MODULUS - 1)))
        else:
            ops.append(Operation(kind, target, rng.choice([v for v in names if v != target])))
    return RecallProblem(start, tuple(ops), rng.choice(names))


def open_reads(reads: dict[int, int], step: int) -> set[int]:
    """The steps at or before `step` that a later step still reads (`reads`: reader ->
    step read)."""
    return {r for reader, r in reads.items() if r <= step < reader}


def solve(problem: RecallProblem) -> tuple[str, int]:
    """(the step-by-step trace, the answer)."""
    values = dict(problem.start)
    history = [dict(values)]  # the state after each step (0: the start)
    lines = [f"We start with {_state(values)}."]
    for i, op in enumerate(problem.operations, 1):
        if isinstance(op, Recall):
            value = history[op.step][op.source]
            values[op.target] = value
            work = f"{op.target} = {value} ({op.source} after step {op.step})"
        else:
            work = apply_operation(values, op)
        history.append(dict(values))
        # no ': ' or '. ' inside a line: the rules annotator's steps are the solver's lines
        lines.append(f"Step {i} ({op.text()}) gives {work}, so {_state(values)}.")
    answer = values[problem.asked]
    lines.append(f"The final value of {problem.asked} is {answer}, so the answer is "
                 f"\\boxed{{{answer}}}.")
    return "\n".join(lines), answer


def needs(problem: RecallProblem) -> list[list[int]]:
    """Per line of the trace (0: the start line, k: step k, the last: the answer), the
    earlier lines it reads: the line before it, and for a recall the line of its step."""
    out: list[list[int]] = [[]]
    for k, op in enumerate(problem.operations, 1):
        read = {k - 1}
        if isinstance(op, Recall):
            read.add(op.step)
        out.append(sorted(read))
    out.append([len(problem.operations)])
    return out


_RECALL = re.compile(r"^(\w) = (\w) from step (\d+)$")


def needs_from_question(question: str) -> list[list[int]]:
    """`needs`, read from the question's text alone (what an annotator of the trace sees)."""
    ops = [line.split(". ", 1)[1] for line in question.splitlines()
           if re.match(r"^\d+\. ", line)]
    out: list[list[int]] = [[]]
    for k, text in enumerate(ops, 1):
        m = _RECALL.match(text)
        out.append(sorted({k - 1} | ({int(m.group(3))} if m else set())))
    out.append([len(ops)])
    return out


def make_rows(n: int, seed: int, variables: int = 3, min_ops: int = 12, max_ops: int = 36,
              recall_share: float = 0.3, max_open: int = 6) -> list[dict]:
    """`n` rows {id, task, question, solution, answer, operations, needs}; the same settings
    and seed give the same rows, and ids name the seed."""
    rng = random.Random(f"{TASK}-{seed}-{variables}-{min_ops}-{max_ops}-{recall_share}-"
                        f"{max_open}")
    rows = []
    for i in range(n):
        problem = generate(rng, variables, min_ops, max_ops, recall_share, max_open)
        solution, answer = solve(problem)
        rows.append({"id": f"{TASK}-s{seed}-{i}", "task": TASK,
                     "question": problem.question(), "solution": solution,
                     "answer": str(answer), "operations": len(problem.operations),
                     "needs": needs(problem)})
    return rows
