"""The SFT mix: annotated rows with several promises, plus some rows left plain.

The thesis trains on rows the annotator parallelised; a share of plain rows keeps the model
answering without tags where nothing is parallel. Rows come from `pasta annotate`, whose
`promises` field counts each row's promises. `min_gain` keeps only parallel rows whose
annotation-level gain (`solm.annotate.gain`) reaches it, so the model is taught forks that
pay; `exclude` drops rows whose prompt is an evaluation prompt.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from solm.core.errors import DataError
from solm.core.jsonl import read_jsonl_numbered


def prompt_key(prompt: str) -> str:
    """A prompt as compared for exclusion: case and whitespace ignored."""
    return re.sub(r"\s+", " ", prompt).strip().casefold()


@dataclass
class Mix:
    parallel: list[dict] = field(default_factory=list)
    plain: list[dict] = field(default_factory=list)
    excluded: int = 0  # rows whose prompt is an evaluation prompt
    below_gain: int = 0  # parallel rows under min_gain
    gains: list[float] = field(default_factory=list)  # of the parallel rows kept

    @property
    def rows(self) -> list[dict]:
        return [*self.parallel, *self.plain]


def _promises(row: dict, path, line: int) -> int:
    n = row.get("promises")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise DataError(f"expected a promise count (an integer >= 0), got {n!r}: rows of "
                        "`pasta annotate`", path=str(path), line=line, field="promises")
    return n


def row_gain(row: dict, gain_of: Callable[[str | None], float] | None, path, line: int
             ) -> float:
    """The row's `gain` field, or the meter's reading of its annotation."""
    gain = row.get("gain")
    if gain is None:
        if gain_of is None:
            raise DataError("no `gain` field (annotated before gains were recorded) and no "
                            "tokenizer to measure it", path=str(path), line=line, field="gain")
        return gain_of(row.get("annotated"))
    if not isinstance(gain, (int, float)) or isinstance(gain, bool) or gain <= 0:
        raise DataError(f"expected a gain > 0, got {gain!r}", path=str(path), line=line,
                        field="gain")
    return float(gain)


def sft_mix(paths: Iterable[str | os.PathLike], min_promises: int = 2, plain: int = 200,
            max_parallel: int | None = None, min_gain: float | None = None,
            gain_of: Callable[[str | None], float] | None = None,
            exclude: Iterable[str] = ()) -> Mix:
    """Rows with at least `min_promises` promises (and a gain of at least `min_gain`), in
    file order (the first `max_parallel` when given), and the first `plain` rows with none;
    rows whose prompt is in `exclude` are left out of both."""
    banned = {prompt_key(p) for p in exclude}
    mix = Mix()
    for path in paths:
        for line, row in read_jsonl_numbered(path):
            n = _promises(row, path, line)
            if banned and prompt_key(str(row.get("prompt", ""))) in banned:
                mix.excluded += 1
                continue
            if n >= min_promises:
                if max_parallel is not None and len(mix.parallel) >= max_parallel:
                    continue
                gain = row_gain(row, gain_of, path, line) if (min_gain or gain_of) else None
                if min_gain is not None and gain < min_gain:
                    mix.below_gain += 1
                    continue
                mix.parallel.append(row)
                if gain is not None:
                    mix.gains.append(gain)
            elif n == 0 and len(mix.plain) < plain:
                mix.plain.append(row)
    return mix
