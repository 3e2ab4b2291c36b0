"""KV eviction policies for the paged runtime: one small class each, behind one interface.

A policy sees a request's KV as pages of tokens and answers two questions after each token
is written: which tokens may attention read now (`visible`), and which pages can be freed for
good (`evict`). Policies never bring a token back once they stop showing it.

`POLICIES` is the only list of policies: a class decorated with `@register_policy` carries its
name, its one-line `help` and whether it `needs_budget`; the CLI's help and defaults,
`tip bench` and the tests' policy matrix all read the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from solm.core.errors import SolmError
from solm.core.systems.tip import PROMPT_STEP, TipTracker, TipVocab


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
    pages: list[Page] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # slot of token i (stale once evicted)
    step_of: list[int] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        """Tokens ever written (evicted ones included)."""
        return len(self.slots)


class EvictionPolicy:
    name: ClassVar[str] = ""
    help: ClassVar[str] = ""  # one line, shown in the CLI's --help
    needs_budget: ClassVar[bool] = False  # reads --budget (at least two pages)
    needs_scores: ClassVar[bool] = False  # the runtime then accumulates attention mass per page
    fresh_page_per_step: ClassVar[bool] = False
    needs_registers: ClassVar[bool] = False  # reads the tokenizer's register tokens

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


POLICIES: dict[str, type[EvictionPolicy]] = {}


def register_policy(cls: type[EvictionPolicy]) -> type[EvictionPolicy]:
    """Class decorator: make a policy available by its `name` everywhere."""
    if not cls.name or not cls.help:
        raise ValueError(f"{cls.__name__} needs a name and a one-line help")
    if POLICIES.get(cls.name, cls) is not cls:
        raise ValueError(f"policy name '{cls.name}' is taken by {POLICIES[cls.name].__name__}")
    POLICIES[cls.name] = cls
    return cls


@register_policy
class DensePolicy(EvictionPolicy):
    name = "dense"
    help = "no eviction"


@register_policy
class StreamingLLMPolicy(EvictionPolicy):
    """Once a request outgrows the budget: 4 attention-sink tokens (their page stays
    allocated) + the newest whole pages that fit in the rest of the budget."""

    name = "streamingllm"
    help = "4 sink tokens + the most recent pages, within --budget"
    needs_budget = True
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


@register_policy
class PromptStreamingPolicy(EvictionPolicy):
    """StreamingLLM whose sinks are the whole prompt: once a request outgrows the budget,
    every page holding a prompt token stays, with the newest whole pages that fit in the
    rest of the budget (two at least, so a prompt longer than the budget still decodes)."""

    name = "streaming-prompt"
    help = "the whole prompt + the most recent pages (two at least), within --budget"
    needs_budget = True
    min_recent = 2

    def start(self, req: RequestKV, vocab: TipVocab | None) -> None:
        req.prompt_tokens = 0  # type: ignore[attr-defined]

    def step_of(self, req: RequestKV, token: int, is_prompt: bool) -> tuple[int, int | None]:
        if is_prompt:
            req.prompt_tokens += 1  # type: ignore[attr-defined]
        return PROMPT_STEP, None

    def _window(self, req: RequestKV) -> tuple[list[Page], list[Page], int]:
        """(prompt pages, the newest others within the budget, how many others there are)."""
        prompt_tokens = getattr(req, "prompt_tokens", 0)
        def holds_prompt(page: Page) -> bool:
            return bool(page.tokens) and page.tokens[0] < prompt_tokens

        prompt = [p for p in req.pages if holds_prompt(p)]
        rest = [p for p in req.pages if not holds_prompt(p)]
        recent = max(self.min_recent, self.budget // self.page_size - len(prompt))
        return prompt, rest[-recent:], len(rest)

    def evict(self, req: RequestKV) -> list[Page]:
        if req.n_tokens <= self.budget:
            return []
        prompt, recent, others = self._window(req)
        if others <= len(recent):
            return []
        return self._drop(req, {p.id for p in prompt + recent})

    def visible(self, req: RequestKV) -> list[tuple[Page, int]]:
        if req.n_tokens <= self.budget:
            return [(p, len(p.tokens)) for p in req.pages]
        prompt, recent, _ = self._window(req)
        return [(p, len(p.tokens)) for p in prompt + recent]


@register_policy
class H2OPolicy(EvictionPolicy):
    """Recent pages and heavy-hitter pages (highest accumulated attention), half each."""

    name = "h2o"
    help = "recent pages + heavy-hitter pages (most attention), half of --budget each"
    needs_budget = True
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


@register_policy
class TipPolicy(EvictionPolicy):
    """Register-driven: reusing register r frees the pages of the step that held r."""

    name = "tip"
    help = "register-driven: reusing <reg_i> frees the pages of the step that held it"
    fresh_page_per_step = True
    needs_registers = True

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


def policies_help() -> str:
    """One line per registered policy, for --help."""
    return "; ".join(f"`{name}`: {cls.help}" for name, cls in POLICIES.items())


def make_policy(name: str, budget: int | None = None, page_size: int = 64) -> EvictionPolicy:
    if name not in POLICIES:
        raise SolmError(f"unknown policy '{name}': choose one of {', '.join(POLICIES)}")
    cls = POLICIES[name]
    if cls.needs_budget and (budget is None or budget < 2 * page_size):
        raise SolmError(f"--policy {name} needs --budget of at least two pages "
                        f"({2 * page_size} tokens)")
    return cls(budget=budget, page_size=page_size)
