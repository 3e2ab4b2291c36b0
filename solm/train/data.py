"""Training rows for SFT: read, validate (file:line:field errors), split off a held-out set."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from solm.core.errors import DataError
from solm.core.jsonl import read_jsonl
from solm.core.pasta_lang import PastaSyntaxError, parse, strip


@dataclass
class SFTRows:
    train: list[dict]
    eval: list[dict]
    annotated: int  # rows whose training text carries Pasta-Lang tags


def _text_field(raw: dict, path: str, line: int, strip_annotations: bool) -> tuple[str, bool]:
    """The response to train on, and whether it carries tags."""
    annotated = raw.get("annotated")
    if annotated is not None:
        if not isinstance(annotated, str):
            raise DataError("expected a string", path=path, line=line, field="annotated")
        try:
            parse(annotated)
        except PastaSyntaxError as e:
            raise DataError(f"invalid Pasta-Lang: {e}", path=path, line=line,
                            field="annotated") from None
        if strip_annotations:
            return strip(annotated), False
        return annotated, "<promise" in annotated
    response = raw.get("response")
    if not isinstance(response, str) or not response.strip():
        raise DataError("no training text: need a non-empty 'annotated' or 'response'",
                        path=path, line=line, field="response")
    return response, False


def prompt_and_system(raw: dict, path: str, line: int) -> tuple[str, str | None]:
    """A training row's prompt (non-empty) and optional system message, checked."""
    prompt = raw.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError("expected a non-empty string", path=path, line=line, field="prompt")
    system = raw.get("system")
    if system is not None and not isinstance(system, str):
        raise DataError("expected a string or null", path=path, line=line, field="system")
    return prompt, system


def load_sft_rows(path: str | os.PathLike, strip_annotations: bool = False,
                  limit: int | None = None) -> list[dict]:
    """Rows {id, prompt, system, text, tagged} from a `pasta annotate` output (or any JSONL
    with prompt + response/annotated). Rows without tags are trained as plain responses."""
    path = str(Path(path))
    rows: list[dict] = []
    for line, raw in enumerate(read_jsonl(path), start=1):
        prompt, system = prompt_and_system(raw, path, line)
        text, tagged = _text_field(raw, path, line, strip_annotations)
        rows.append({"id": str(raw.get("id", f"row-{line}")), "prompt": prompt,
                     "system": system, "text": text, "tagged": tagged,
                     # the length filter reads this, so Pasta- and Baseline-SFT keep the same rows
                     "longest_text": raw.get("annotated") or text})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataError("no training rows", path=path)
    return rows


def split_rows(rows: list[dict], eval_rows: int, seed: int) -> SFTRows:
    """A seeded held-out set of `eval_rows` rows; the same file and seed give the same split
    for Pasta-SFT and Baseline-SFT."""
    if eval_rows >= len(rows):
        raise DataError(f"--eval-rows {eval_rows} leaves no training rows ({len(rows)} rows)")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held = set(order[:eval_rows])
    train = [r for i, r in enumerate(rows) if i not in held]
    evals = [r for i, r in enumerate(rows) if i in held]
    return SFTRows(train, evals, sum(r["tagged"] for r in train))
