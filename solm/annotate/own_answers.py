"""Own-answer rows: the SFT mix made from the model's own answers (`pasta distill`).

A small model cannot write other writers' answers; trained on them it learns the tags and
loses the content. Here the rows are answers the base model wrote itself (one greedy, and
sampled ones), annotated by the speed-shaped rules, kept only where the annotation gives
back exactly what the model sampled:

- an answer is **dropped** when the token cap cut it (`cut`: it did not end by itself), when
  it is empty, or when it repeats itself: more than `max_repeated_3grams` of its token
  3-grams repeat an earlier 3-gram of the answer (`repeating`; the evaluation's measure);
- it is annotated by the speed-shaped rules (`RuleShape.speed()`: forks that pay only);
- a row is kept only if its training tokens with the tags taken out are the sampled tokens,
  token for token (the trainer tokenizes the row's text; a model that sampled a word in
  other pieces than the tokenizer's would learn tokens it did not write): an annotation
  that fails this is not used, and an answer whose plain text fails it too is `unfaithful`;
- per prompt, the answer with the highest annotation-level gain (ties: the lower sample,
  the greedy one first) is a **parallel row** when its gain reaches `min_gain`; otherwise
  the prompt offers a **plain row** (its first eligible answer, untagged);
- the mix: every parallel row, and plain rows making `plain_share` of the whole (as many as
  there are, in prompt order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from solm.core.stats import repeated_ngram_share

CUT, EMPTY, REPEATING, UNFAITHFUL = "cut", "empty", "repeating", "unfaithful"
DROP_REASONS = (CUT, EMPTY, REPEATING, UNFAITHFUL)


@dataclass(frozen=True)
class OwnAnswerRules:
    min_gain: float = 1.3
    plain_share: float = 0.4
    max_repeated_3grams: float = 0.15
    # the base model answers in paragraphs more than in lists: forked one by one they never
    # pay (1 prompt in 58 had a paying answer apart, 19 together; bench/results/own_answers)
    paragraphs_together: bool = True

    def __post_init__(self):
        if not 0 <= self.plain_share < 1:
            raise ValueError(f"plain_share must be in [0, 1), got {self.plain_share}")
        if self.min_gain <= 1:
            raise ValueError(f"min_gain must be above 1, got {self.min_gain}")


@dataclass
class Candidate:
    """One answer, judged: why it was dropped (None: eligible), its annotation and gain."""

    id: str
    sample: int
    response: str
    dropped: str | None = None
    annotated: str | None = None  # None: no fork pays (a plain answer)
    promises: int = 0
    gain: float = 1.0
    plain_faithful: bool = False  # its plain text tokenizes back to the sampled tokens

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def dropped_before_annotation(answer: dict, max_repeated_3grams: float) -> str | None:
    """`cut`, `empty` or `repeating` for an answer row (`ended`, `ids`), else None."""
    if not answer.get("ended"):
        return CUT
    ids = answer["ids"]
    if not ids or not answer["response"].strip():
        return EMPTY
    if repeated_ngram_share(ids, 3) > max_repeated_3grams:
        return REPEATING
    return None


def judge_answer(answer: dict, rules: OwnAnswerRules, annotate: Callable[[str], tuple[str, int]],
                 training_content: Callable[[str], list[int]],
                 gain_of: Callable[[str | None], float]) -> Candidate:
    """`annotate(text) -> (annotated, promises)`; `training_content(text)`: the tokens the
    trainer's tokenization of `text` holds once the tags are taken out."""
    c = Candidate(str(answer["id"]), int(answer.get("sample", 0)), answer["response"])
    c.dropped = dropped_before_annotation(answer, rules.max_repeated_3grams)
    if c.dropped:
        return c
    sampled = list(answer["ids"])
    c.plain_faithful = training_content(c.response) == sampled
    annotated, n = annotate(c.response)
    if n and training_content(annotated) == sampled:
        c.annotated, c.promises = annotated, n
        c.gain = gain_of(annotated)
    elif not c.plain_faithful:
        c.dropped = UNFAITHFUL
    return c


@dataclass
class OwnMix:
    parallel: list[Candidate] = field(default_factory=list)
    plain: list[Candidate] = field(default_factory=list)  # in the mix
    plain_offered: int = 0  # prompts that offered a plain row

    def rows(self, prompts: dict[str, dict]) -> list[dict]:
        """SFT rows (`pasta sft --data`): parallel ones with `annotated`, plain ones without."""
        out = []
        for c, kind in [*((c, "parallel") for c in self.parallel),
                        *((c, "plain") for c in self.plain)]:
            p = prompts[c.id]
            out.append({"id": c.id, "prompt": p["prompt"], "system": p.get("system"),
                        "response": c.response,
                        "annotated": c.annotated if kind == "parallel" else None,
                        "promises": c.promises if kind == "parallel" else 0,
                        "gain": round(c.gain, 4) if kind == "parallel" else 1.0,
                        "sample": c.sample, "kind": kind, "annotator": "rules:speed",
                        "source": "own"})
        return out


def best_of_prompt(candidates: Sequence[Candidate]) -> Candidate | None:
    """The eligible answer with the highest gain; ties go to the lower sample."""
    eligible = [c for c in candidates if c.dropped is None]
    if not eligible:
        return None
    return max(eligible, key=lambda c: (c.gain, -c.sample))


def own_mix(by_prompt: Iterable[Sequence[Candidate]], rules: OwnAnswerRules) -> OwnMix:
    """The parallel rows (one per prompt at most) and the plain rows beside them."""
    mix = OwnMix()
    plain_pool: list[Candidate] = []
    for candidates in by_prompt:
        best = best_of_prompt(candidates)
        if best is None:
            continue
        if best.annotated is not None and best.gain >= rules.min_gain:
            mix.parallel.append(best)
        else:
            plain = [c for c in candidates if c.dropped is None and c.plain_faithful]
            if plain:
                plain_pool.append(min(plain, key=lambda c: c.sample))
    mix.plain_offered = len(plain_pool)
    want = round(len(mix.parallel) * rules.plain_share / (1 - rules.plain_share))
    mix.plain = plain_pool[:want]
    return mix
