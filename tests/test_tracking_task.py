"""The `tracking` task (`solm data make tracking`): the generator's answers against a second
solver that reads the question text, the solver's steps against it too, the register
annotation faithful token for token, the verifier the reward uses, and the reward against a
recount by hand."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from solm.data.tracking import MODULUS, generate, make_rows, solve

OP = re.compile(r"^(\d+)\. (?:swap (\w) and (\w)|(\w) (\+=|-=|=) (\w))$")
STATE = re.compile(r"(\w)=(\d)")


def read_question(question: str) -> tuple[dict[str, int], list[tuple], str]:
    """The start values, the operations and the asked variable, read back from the text."""
    start_line = next(line for line in question.splitlines() if line.startswith("Start: "))
    start = {k: int(v) for k, v in re.findall(r"(\w) = (\d)", start_line)}
    ops = []
    for line in question.splitlines():
        m = OP.match(line)
        if m:
            ops.append(m.groups())
    asked = re.search(r"final value of (\w)\?$", question).group(1)
    return start, ops, asked


def second_solver(question: str) -> tuple[list[dict[str, int]], int]:
    """Every state after each operation, and the answer: the operations applied as the
    question's text states them, on a list indexed by letter."""
    start, ops, asked = read_question(question)
    letters = sorted(start)
    cells = [start[x] for x in letters]
    states = []
    for number, sa, sb, target, op, operand in ops:
        if sa is not None:
            i, j = letters.index(sa), letters.index(sb)
            cells[i], cells[j] = cells[j], cells[i]
        else:
            i = letters.index(target)
            value = int(operand) if operand.isdigit() else cells[letters.index(operand)]
            if op == "=":
                cells[i] = value
            else:
                cells[i] = (cells[i] + (value if op == "+=" else -value)) % MODULUS
        states.append(dict(zip(letters, cells)))
    return states, cells[letters.index(asked)]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10 ** 6), variables=st.integers(2, 6),
       ops=st.tuples(st.integers(1, 20), st.integers(0, 20)))
def test_the_generators_answer_and_every_step_agree_with_a_second_solver(seed, variables, ops):
    problem = generate(random.Random(seed), variables, ops[0], ops[0] + ops[1])
    solution, answer = solve(problem)
    states, expected = second_solver(problem.question())
    assert len(states) == len(problem.operations)
    assert answer == expected
    step_lines = [line for line in solution.splitlines() if line.startswith("Step ")]
    assert len(step_lines) == len(states)
    for k, (line, state) in enumerate(zip(step_lines, states), 1):
        assert line.startswith(f"Step {k} (")
        written = dict((v, int(x)) for v, x in STATE.findall(line.split(", so ")[-1]))
        assert written == state, (line, state)
    assert solution.endswith(f"\\boxed{{{expected}}}.")


def test_rows_are_reproducible_per_seed_and_seeds_share_no_problem():
    a, b = make_rows(50, 1), make_rows(50, 1)
    assert a == b
    other = make_rows(50, 2)
    assert not {r["id"] for r in a} & {r["id"] for r in other}
    assert not {r["question"] for r in a} & {r["question"] for r in other}
    for row in a:
        assert second_solver(row["question"])[1] == int(row["answer"])
        assert row["operations"] == len(read_question(row["question"])[1])
    counts = [r["operations"] for r in make_rows(400, 3)]
    assert min(counts) >= 6 and max(counts) <= 30
    assert sorted(counts)[len(counts) // 2] < 18  # log-uniform: most problems short


def test_traces_are_long_with_a_tail_past_a_thousand_tokens(pasta_tokenizer):
    lengths = sorted(len(pasta_tokenizer(r["solution"], add_special_tokens=False).input_ids)
                     for r in make_rows(300, 4))
    assert lengths[len(lengths) // 2] >= 400
    assert lengths[-1] > 1000


@pytest.mark.parametrize("registers", [2, 3, 4])
def test_register_annotation_gives_back_the_solvers_tokens_and_keeps_the_state_live(
        tip_tok, registers):
    from solm.annotate.tip_rules import annotate_tip_rules, strip_registers

    def count(text):
        return len(tip_tok(text, add_special_tokens=False).input_ids)

    for row in make_rows(20, 5):
        a = annotate_tip_rules(row["solution"], count, registers, 16)
        ids = tip_tok(strip_registers(a.annotated), add_special_tokens=False).input_ids
        assert ids == tip_tok(row["solution"], add_special_tokens=False).input_ids
        # a step per solver line: each opens with a register
        assert a.steps == len(row["solution"].splitlines())
        assert a.killed == a.steps - min(a.steps, registers)
        lines = a.annotated.split("\n")
        assert all(re.match(r"<reg_\d+>", line) for line in lines)
        # a step never takes its predecessor's register: the state it reads stays live
        assert all(x != y for x, y in zip(a.step_registers, a.step_registers[1:]))


def test_the_verifier_grades_the_last_boxed_integer(tmp_path):
    from solm.core.math_task import is_correct, load_problems, predicted_answer

    rows = make_rows(3, 6)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = load_problems(str(path), math_prompt=True)
    for row, p in zip(rows, problems):
        assert p["kind"] == "integer" and p["gold"] == row["answer"]
        assert is_correct(predicted_answer(row["solution"]), p["gold"], p["kind"])
        wrong = str((int(row["answer"]) + 1) % MODULUS)
        assert not is_correct(predicted_answer(f"\\boxed{{{wrong}}}"), p["gold"], p["kind"])
        # the last box counts, not the first
        text = f"so \\boxed{{{wrong}}}, no: \\boxed{{{row['answer']}}}"
        assert is_correct(predicted_answer(text), p["gold"], p["kind"])
        assert not is_correct(predicted_answer(f"\\boxed{{{row['answer']}}} then "
                                               f"\\boxed{{{wrong}}}"), p["gold"], p["kind"])
        assert not is_correct(predicted_answer("no box at all"), p["gold"], p["kind"])


@pytest.mark.parametrize("penalty", [0.0, 0.5, 2.0])
def test_the_reward_is_correct_minus_the_kv_term_recounted_by_hand(penalty):
    from solm.train.grpo import TipReward

    rows = make_rows(4, 7)
    max_len = 400
    completions, gold, kind, kv = [], [], [], []
    expected = []
    for i, row in enumerate(rows):
        right = i % 2 == 0
        answer = row["answer"] if right else str((int(row["answer"]) + 3) % MODULUS)
        completions.append(f"We start ... so the answer is \\boxed{{{answer}}}.")
        gold.append(row["answer"])
        kind.append("integer")
        live = [50, 399, 400, 900][i]
        kv.append(live)
        expected.append((1.0 if right else 0.0) - penalty * min(1.0, live / max_len))
    reward = TipReward(penalty, max_len, num_generations=2)
    got = reward([r["question"] for r in rows], completions, gold=gold, kind=kind,
                 live_response_kv=kv)
    assert got == pytest.approx(expected)


def test_data_make_writes_the_rows_and_refuses_bad_settings(tmp_path):
    from solm.cli.main import app

    out = tmp_path / "train.jsonl"
    r = CliRunner().invoke(app, ["data", "make", "tracking", "-o", str(out), "--n", "12",
                                 "--seed", "9", "-q"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == make_rows(12, 9)
    before = out.read_bytes()
    again = CliRunner().invoke(app, ["data", "make", "tracking", "-o", str(out), "--n", "12",
                                     "--seed", "9"])
    assert again.exit_code == 0 and "nothing to do" in again.output
    other = ["data", "make", "tracking", "-o", str(out), "--n", "3", "--variables", "4",
             "--min-ops", "2", "--max-ops", "3", "-q"]
    r = CliRunner().invoke(app, other)  # other settings: the file made before is kept
    assert r.exit_code == 1 and "n=12 (now 3)" in r.output and "--force" in r.output
    assert out.read_bytes() == before
    (tmp_path / "loose.jsonl").write_text('{"question": "mine"}\n')  # no manifest beside it
    r = CliRunner().invoke(app, ["data", "make", "tracking", "-o",
                                 str(tmp_path / "loose.jsonl"), "--n", "2"])
    assert r.exit_code == 1 and (tmp_path / "loose.jsonl").read_text() == '{"question": "mine"}\n'
    r = CliRunner().invoke(app, [*other, "--force"])
    assert r.exit_code == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(len(read_question(x["question"])[0]) == 4 for x in rows)
    assert all(2 <= x["operations"] <= 3 for x in rows)
    r = CliRunner().invoke(app, ["data", "make", "sudoku", "-o", str(out)])
    assert r.exit_code == 1 and "unknown task" in r.output
    r = CliRunner().invoke(app, ["data", "make", "tracking", "-o", str(out), "--min-ops", "9",
                                 "--max-ops", "3"])
    assert r.exit_code == 1 and "--min-ops" in r.output


STEP = re.compile(r"^Step (\d+) \((.+)\) gives (.+), so ((?:\w=\d, )*\w=\d)\.$")


def check_work(op_text: str, work: str, before: dict[str, int], after: dict[str, int]) -> None:
    """A step's arithmetic, read against the states before and after it, by the operation's
    text as the question states it."""
    m = re.match(r"^swap (\w) and (\w)$", op_text)
    if m:
        t, s = m.groups()
        assert work == f"{t} = {after[t]} and {s} = {after[s]}"
        assert (after[t], after[s]) == (before[s], before[t])
        return
    t, op, operand = re.match(r"^(\w) (\+=|-=|=) (\w)$", op_text).groups()
    if op == "=":
        assert work == f"{t} = {after[t]}" and after[t] == before[operand]
        return
    value = int(operand) if operand.isdigit() else before[operand]
    sign = "+" if op == "+=" else "-"
    assert work == f"{t} = {before[t]} {sign} {value} = {after[t]}"
    assert after[t] == (before[t] + (value if sign == "+" else -value)) % MODULUS
    assert 1 <= value <= 9 or not operand.isdigit()


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10 ** 6), variables=st.integers(2, 5))
def test_every_line_of_the_trace_says_what_the_question_asks(seed, variables):
    """The solution read line by line against the question text alone: the first line the
    start values, step k names operation k as written and does its arithmetic on the state
    the step before wrote, the last line names the asked variable and its value."""
    row = make_rows(1, seed, variables, 1, 24)[0]
    start, ops, asked = read_question(row["question"])
    op_texts = [line.split(". ", 1)[1] for line in row["question"].splitlines()
                if OP.match(line)]
    lines = row["solution"].splitlines()
    assert lines[0] == "We start with " + ", ".join(f"{v}={x}" for v, x in start.items()) + "."
    state = dict(start)
    for k, (line, text) in enumerate(zip(lines[1:-1], op_texts), 1):
        m = STEP.match(line)
        assert m, line
        number, named, work, written = m.groups()
        assert int(number) == k and named == text
        after = {v: int(x) for v, x in STATE.findall(written)}
        assert list(after) == list(start)
        check_work(text, work, state, after)
        state = after
    assert len(lines) == len(op_texts) + 2
    assert lines[-1] == (f"The final value of {asked} is {state[asked]}, so the answer is "
                         f"\\boxed{{{state[asked]}}}.")
    assert row["answer"] == str(state[asked])


def test_the_generator_draws_every_kind_of_operation_with_digits_one_to_nine():
    """Over many problems: every kind of operation, add/sub digits 1-9 (never a no-op 0),
    a source never the target itself, start values 0-9, the asked variable among them."""
    kinds, digits = set(), set()
    for row in make_rows(300, 7, 4, 6, 30):
        start, ops, asked = read_question(row["question"])
        assert set(start.values()) <= set(range(10)) and asked in start
        for number, sa, sb, target, op, operand in ops:
            if sa is not None:
                kinds.add("swap")
                assert sa != sb
            elif operand.isdigit():
                kinds.add("add" if op == "+=" else "sub")
                digits.add(int(operand))
                assert op in ("+=", "-=")
            else:
                kinds.add("copy" if op == "=" else "add_var")
                assert operand != target and op in ("=", "+=")
    assert kinds == {"add", "sub", "add_var", "copy", "swap"}
    assert digits == set(range(1, 10))


@settings(max_examples=200, deadline=None)
@given(gold=st.integers(0, 9), other=st.integers(0, 9),
       wrapper=st.sampled_from(["{}", "\\text{{{}}}", "${}$", "{}.", " {} ", "0{}"]))
def test_the_grader_reads_the_last_boxed_integer_however_it_is_written(gold, other, wrapper):
    """The verifier the reward and `tip eval` use, against the rule written another way: the
    content of the last `\\boxed{}`, with `\\text{}`, `$`, spaces, a trailing `.` and leading
    zeros set aside, is the gold integer."""
    from solm.core.math_task import is_correct, predicted_answer

    boxed = "\\boxed{" + wrapper.format(other) + "}"
    assert is_correct(predicted_answer(f"so the answer is {boxed}"), str(gold),
                      "integer") == (other == gold)
    assert is_correct(predicted_answer(f"\\boxed{{{gold}}} ... then {boxed}"), str(gold),
                      "integer") == (other == gold)
    assert not is_correct(predicted_answer(f"the answer is {other}"), str(gold), "integer")


def test_data_make_help_names_the_step_between_it_and_tip_sft():
    """`tip sft` reads `tip annotate`'s output, not `solm data make`'s: the help says so."""
    from solm.cli.main import app

    r = CliRunner().invoke(app, ["data", "make", "--help"], env={"COLUMNS": "200"})
    flat = " ".join(r.output.replace("│", " ").split())
    assert "tip annotate -i (whose output tip sft --data reads)" in flat.replace("`", "")
