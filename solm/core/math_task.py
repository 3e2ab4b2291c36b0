"""The maths task every TIP stage shares: the prompt, the gold answer of a problem row, and
whether a generated solution's final answer is right.

- **Prompt.** The problem, then `INSTRUCTION` (the usual "reason step by step, final answer
  in \\boxed{}" line), the same in `tip sft`, `tip grpo` and `tip eval`.
- **Gold.** `final_answer` / `answer` of MATH, MATH-500, DeepMath and AIME rows; GSM8K's
  `answer` is a worked solution ending `#### N`, whose N is the gold; the `answer` of a
  generated task's row (`solm data make`, rows naming their `task`) is an integer.
- **Prediction.** The content of the *last* `\\boxed{...}` (braces balanced, so
  `\\boxed{\\frac{1}{2}}` is whole); a GSM8K-style `#### N` line when there is no box.
- **Correct.** `integer` gold (AIME, GSM8K, generated tasks): the prediction, with units, `\\text{}`, commas,
  `$` and a trailing `.` dropped, is the same integer. Otherwise `math-verify`
  (`verify(parse(gold), parse(prediction))`, gold first) decides, with its timeouts in the
  main thread and none elsewhere (they use `signal.alarm`); if math-verify cannot parse
  either side, the normalised strings must be equal.
"""

from __future__ import annotations

import re
import threading

from solm.core.prompt_format import MATH_INSTRUCTION as INSTRUCTION, with_instruction
_GSM8K_GOLD = re.compile(r"####\s*(.+?)\s*$", re.S)
_INTEGER = re.compile(r"^-?\d+$")


def math_prompt(problem: str) -> str:
    return with_instruction(problem, INSTRUCTION)


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None when
    there is none or the last one never closes."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    start = starts[-1]
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def predicted_answer(text: str) -> str | None:
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = _GSM8K_GOLD.search(text)
    return m.group(1).strip() if m else None


GOLD_FIELDS = ("final_answer", "answer", "expected_answer")


class GoldTypeError(ValueError):
    """A gold answer that is neither text nor a number (a list, an object, true/false, "")."""

    def __init__(self, field: str, kind: str):
        super().__init__(f"expected the gold answer as text or a number, got {kind}")
        self.field = field


def gold_answer(row: dict) -> tuple[str, str]:
    """(gold, kind) of a problem row; kind `integer` for AIME / GSM8K, else `math`."""
    for key in GOLD_FIELDS:
        value = row.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise GoldTypeError(key, type(value).__name__)
        value = str(value).strip()
        if not value:
            raise GoldTypeError(key, "empty string")
        m = _GSM8K_GOLD.search(value)
        if m:
            value = m.group(1).strip()
        value = value.replace(",", "") if _INTEGER.match(value.replace(",", "")) else value
        kind = "integer" if _INTEGER.match(value) and _is_integer_set(row) else "math"
        return value, kind
    raise KeyError("no final_answer, answer or expected_answer")


_AIME_ID = re.compile(r"^\d{4}-I{1,2}-\d+$")


def _is_integer_set(row: dict) -> bool:
    """AIME (ids like `2024-I-1`, or naming aime) and GSM8K rows have integer answers."""
    if row.get("task"):  # a task `solm data make` generated: integer answers
        return True
    rid = str(row.get("id", row.get("unique_id", ""))).lower()
    return ("aime" in rid or "gsm8k" in rid or bool(_AIME_ID.match(rid.upper()))
            or "####" in str(row.get("answer", "")))


def normalise(answer: str) -> str:
    s = answer.strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:mathrm|textbf|mbox)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\!", "").replace("\\,", "").replace("\\ ", "").replace("$", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("^\\circ", "")
    s = s.replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    s = s.rstrip(".").strip()
    return re.sub(r"\s+", " ", s)


def integer_of(answer: str) -> int | None:
    s = normalise(answer).replace(",", "")
    s = re.sub(r"\s*[a-zA-Z][a-zA-Z ]*$", "", s).strip()  # trailing units: "18 dollars"
    if _INTEGER.match(s):
        return int(s)
    m = re.fullmatch(r"(-?\d+)\.0+", s)
    return int(m.group(1)) if m else None


def is_correct(prediction: str | None, gold: str, kind: str = "math") -> bool:
    if prediction is None or not prediction.strip():
        return False
    if kind == "integer":
        value = integer_of(prediction)
        return value is not None and value == integer_of(gold)
    if normalise(prediction) == normalise(gold):
        return True
    return _math_verify(gold, prediction)


def _math_verify(gold: str, prediction: str) -> bool:
    from math_verify import LatexExtractionConfig, parse, verify

    main = threading.current_thread() is threading.main_thread()
    timeout = 5 if main else None
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    try:
        g = parse(f"${gold}$", extraction_config=config, parsing_timeout=timeout)
        p = parse(f"${prediction}$", extraction_config=config, parsing_timeout=timeout)
        if not g or not p:
            return False
        return bool(verify(g, p, timeout_seconds=timeout))
    except Exception:  # math-verify raises on some inputs and on a timeout: not correct
        return False


def score_solution(text: str, row: dict) -> dict:
    """{prediction, gold, kind, correct} of a generated solution for a problem row."""
    gold, kind = gold_answer(row)
    prediction = predicted_answer(text)
    return {"prediction": prediction, "gold": gold, "kind": kind,
            "correct": is_correct(prediction, gold, kind)}


_instructed = math_prompt  # load_problems' `math_prompt` flag shadows the function


def load_problems(path: str, math_prompt: bool, limit: int | None = None) -> list[dict]:
    """Rows {id, prompt, gold, kind, origin}: `origin` is (file, line, field), for errors
    that name the row."""
    from solm.core.errors import DataError
    from solm.core.jsonl import read_jsonl_numbered

    rows = []
    for line, raw in read_jsonl_numbered(path):
        field = next((f for f in ("question", "problem", "prompt") if f in raw), None)
        text = raw.get(field) if field else None
        if not isinstance(text, str) or not text.strip():
            raise DataError("expected the problem text", path=path, line=line,
                            field=field or "question")
        try:
            gold, kind = gold_answer(raw)
        except KeyError:
            given = next((k for k in GOLD_FIELDS if k in raw), None)
            raise DataError("expected the gold answer" + (", got null" if given else ""),
                            path=path, line=line, field=given or "final_answer") from None
        except GoldTypeError as e:
            raise DataError(str(e), path=path, line=line, field=e.field) from None
        rows.append({"id": str(raw.get("id", raw.get("unique_id", f"row-{line}"))),
                     "prompt": _instructed(text) if math_prompt else text,
                     "gold": gold, "kind": kind, "origin": (str(path), line, field)})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError("no problems", path=path)
    return rows
