"""Answers extracted from tricky \\boxed{} cases and judged against golds: nested braces,
\\frac, units, several boxes (the last counts), GSM8K's #### N, AIME integers."""

import pytest

from solm.core.math_task import (gold_answer, is_correct, last_boxed, math_prompt,
                                 predicted_answer, score_solution)


@pytest.mark.parametrize("text,expected", [
    ("so $x = \\boxed{5}$.", "5"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("nested \\boxed{\\sqrt{\\frac{a}{b^{2}}}} end", "\\sqrt{\\frac{a}{b^{2}}}"),
    ("first \\boxed{3} then corrected: \\boxed{4}", "4"),
    ("\\boxed{18 \\text{ dollars}}", "18 \\text{ dollars}"),
    ("\\boxed {7}", "7"),
    ("\\fbox{9}", "9"),
    ("no box at all", None),
    ("an unclosed \\boxed{3 ", None),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_gsm8k_style_answers_when_there_is_no_box():
    assert predicted_answer("Natalia sold 72 clips.\n#### 72") == "72"
    assert predicted_answer("\\boxed{5} and #### 6") == "5"  # the box wins


@pytest.mark.parametrize("pred,gold,kind,ok", [
    ("\\frac{1}{2}", "\\frac{1}{2}", "math", True),
    ("\\dfrac{1}{2}", "\\frac12", "math", True),
    ("0.5", "\\frac{1}{2}", "math", True),
    ("\\frac{2}{4}", "\\frac{1}{2}", "math", True),
    ("\\frac{1}{3}", "\\frac{1}{2}", "math", False),
    ("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)", "math", True),
    ("18 \\text{ dollars}", "18", "integer", True),
    ("1,072", "1072", "integer", True),
    ("72.0", "72", "integer", True),
    ("73", "72", "integer", False),
    ("72.5", "72", "integer", False),  # not rounded or truncated to the answer
    ("71.99", "72", "integer", False),
    ("", "72", "integer", False),
    (None, "72", "integer", False),
    ("x", "72", "integer", False),
    ("many", "none", "integer", False),  # two answers that are not integers do not agree
    ("72.", "72", "integer", True),  # a sentence's full stop after the answer
    # GSM8K has negative answers: a sign survives every spelling of the integer
    ("-5", "-5", "integer", True),
    ("-5.0", "-5", "integer", True),
    ("-5.00", "-5", "integer", True),
    ("5.0", "-5", "integer", False),
    ("-5.0", "5", "integer", False),
])
def test_is_correct(pred, gold, kind, ok):
    assert is_correct(pred, gold, kind) is ok


def test_golds_of_each_data_set():
    assert gold_answer({"id": "2024-I-1", "problem": "p", "answer": "204"}) == ("204", "integer")
    assert gold_answer({"id": "aime25-3", "answer": "70"}) == ("70", "integer")
    assert gold_answer({"id": "gsm8k-train-0", "question": "q",
                        "answer": "48/2 = 24\n#### 1,072"}) == ("1072", "integer")
    assert gold_answer({"unique_id": "test/algebra/1.json", "answer": "\\frac{1}{2}"}) == \
        ("\\frac{1}{2}", "math")
    assert gold_answer({"id": "deepmath-0", "final_answer": "2"}) == ("2", "math")
    # a GSM8K-style worked answer makes the row an integer row whatever its id says
    assert gold_answer({"id": "row-7", "question": "q", "answer": "2 + 3 = 5\n#### 5"}) == \
        ("5", "integer")
    with pytest.raises(KeyError):
        gold_answer({"id": "x"})


def test_score_solution_and_the_prompt():
    row = {"id": "gsm8k-1", "answer": "#### 12"}
    assert score_solution("3 x 4 = 12, so \\boxed{12}.", row)["correct"]
    assert not score_solution("\\boxed{12} no wait \\boxed{13}", row)["correct"]
    assert math_prompt("  What is 2+2?\n").startswith("What is 2+2?\n\n")
    assert "\\boxed{}" in math_prompt("q")
