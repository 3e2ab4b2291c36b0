"""KV eviction policies for the paged runtime: one small class each, behind one interface.

A policy sees a request's KV as pages of tokens and answers two questions after each token
is written: which tokens may attention read now (`visible`), and which pages can be freed for
good (`evict`). Policies never bring a token back once they stop showing it.

- `dense`: nothing is evicted.
- `streamingllm`: 4 sink tokens + the most recent tokens, whole pages, within --budget.
- `h2o`: half the budget for the most recent pages, half for the pages with the highest
  accumulated attention (heavy hitters), whole pages.
- `tip`: register-driven; a step's pages are freed when its register is reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solm.core.tip_structure import PROMPT_STEP, TipTracker, TipVocab


@dataclass
class Page:
    id: int
    tokens: list[int] = field(default_factory=list)  # token indices (within the request)
    step: int = PROMPT_STEP
    score: float = 0.0  # accumulated attention mass (h2o)


@dataclass
class RequestKV:
    """The KV bookkeeping of one request: its pages in order and its tokens' slots."""

    rid: int
    page_size: int
    pages: list[Page] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # slot of token i (stale once evicted)
    step_of: list[int] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        """Tokens ever written (evicted ones included)."""
        return len(self.slots)


class EvictionPolicy:
    name = "base"
    needs_scores = False  # the runtime then accumulates attention mass per page
    fresh_page_per_step = False

    def __init__(self, budget: int | None = None, page_size: int = 64):
        self.budget, self.page_size = budget, page_size

    def start(self, req: RequestKV, vocab: TipVocab | None) -> None:
        """Called once per request before its prompt is written."""

    def step_of(self, req: RequestKV, token: int, is_prompt: bool) -> tuple[int, int | None]:
        """(step of the token, step it kills) — only TIP has steps."""
        return PROMPT_STEP, None

    def evict(self, req: RequestKV) -> list[Page]:
        """Pages to free after the latest token was written (removed from req.pages)."""
        return []

    def visible(self, req: RequestKV) -> list[tuple[Page, int]]:
        """(page, how many of its tokens attention reads), in read order."""
        return [(p, len(p.tokens)) for p in req.pages]

    def _drop(self, req: RequestKV, keep: set[int]) -> list[Page]:
        gone = [p for p in req.pages if p.id not in keep]
        req.pages = [p for p in req.pages if p.id in keep]
        return gone


class DensePolicy(EvictionPolicy):
    name = "dense"


class StreamingLLMPolicy(EvictionPolicy):
    """Once a request outgrows the budget: 4 attention-sink tokens (their page stays
    allocated) + the newest whole pages that fit in the rest of the budget."""

    name = "streamingllm"
    sinks = 4

    def recent_pages(self) -> int:
        return max(1, (self.budget - self.sinks) // self.page_size)

    def evict(self, req: RequestKV) -> list[Page]:
        if req.n_tokens <= self.budget or len(req.pages) <= 1 + self.recent_pages():
            return []
        keep = {req.pages[0].id} | {p.id for p in req.pages[-self.recent_pages():]}
        return self._drop(req, keep)

    def visible(self, req: RequestKV) -> list[tuple[Page, int]]:
        if req.n_tokens <= self.budget:  # nothing hidden yet (the count only grows)
            return [(p, len(p.tokens)) for p in req.pages]
        first, rest = req.pages[0], req.pages[1:][-self.recent_pages():]
        return [(first, min(self.sinks, len(first.tokens)))] + [(p, len(p.tokens)) for p in rest]


class H2OPolicy(EvictionPolicy):
    """Recent pages and heavy-hitter pages (highest accumulated attention), half each."""

    name = "h2o"
    needs_scores = True

    def evict(self, req: RequestKV) -> list[Page]:
        max_pages = max(2, self.budget // self.page_size)
        if len(req.pages) <= max_pages:
            return []
        recent = max(1, max_pages // 2)
        older = req.pages[:-recent]
        heavy = sorted(older, key=lambda p: p.score / max(1, len(p.tokens)),
                       reverse=True)[: max_pages - recent]
        keep = {p.id for p in req.pages[-recent:]} | {p.id for p in heavy}
        return self._drop(req, keep)


class TipPolicy(EvictionPolicy):
    """Register-driven: reusing register r frees the pages of the step that held r."""

    name = "tip"
    fresh_page_per_step = True

    def start(self, req: RequestKV, vocab: TipVocab | None) -> None:
        if vocab is None:
            raise ValueError("the tip policy needs the register tokens (TipVocab)")
        req.tracker = TipTracker(vocab)  # type: ignore[attr-defined]

    def step_of(self, req: RequestKV, token: int, is_prompt: bool) -> tuple[int, int | None]:
        if is_prompt:
            return PROMPT_STEP, None
        return req.tracker.feed(token)  # type: ignore[attr-defined]

    def evict(self, req: RequestKV) -> list[Page]:
        dead = req.tracker.dead  # type: ignore[attr-defined]
        if not any(p.step in dead for p in req.pages):
            return []
        return self._drop(req, {p.id for p in req.pages if p.step not in dead})


POLICIES: dict[str, type[EvictionPolicy]] = {
    cls.name: cls for cls in (DensePolicy, StreamingLLMPolicy, H2OPolicy, TipPolicy)}


def make_policy(name: str, budget: int | None = None, page_size: int = 64) -> EvictionPolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy '{name}': choose one of {', '.join(POLICIES)}")
    cls = POLICIES[name]
    if cls in (StreamingLLMPolicy, H2OPolicy):
        if budget is None or budget < 2 * page_size:
            raise ValueError(f"--policy {name} needs --budget of at least two pages "
                             f"({2 * page_size} tokens)")
    return cls(budget=budget, page_size=page_size)
