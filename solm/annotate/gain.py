"""Annotation-level gain: what a model that wrote exactly a row's annotation would gain per
token, content tokens (tags removed) over the forward passes PASTA's runtime needs for them
(`solm.core.systems.pasta_schedule`). A plain row gains 1. Reported by `pasta stats` on
annotated files, written by `pasta annotate` as each row's `gain`, filtered on by `pasta mix
--min-gain`."""

from __future__ import annotations

import statistics
from typing import Callable

from solm.core.stats import geomean

GAIN_THRESHOLDS = (1.3, 1.5)


def gain_meter(tokenizer_name: str) -> Callable[[str | None], float]:
    """annotated text (None: a plain row) -> its gain, tokenized as a PASTA model would."""
    from solm.core.models import load_tokenizer
    from solm.core.vocabulary import add_control_tokens

    tok = load_tokenizer(tokenizer_name)
    add_control_tokens(None, tok, "pasta")
    return tokenizer_gain_meter(tok)


def tokenizer_gain_meter(tok) -> Callable[[str | None], float]:
    """`gain_meter` over a tokenizer that already holds Pasta-Lang's control tokens."""
    from solm.core.chat import text_ids
    from solm.core.systems.pasta import PastaVocab
    from solm.core.systems.pasta_schedule import pasta_metrics

    vocab = PastaVocab.from_tokenizer(tok)

    def gain(annotated: str | None) -> float:
        if not annotated:
            return 1.0
        return pasta_metrics(text_ids(tok, annotated), vocab).content_speedup

    return gain


def gain_summary(gains: list[float]) -> dict:
    """Geometric mean, median and how many rows reach each threshold."""
    return {"rows": len(gains),
            "geomean_gain": round(geomean(gains), 4) if gains else None,
            "median_gain": round(statistics.median(gains), 4) if gains else None,
            **{f"rows_gain_at_least_{t}": sum(g >= t for g in gains) for t in GAIN_THRESHOLDS}}


def is_annotation_file(path) -> bool:
    """Rows of `pasta annotate` (a promise count, no decode figures)? Read from the first
    row; standard input is taken for decode output."""
    import json
    from pathlib import Path

    if str(path) == "-" or not Path(path).is_file():
        return False
    with open(path, "rb") as f:  # the first row only: a reader reports any later bad line
        for raw in f:
            if raw.strip():
                try:
                    row = json.loads(raw.decode("utf-8"))
                except ValueError:  # UnicodeDecodeError included
                    return False
                return (isinstance(row, dict) and "promises" in row
                        and "content_tokens" not in row)
    return False


def annotation_stats(path, gain_of: Callable[[str | None], float]) -> dict:
    """Rows, rows with a promise, and the gain over rows with >= 2 promises and over all."""
    from solm.annotate.mix import _promises, row_gain
    from solm.core.errors import DataError
    from solm.core.jsonl import read_jsonl_numbered

    gains, multi, promised = [], [], 0
    for line, row in read_jsonl_numbered(path):
        n = _promises(row, path, line)
        gain = row_gain(row, gain_of, path, line)
        gains.append(gain)
        promised += n > 0
        if n >= 2:
            multi.append(gain)
    if not gains:
        raise DataError("no annotated rows", path=str(path))
    return {"rows": len(gains), "rows_with_promise": promised,
            "gain_of_rows_with_2_promises": gain_summary(multi),
            "gain_of_all_rows": gain_summary(gains)}
