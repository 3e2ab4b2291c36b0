"""PASTA's schedule of a finished response: forward passes the parallel runtime needs, and the
metrics that follow from it (critical path, parallelism, theoretical speedup)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from solm.core.systems.pasta import MAIN, PastaVocab, TokenAttrs, walk_training_order

# a realized speedup above the theoretical one by more than this factor is a measurement
# artefact (a cold path, a busy machine), to be flagged, never reported as a result
DISTRUST = 1.10
# timed repeats of one decode whose slowest took this many times the fastest: the machine was
# busy while they ran, and a figure built on them is unreliable (high or low)
WANDER = 1.30


@dataclass
class PastaMetrics:
    content_tokens: int  # tokens outside control tags
    total_tokens: int  # every token the runtime decodes (tags included)
    critical_path: int  # forward passes the parallel runtime needs (after prefill)
    promises: int

    @property
    def parallelism(self) -> float:
        """Tokens decoded per forward pass: the average number of threads running."""
        return self.total_tokens / max(1, self.critical_path)

    @property
    def content_speedup(self) -> float:
        """Theoretical speedup over decoding the same text (tags removed) one token a step."""
        return self.content_tokens / max(1, self.critical_path)

    def theoretical_speedup(self, baseline_tokens: int) -> float:
        """Sequential forward passes for the baseline response / parallel forward passes."""
        return baseline_tokens / max(1, self.critical_path)


def thread_streams(token_ids: Sequence[int], vocab: PastaVocab,
                   attrs: list[TokenAttrs] | None = None, unfed: Sequence[int] = ()
                   ) -> tuple[list[int], dict[int, list[int]], dict[int, int]]:
    """Split a training-order response into the main stream, each block's stream, and for
    each block the main-stream index of its promise's closing token; tokens at the indices
    `unfed` (closers a stop added to blocks it cut, never decoded) are left out."""
    if attrs is None:
        attrs, _ = walk_training_order(token_ids, vocab)
    skip = set(unfed)
    main: list[int] = []
    forks: dict[int, list[int]] = {}
    anchors: dict[int, int] = {}
    for i, (tok, a) in enumerate(zip(token_ids, attrs)):
        if i in skip:
            continue
        if a.thread == MAIN:
            main.append(int(tok))
        else:
            forks.setdefault(a.thread, []).append(int(tok))
            anchors[a.thread] = a.anchor
    return main, forks, anchors


def schedule_steps(token_ids: Sequence[int], vocab: PastaVocab,
                   attrs: list[TokenAttrs] | None = None, unfed: Sequence[int] = ()) -> int:
    """The critical path: forward passes after the prompt's that feeding every decoded token
    of this response takes, blocks beside main.

    Each step feeds one token per active thread; a block starts in the step that feeds its
    promise's closing token; `<sync/>` is fed in the step where every open block feeds its
    final token (or later). `unfed`: indices of tokens nobody decoded (the closers a stop
    adds to blocks it cut, `PastaDecodeResult.unfed`), which cost no pass. A decode's own
    forward passes (`PastaDecodeResult.forward_passes`, counted the same way) are never
    fewer: solm's torch runtime takes exactly these (tested), llama.cpp one more per
    `<sync/>`.
    """
    main, forks, anchors = thread_streams(token_ids, vocab, attrs, unfed)
    starts = {anchor: fid for fid, anchor in anchors.items()}
    active: dict[int, int] = {}  # block id -> index of its next token
    i = steps = 0
    while i < len(main) or active:
        feed_main = i < len(main)
        if feed_main and main[i] == vocab.sync and active:
            feed_main = all(idx == len(forks[f]) - 1 for f, idx in active.items())
        steps += 1
        for f in list(active):
            active[f] += 1
            if active[f] >= len(forks[f]):
                del active[f]
        if feed_main:
            if i in starts:
                f = starts[i]
                if len(forks[f]) > 1:
                    active[f] = 1
            i += 1
    return steps


def pasta_metrics(token_ids: Sequence[int], vocab: PastaVocab,
                  attrs: list[TokenAttrs] | None = None, unfed: Sequence[int] = ()
                  ) -> PastaMetrics:
    """Metrics of a training-order response; pass `attrs` if the caller already walked it,
    `unfed` for a decode's result (`schedule_steps`)."""
    if attrs is None:
        attrs, _ = walk_training_order(token_ids, vocab)
    content = sum(1 for a in attrs if not a.is_tag)
    n_promises = sum(1 for t in token_ids if int(t) in vocab.close_tens)
    return PastaMetrics(content_tokens=content, total_tokens=len(token_ids),
                        critical_path=schedule_steps(token_ids, vocab, attrs, unfed),
                        promises=n_promises)
