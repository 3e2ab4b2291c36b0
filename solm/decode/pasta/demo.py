"""`pasta demo`: a trained PASTA model writes its own promises, the runtime decodes them as
parallel threads, and the same answer is then decoded one token per step by the same model,
so the realized speedup printed is measured in this run, on the same text.

- The parallel decode is the model's own (greedy under its generation_config), its threads
  recorded step by step: which thread fed a token at which forward pass (`Timeline`).
- The sequential decode teacher-forces the parallel answer's text (tags removed) one token
  per forward pass through the same runtime and weights: the same tokens a sequential
  decode of this answer costs. (Decoding freely in sequential mode writes another answer,
  whose time says nothing about this one.)
- Timing: both sides are replays of the same answer through the same runtime (the parallel
  answer on its own schedule, the tag-free text one token per pass), so neither pays for
  drawing or sampling; both are warmed first (first-call allocations), then each is timed
  `repeats` times in alternating order (parallel first, then sequential first, ...) and the
  fastest kept: on a shared machine interference only ever adds time, so the fastest run is
  the one closest to the decode's own cost (medians of three still differed by 15% between
  runs on a 2-core VM: a fresh clone's first demo read 1.38x against 1.19x; the fastest
  runs of that same demo read 1.26x).
- Realized speedup = sequential decode time / parallel decode time (prefill excluded from
  both: it is the same prompt); theoretical = the answer's content tokens / its critical
  path (`pasta_metrics`: the passes its structure needs, the same on every engine; an engine
  that needs more, llama.cpp one more per `<sync/>`, pays them in the realized figure): what
  the realized speedup is when every pass costs the same. A realized figure above the
  theoretical one by more than 10% is a measurement to distrust, and is flagged as such;
  so is a run whose timed replays of one side wander (slowest / fastest above `WANDER`).
- The fastest sequential decoding here (`yardstick`, e.g. llama.cpp's own one-token loop on
  its fastest one-token GGUF): as many tokens as the answer's content, from the same
  prompt, timed in the same alternating order; the realized speedup against it says what
  a user gains over the quickest plain decode this machine offers, not only over the same
  engine one token a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from solm.core.chat import prompt_ids
from solm.core.systems.pasta import MAIN, walk_training_order
from solm.core.systems.pasta_schedule import DISTRUST, WANDER, pasta_metrics
from solm.decode.pasta.live import ThreadView, thread_views
from solm.decode.pasta.runtime import PastaDecodeConfig, PastaDecodeResult, PastaRuntime

# untimed rounds of every side before the timed ones: after one, each side's first timed
# run was still 1.2-1.3x slower than its fastest on a fresh 2-core machine (the first ~10 s
# of decoding run slow there)
WARM_ROUNDS = 2

# a prompt the kept pasta-bonbon-cpu model (the demo's default) answers with a well-formed
# answer of three threads (on torch and on onnxruntime q8)
DEMO_PROMPT = "What are the advantages of electric cars?"


@dataclass
class Timeline:
    """Per forward pass, the threads that fed a token in it (0: main)."""

    steps: list[set[int]] = field(default_factory=list)
    topics: dict[int, str] = field(default_factory=dict)

    def record(self, fed_before: dict[int, int], fed_after: dict[int, int]) -> None:
        self.steps.append({tid for tid, n in fed_after.items() if n > fed_before.get(tid, 0)})

    def threads(self) -> list[int]:
        return sorted({t for s in self.steps for t in s})

    def span(self, tid: int) -> tuple[int, int]:
        """First and last step at which thread `tid` fed a token."""
        idx = [i for i, s in enumerate(self.steps) if tid in s]
        return idx[0], idx[-1]


@dataclass
class DemoResult:
    parallel: PastaDecodeResult
    sequential: PastaDecodeResult
    timeline: Timeline
    response: str
    content_ids: list[int]
    theoretical_speedup: float
    views: list[ThreadView]  # each thread's final text
    decoded: PastaDecodeResult | None = None  # the live decode (drawn; not timed)
    times: dict = field(default_factory=dict)  # every timed decode's seconds, per side
    yardstick: str = ""  # the fastest sequential decoding here, in words ("": none)

    @property
    def fastest_sequential_s(self) -> float | None:
        """The yardstick's fastest time for the answer's content tokens."""
        return min(self.times["fastest"]) if self.times.get("fastest") else None

    @property
    def realized_vs_fastest(self) -> float | None:
        """The yardstick's decode time over the parallel decode's (None: no yardstick)."""
        s = self.fastest_sequential_s
        return None if s is None else s / max(self.parallel.decode_s, 1e-9)

    @property
    def realized_speedup(self) -> float:
        return self.sequential.decode_s / max(self.parallel.decode_s, 1e-9)

    @property
    def distrusted(self) -> bool:
        """The realized speedup exceeds what the passes allow by more than 10%."""
        return self.realized_speedup > DISTRUST * self.theoretical_speedup

    @property
    def spread(self) -> dict[str, float]:
        """Per side, the slowest timed replay over the fastest."""
        return {side: max(ts) / max(min(ts), 1e-9) for side, ts in self.times.items() if ts}

    @property
    def unreliable(self) -> bool:
        """A side's timed replays wandered by more than `WANDER`: the machine was busy."""
        return any(v > WANDER for v in self.spread.values())

    def warnings(self) -> list[str]:
        """What a reader of the figures must know: replays that wandered, a figure to
        distrust, a parallel decode slower than the sequential one."""
        out = []
        if self.unreliable:
            side = max(self.spread, key=self.spread.get)
            out.append(f"the timed {side} replays wandered (slowest {self.spread[side]:.2f}x "
                       f"the fastest, over {WANDER:.2f}): the machine was busy, so the "
                       f"realized speedup is unreliable, high or low; run it again on a quiet "
                       f"machine")
        if self.distrusted:
            out.append(f"the realized speedup {self.realized_speedup:.2f}x is above what the "
                       f"passes allow ({self.theoretical_speedup:.2f}x) by more than 10%: a "
                       f"measurement to distrust (a busy machine or a cold path), not a "
                       f"result; run it again")
        if self.realized_speedup < 1.0:
            out.append(f"the parallel decode was slower than the sequential one here "
                       f"({self.realized_speedup:.2f}x): on this engine and CPU a pass of "
                       f"several tokens costs more than the passes it saves")
        return out


def _fed(state) -> dict[int, int]:
    return {tid: len(th.fed) for tid, th in state.threads.items()}


def run_demo(rt: PastaRuntime, prompt: str, config: PastaDecodeConfig,
             on_views: Callable[[list[ThreadView]], None] | None = None,
             refresh_s: float = 0.1, repeats: int = 3,
             yardstick: tuple[str, Callable[[list[int], int], float]] | None = None
             ) -> DemoResult:
    """Decode `prompt` in parallel (calling `on_views` with the threads at most every
    `refresh_s`, so drawing costs the decode little), then time the answer against the same
    text decoded sequentially, and against `yardstick` ((its name, a function decoding n
    tokens from the prompt's ids and returning its decode seconds)) when given (see the
    module's notes)."""
    ids = prompt_ids(rt.tokenizer, prompt)
    timeline = Timeline()
    state = rt.prefill(ids, config, rt.chooser(config))
    last_draw = 0.0
    while True:
        before = _fed(state)
        going = rt.step(state)
        if state.steps > len(timeline.steps):
            timeline.record(before, _fed(state))
        if on_views is not None and (not going or time.perf_counter() - last_draw > refresh_s):
            on_views(thread_views(rt, state))
            last_draw = time.perf_counter()
        if not going:
            break
    views = thread_views(rt, state)
    timeline.topics = {v.tid: v.topic.strip() for v in views}
    decoded = rt.finish(state)
    attrs, _ = walk_training_order(decoded.ids, rt.vocab)
    content = [t for t, a in zip(decoded.ids, attrs) if not a.is_tag]
    parallel, sequential, times = time_both(rt, ids, decoded.ids, content, repeats,
                                            yardstick[1] if yardstick else None)
    return DemoResult(parallel=parallel, sequential=sequential, timeline=timeline,
                      yardstick=yardstick[0] if yardstick else "",
                      response=rt.tokenizer.decode(content, skip_special_tokens=True),
                      content_ids=content,
                      theoretical_speedup=pasta_metrics(decoded.ids, rt.vocab,
                                                        attrs).content_speedup,
                      views=views, decoded=decoded, times=times)


def time_both(rt: PastaRuntime, prompt: list[int], answer: list[int], content: list[int],
              repeats: int, yardstick: Callable[[list[int], int], float] | None = None
              ) -> tuple[PastaDecodeResult, PastaDecodeResult, dict]:
    """The parallel answer replayed on its schedule and its text replayed one token a pass
    (and `yardstick` decoding as many tokens from the prompt, when given), all warmed, then
    timed `repeats` times each in rotating order; each result carries the fastest decode
    time. Returns them and every time measured (`times["fastest"]`: the yardstick's)."""
    from dataclasses import replace

    sides: dict[str, Callable[[], object]] = {
        "parallel": lambda: rt.replay(prompt, answer, mode="parallel"),
        "sequential": lambda: rt.replay(prompt, content, mode="sequential")}
    if yardstick is not None:
        # n + 1 tokens: the first comes from the prefill, so n one-token passes are timed
        sides["fastest"] = lambda: yardstick(prompt, max(1, len(content)) + 1)
    for _ in range(WARM_ROUNDS):
        for run in sides.values():
            run()  # warm every path: first-call allocations, not timed
    names = list(sides)
    runs: dict[str, list] = {name: [] for name in names}
    for k in range(max(1, repeats)):
        for name in names[k % len(names):] + names[:k % len(names)]:
            runs[name].append(sides[name]())
    times = {name: [r if isinstance(r, float) else r.decode_s for r in rs]
             for name, rs in runs.items()}
    return (replace(runs["parallel"][0], decode_s=min(times["parallel"])),
            replace(runs["sequential"][0], decode_s=min(times["sequential"])), times)


def timeline_rows(timeline: Timeline, width: int = 60) -> list[tuple[str, str]]:
    """(name, bar) per thread: one character per `ceil(steps / width)` forward passes;
    '█' the thread fed a token there, '·' forked (or started) and not yet finished but idle,
    ' ' not running."""
    n = len(timeline.steps)
    per = max(1, -(-n // width))
    rows = []
    for tid in timeline.threads():
        first, last = timeline.span(tid)
        bar = []
        for c in range(0, n, per):
            cols = range(c, min(c + per, n))
            if any(tid in timeline.steps[i] for i in cols):
                bar.append("█")
            elif first <= c <= last:
                bar.append("·")
            else:
                bar.append(" ")
        topic = timeline.topics.get(tid, "")
        name = "main" if tid == MAIN else f"thread {tid}" + (f" ({topic[:18]})" if topic else "")
        rows.append((name, "".join(bar)))
    return rows
