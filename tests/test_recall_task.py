"""The `recall` task (`solm data make recall`): the generator's answers and every state
against a second solver reading the question text, the reads per line against the text, the
bound on steps waiting for a reader, the register annotation faithful token for token and
never killing a step a later step reads (recomputed from the question), and `lru` as the
rule that kills by age alone."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from solm.data.recall import MIN_GAP, generate, make_rows, needs, needs_from_question, solve
from solm.data.tracking import MODULUS

OP = re.compile(r"^(\d+)\. (.+)$")
STATE = re.compile(r"(\w)=(\d)")


def read_question(question: str) -> tuple[dict[str, int], list[str], str]:
    start_line = next(line for line in question.splitlines() if line.startswith("Start: "))
    start = {k: int(v) for k, v in re.findall(r"(\w) = (\d)", start_line)}
    ops = [m.group(2) for line in question.splitlines() if (m := OP.match(line))]
    asked = re.search(r"final value of (\w)\?$", question).group(1)
    return start, ops, asked


def second_solver(question: str) -> tuple[list[dict[str, int]], int, list[set[int]]]:
    """Every state after each operation, the answer, and per step the steps whose state it
    reads (the one before, and a recalled one): the operations applied as their text says,
    on a list of past states indexed by step."""
    start, ops, asked = read_question(question)
    states = [dict(start)]
    reads = []
    for k, text in enumerate(ops, 1):
        now = dict(states[-1])
        read = {k - 1}
        if m := re.match(r"^(\w) = (\w) from step (\d+)$", text):
            target, source, step = m.group(1), m.group(2), int(m.group(3))
            now[target] = states[step][source]
            read.add(step)
        elif m := re.match(r"^swap (\w) and (\w)$", text):
            a, b = m.groups()
            now[a], now[b] = states[-1][b], states[-1][a]
        else:
            target, op, operand = re.match(r"^(\w) (\+=|-=|=) (\w)$", text).groups()
            value = int(operand) if operand.isdigit() else states[-1][operand]
            now[target] = value if op == "=" else \
                (now[target] + (value if op == "+=" else -value)) % MODULUS
        states.append(now)
        reads.append(read)
    return states[1:], states[-1][asked], reads


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10 ** 6), variables=st.integers(2, 5),
       ops=st.tuples(st.integers(4, 20), st.integers(0, 24)),
       share=st.sampled_from([0.0, 0.3, 0.7]), most=st.integers(1, 8))
def test_the_answer_every_state_and_every_read_agree_with_a_second_solver(seed, variables, ops,
                                                                          share, most):
    problem = generate(random.Random(seed), variables, ops[0], ops[0] + ops[1], share, most)
    solution, answer = solve(problem)
    states, expected, reads = second_solver(problem.question())
    assert answer == expected
    steps = [line for line in solution.splitlines() if line.startswith("Step ")]
    assert len(steps) == len(states) == len(problem.operations)
    for k, (line, state) in enumerate(zip(steps, states), 1):
        written = {v: int(x) for v, x in STATE.findall(line.split(", so ")[-1])}
        assert line.startswith(f"Step {k} (") and written == state, (line, state)
    assert solution.endswith(f"\\boxed{{{expected}}}.")
    lines = needs(problem)
    assert lines == needs_from_question(problem.question())
    assert [set(r) for r in lines[1:-1]] == reads and lines[-1] == [len(states)]
    for k, read in enumerate(reads, 1):
        assert all(r == k - 1 or r <= k - MIN_GAP for r in read)
    # at every step, the earlier steps a later step still recalls are at most `most`
    recalls = [(k, r) for k, read in enumerate(reads, 1) for r in read if r != k - 1]
    for s in range(1, len(states) + 1):
        assert len({r for k, r in recalls if r <= s < k}) <= most


def test_recalls_reach_far_back_and_the_rows_are_reproducible():
    rows = make_rows(300, 3)
    assert rows == make_rows(300, 3) and not {r["id"] for r in rows} & {
        r["id"] for r in make_rows(300, 4)}
    gaps = [k - r for row in rows for k, read in enumerate(row["needs"]) for r in read
            if r != k - 1]
    assert len(gaps) > 600 and min(gaps) >= MIN_GAP and max(gaps) >= 20
    assert sorted(gaps)[len(gaps) // 2] >= 6  # typical reads lie many steps back


def _tok():
    from solm.core.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.mark.parametrize("registers", [8, 16])
def test_needs_annotation_is_faithful_and_never_kills_a_step_still_read(registers):
    from solm.annotate.tip_rules import annotate_tip_rules, strip_registers

    tok = _tok()

    def count(text):
        return len(tok(text, add_special_tokens=False).input_ids)

    for row in make_rows(30, 5, max_open=6):
        a = annotate_tip_rules(row["solution"], count, registers, 16, "needs", row["needs"])
        assert strip_registers(a.annotated) == row["solution"]
        regs = a.step_registers
        assert len(regs) == len(row["solution"].splitlines())
        _, _, reads = second_solver(row["question"])
        readers = [[]] + [sorted(r) for r in reads] + [[len(reads)]]
        for j, read in enumerate(readers):
            for i in read:  # no step between i and its reader j took i's register
                assert regs[i] not in regs[i + 1:j], (i, j)
        assert a.forced == 0


def test_needs_annotation_takes_a_dead_steps_register_before_an_unused_one():
    from solm.annotate.tip_rules import annotate_tip_rules

    tok = _tok()

    def count(text):
        return len(tok(text, add_special_tokens=False).input_ids)

    for row in make_rows(30, 7, max_open=6):
        regs = annotate_tip_rules(row["solution"], count, 16, 1, "needs",
                                  row["needs"]).step_registers
        _, _, reads = second_solver(row["question"])
        readers = [[]] + [sorted(r) for r in reads] + [[len(reads)]]
        last_reader = list(range(len(readers)))
        for j, read in enumerate(readers):
            for i in read:
                last_reader[i] = max(last_reader[i], j)
        most_live = 0
        for j in range(1, len(regs)):
            holder = {regs[i]: i for i in range(j)}  # register -> the step it holds
            dead = [i for i in holder.values() if last_reader[i] < j]
            if regs[j] not in holder:  # a fresh register: only when no held step is dead
                assert not dead, (j, dead)
            else:
                assert holder[regs[j]] in dead, j
            most_live = max(most_live, len(holder) - len(dead))
        assert len(set(regs)) <= most_live + 2  # dead steps do not pile up


def test_lru_kills_by_age_alone():
    from solm.annotate.tip_rules import annotate_tip_rules

    tok = _tok()

    def count(text):
        return len(tok(text, add_special_tokens=False).input_ids)

    row = make_rows(1, 6, min_ops=30, max_ops=30)[0]
    a = annotate_tip_rules(row["solution"], count, 4, 16, "lru")
    assert a.step_registers == [k % 4 for k in range(len(a.step_registers))]
    b = annotate_tip_rules(row["solution"], count, 4, 16, "needs", row["needs"])
    assert a.step_registers != b.step_registers


def test_data_make_recall_and_tip_annotate_needs_end_to_end(tmp_path):
    from solm.cli.main import app
    from solm.cli.tip import app as tip_app

    out = tmp_path / "recall.jsonl"
    r = CliRunner().invoke(app, ["data", "make", "recall", "-o", str(out), "--n", "6",
                                 "--seed", "3", "--max-open", "4", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == make_rows(6, 3, max_open=4)
    r = CliRunner().invoke(app, ["data", "make", "tracking", "-o", str(tmp_path / "t.jsonl"),
                                 "--max-open", "4"])
    assert r.exit_code != 0 and "recall task only" in r.output
    ann = tmp_path / "ann.jsonl"
    r = CliRunner().invoke(tip_app, ["annotate", "-i", str(out), "-o", str(ann),
                                     "--registers", "16", "--rule", "needs", "-q"])
    assert r.exit_code == 0, r.output
    annotated = [json.loads(x) for x in ann.read_text().splitlines()]
    assert len(annotated) == 6 and all(a["rule"] == "needs" for a in annotated)
    r = CliRunner().invoke(tip_app, ["annotate", "-i", str(out), "-o", str(tmp_path / "x.jsonl"),
                                     "--rule", "nope"])
    assert r.exit_code != 0 and "--rule" in r.output
