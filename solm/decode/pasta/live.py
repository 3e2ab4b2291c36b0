"""What a PASTA decode looks like while it runs: each thread's text so far, and the part of
the answer that is final in reading order (for live displays and streaming)."""

from __future__ import annotations

from dataclasses import dataclass

from solm.core.systems.pasta import MAIN
from solm.decode.pasta.runtime import PastaRunState


@dataclass
class ThreadView:
    tid: int  # 0: main
    topic: str  # the promise's topic ("" for main)
    text: str  # what the thread wrote so far (control tags removed)
    done: bool


def _topic_ids(main_fed: list[int], close_index: int, promise_open: int) -> list[int]:
    start = max((i for i in range(close_index) if main_fed[i] == promise_open), default=-1)
    return main_fed[start + 1:close_index]


def thread_views(rt, state: PastaRunState) -> list[ThreadView]:
    """Main first, then the blocks in the order they were promised."""
    tok, v = rt.tokenizer, rt.vocab
    control = set(v.control_ids)
    main = state.main
    views = [ThreadView(MAIN, "", tok.decode(_content(main.fed, v), skip_special_tokens=True),
                        main.done)]
    for fid, close in sorted(state.fork_anchor.items(), key=lambda kv: kv[1]):
        th = state.threads[fid]
        topic = tok.decode(_topic_ids(main.fed, close, v.promise_open), skip_special_tokens=True)
        body = [t for t in th.fed if t not in control]
        views.append(ThreadView(fid, topic, tok.decode(body, skip_special_tokens=True), th.done))
    return views


def _content(main_fed: list[int], v) -> list[int]:
    """Main's text without tags: promise tags (open, topic, closer) and `<sync/>` dropped."""
    out, in_tag = [], False
    for t in main_fed:
        if t == v.promise_open:
            in_tag = True
        elif t in v.close_tens:
            in_tag = False
        elif not in_tag and t not in (v.sync, v.async_open, v.async_close):
            out.append(t)
    return out


def final_reading_order(rt, state: PastaRunState) -> list[int]:
    """Response tokens (tags removed) that can no longer change, in reading order: main's
    text up to the first block still being written, each finished block spliced in at its
    promise."""
    v = rt.vocab
    control = set(v.control_ids)
    after = {close: fid for fid, close in state.fork_anchor.items()}
    out: list[int] = []
    in_tag = False
    for i, t in enumerate(state.main.fed):
        if t == v.promise_open:
            in_tag = True
        elif t in v.close_tens:
            in_tag = False
            fid = after.get(i)
            if fid is not None:
                block = state.threads[fid]
                if not block.done:
                    return out
                out.extend(x for x in block.fed if x not in control)
        elif not in_tag and t not in control:
            out.append(t)
    return out
