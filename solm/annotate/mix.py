"""The SFT mix: annotated rows with several promises, plus some rows left plain.

The thesis trains on rows the annotator parallelised; a share of plain rows keeps the model
answering without tags where nothing is parallel. Rows come from `pasta annotate`, whose
`promises` field counts each row's promises.
"""

from __future__ import annotations

import os
from typing import Iterable

from solm.core.errors import DataError
from solm.core.jsonl import read_jsonl_numbered


def sft_mix(paths: Iterable[str | os.PathLike], min_promises: int = 2, plain: int = 200,
            max_parallel: int | None = None) -> tuple[list[dict], list[dict]]:
    """(parallel rows, plain rows): rows with at least `min_promises` promises, in file
    order (the first `max_parallel` when given), and the first `plain` rows with none."""
    parallel, plain_rows = [], []
    for path in paths:
        for line, row in read_jsonl_numbered(path):
            n = row.get("promises")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise DataError(f"expected a promise count (an integer >= 0), got {n!r}: "
                                "rows of `pasta annotate`", path=str(path), line=line,
                                field="promises")
            if n >= min_promises and (max_parallel is None or len(parallel) < max_parallel):
                parallel.append(row)
            elif n == 0 and len(plain_rows) < plain:
                plain_rows.append(row)
    return parallel, plain_rows
