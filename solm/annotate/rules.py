"""Rule-based Pasta-Lang annotation in the spirit of APAR (the APAR baseline's preprocessing).

Syntactic rules only:
- a numbered or bulleted list item keeps its marker and short title (up to ':' / ' - ' /
  the end of a bold title / the first sentence) in the main thread; its description becomes
  an async block;
- a paragraph keeps its first sentence in the main thread; the rest becomes an async block;
- fenced code, headings, tables and short pieces stay in the main thread;
- `<sync/>` goes before a paragraph, code block or table that follows open blocks (such text
  usually refers back to them), and at the end of the response if blocks are open.

`tokens="N"` is the smallest promise that holds the chunk: N = ceil(tokens / 10), at least
1 (a block of 10N - 9 .. 10N tokens promises N; the runtime closes a block at 10N + max(4,
10N/4), `solm.decode.pasta.guards`). The result
is faithful by construction: strip(annotated) == original, exactly; callers still check it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from solm.core.control_tokens import ASYNC_CLOSE, ASYNC_OPEN, MAX_PROMISE_TENS, SYNC

ITEM_RE = re.compile(r"^(\s{0,3})(\d{1,3}[.)]|[-*•+])\s+")
FENCE_RE = re.compile(r"^\s*```")
HEADING_RE = re.compile(r"^\s*#{1,6}\s")
TABLE_RE = re.compile(r"^\s*\|")
SENTENCE_END_RE = re.compile(r"(?<!\b[A-Z])(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bDr)(?<!\bMr)"
                             r"(?<!\bMrs)(?<!\bSt)[.!?](?=\s+\S)")
TITLE_DELIMS = (re.compile(r"^\*\*[^*\n]{1,80}\*\*:?"), re.compile(r"^[^\n]{1,80}?:(?=\s)"),
                re.compile(r"^[^\n]{1,80}? [-–—](?=\s)"))
MAX_TITLE_WORDS = 15


@dataclass
class Unit:
    kind: str  # item | paragraph | code | heading | table | blank
    text: str  # exact source text, including trailing newlines


def split_units(response: str) -> list[Unit]:
    lines = response.splitlines(keepends=True)
    units: list[Unit] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            units.append(Unit("blank", line))
            i += 1
        elif FENCE_RE.match(line):
            j = i + 1
            while j < len(lines) and not FENCE_RE.match(lines[j]):
                j += 1
            units.append(Unit("code", "".join(lines[i:j + 1])))
            i = j + 1
        elif HEADING_RE.match(line):
            units.append(Unit("heading", line))
            i += 1
        elif TABLE_RE.match(line):
            j = i
            while j < len(lines) and TABLE_RE.match(lines[j]):
                j += 1
            units.append(Unit("table", "".join(lines[i:j])))
            i = j
        elif ITEM_RE.match(line):
            j = i + 1
            # continuation: indented, non-blank lines that are not a new top-level item
            while j < len(lines) and lines[j].strip() and lines[j][:1].isspace() and not (
                    ITEM_RE.match(lines[j]) and len(lines[j]) - len(lines[j].lstrip()) <=
                    len(line) - len(line.lstrip())):
                j += 1
            units.append(Unit("item", "".join(lines[i:j])))
            i = j
        else:
            j = i + 1
            while j < len(lines) and lines[j].strip() and not (
                    ITEM_RE.match(lines[j]) or FENCE_RE.match(lines[j]) or
                    HEADING_RE.match(lines[j]) or TABLE_RE.match(lines[j])):
                j += 1
            units.append(Unit("paragraph", "".join(lines[i:j])))
            i = j
    return units


def _split_trailing_ws(text: str) -> tuple[str, str]:
    core = text.rstrip()
    return core, text[len(core):]


def _item_head_length(core: str) -> int:
    marker = ITEM_RE.match(core)
    if marker is None:  # an empty item such as "4." keeps everything in the main thread
        return len(core)
    start = marker.end()
    rest = core[start:]
    for pattern in TITLE_DELIMS:
        m = pattern.match(rest)
        if m and len(m.group(0).split()) <= MAX_TITLE_WORDS:
            return start + m.end()
    m = SENTENCE_END_RE.search(rest)
    if m and len(rest[:m.end()].split()) <= MAX_TITLE_WORDS:
        return start + m.end()
    return start


def _paragraph_head_length(core: str) -> int:
    m = SENTENCE_END_RE.search(core)
    return m.end() if m else len(core)


# words a short topic does not start with: it should name the chunk's subject
FUNCTION_WORDS = set("""a an the and or but so if as at by for from in into of on onto to with
without about after before since while when where which who whom whose what why how that this
these those there here it its it's they them their we our you your he she his her i my me is
are was were be been being do does did can could should would may might must will shall not no
also just only even very more most some any each every all both many much such than then
like""".split())


# words that open a sentence without naming its subject ("However, the city ...")
DISCOURSE_WORDS = set("""however additionally moreover furthermore finally firstly secondly
thirdly first second third lastly overall another other conclusion summary instance example
remember yes sure certainly indeed therefore thus hence meanwhile instead otherwise
consequently besides similarly likewise perhaps maybe generally typically something anything
everything nothing someone anyone everyone themselves yourself itself ourselves different
important various several certain consider understand""".split())
# a short topic is the longest naming word among this many at the start of its source
SALIENT_WINDOW = 8
_EDGE = " :-–—.,;!?()'’"  # stripped from a topic word's ends


def _naming_word(word: str) -> bool:
    w = word.lower().strip(_EDGE)
    return bool(w) and w not in FUNCTION_WORDS and w not in DISCOURSE_WORDS and \
        not any(q in w for q in "'’") and not w[0].isdigit() and not w.endswith("ly")


def make_topic(head: str, body: str, max_words: int = 4) -> str:
    """The first `max_words` words of the head (the body's when the head has none). Under
    three words the topic must name the chunk's subject, so it starts at the longest naming
    word (not a function word, a discourse marker such as "However", an -ly adverb, a
    contraction or a number) among the first `SALIENT_WINDOW` naming words, the first of equals."""
    text = re.sub(r"^\s*(\d{1,3}[.)]|[-*•+])\s+", "", head)
    text = re.sub(r"[*_`#\"<>\n\r\t]", " ", text).strip(" :-–—.,;")
    if len(text.split()) < 1:
        text = re.sub(r"[*_`#\"<>\n\r\t]", " ", body).strip()
    words = text.split()
    if max_words < 3:
        naming = [i for i, w in enumerate(words) if _naming_word(w)][:SALIENT_WINDOW]
        if naming:
            start = max(naming, key=lambda i: (len(words[i].strip(_EDGE)), -i))
            words = words[start:]
    edge = _EDGE if max_words < 3 else " :-–—.,;"
    return " ".join(w.strip(edge) for w in words[:max_words]).strip() or "detail"


def tens_for(n_tokens: int) -> int:
    """The promise of a block of `n_tokens` (the model's tokens between `<async>` and
    `</async>`): the smallest T with 10·T >= n_tokens, within 1..MAX_PROMISE_TENS. Pred-10X
    reserves 10·T positions for the block, so it never runs into the main thread's."""
    return max(1, min(MAX_PROMISE_TENS, -(-n_tokens // 10)))


def promise_tag(topic: str, tens: int) -> str:
    return f'<promise topic="{topic}" tokens="{tens}"/>'


PROMISE_TAG_TOKENS = 2  # `<promise topic="` and the closing `" tokens="N"/>` are one token each


@dataclass(frozen=True)
class RuleShape:
    """How the rules lay out a fork. The defaults are the APAR-style annotation; the speed
    shape (`RuleShape.speed()`) spends fewer main-thread tokens per fork: a short topic, an
    item's header moved into its block (the main thread keeps only the list marker), and no
    fork whose chunk is not longer than what its promise costs the main thread."""

    min_chunk_tokens: int = 12
    topic_words: int = 4
    head_in_block: bool = False
    forks_that_pay: bool = False
    # consecutive paragraphs fork in one group (each keeps its first sentence in the main
    # thread) instead of each paragraph alone: a lone fork runs beside nothing
    paragraphs_together: bool = False

    @classmethod
    def speed(cls, **overrides) -> "RuleShape":
        return cls(**{"topic_words": 1, "head_in_block": True, "forks_that_pay": True,
                      **overrides})


def promise_cost(topic: str, count_tokens: Callable[[str], int]) -> int:
    """Tokens a promise adds to the main thread: its two tag tokens and its topic."""
    return PROMISE_TAG_TOKENS + count_tokens(topic)


def _fork_parts(unit: Unit, core: str, shape: RuleShape) -> tuple[str, str, str]:
    """(what stays in the main thread, the topic's source, the block's text)."""
    if unit.kind == "item":
        split = _item_head_length(core)
        if shape.head_in_block:
            # the marker stays, the space after it opens the block: a tokenizer that joins
            # a word to the space before it reads the same tokens with the tags in between
            marker = ITEM_RE.match(core)
            keep = marker.end(2) if marker else 0
            return core[:keep], core[keep:split], core[keep:]
        return core[:split], core[:split], core[split:]
    split = _paragraph_head_length(core)
    return core[:split], core[:split], core[split:]


class _Groups:
    """The output, one group of forks at a time (a group ends at its `<sync/>`): with a gain
    meter, a group whose forks do not pay (its annotated text takes as many forward passes
    as its content has tokens, or more) is written plain instead."""

    def __init__(self, gain_of: Callable[[str], float] | None):
        self.gain_of = gain_of
        self.out: list[str] = []
        self.plain: list[str] = []  # the open group's text, unannotated
        self.annotated: list[str] = []  # and annotated
        self.forks = self.promises = 0

    def text(self, text: str) -> None:
        (self.annotated if self.forks else self.out).append(text)
        if self.forks:
            self.plain.append(text)

    def fork(self, plain: str, annotated: str) -> None:
        self.plain.append(plain)
        self.annotated.append(annotated)
        self.forks += 1

    def close(self) -> None:
        if not self.forks:
            return
        group = "".join(self.annotated) + SYNC
        if self.gain_of is not None and self.gain_of(group) <= 1.0:
            self.out.extend(self.plain)
        else:
            self.out.append(group)
            self.promises += self.forks
        self.plain, self.annotated, self.forks = [], [], 0


def annotate_rules(response: str, count_tokens: Callable[[str], int],
                   min_chunk_tokens: int = 12, shape: RuleShape | None = None,
                   gain_of: Callable[[str], float] | None = None) -> tuple[str, int]:
    """Return (annotated text, number of promises); 0 promises means nothing to annotate.
    `shape` (default: `RuleShape(min_chunk_tokens)`) chooses topics and which forks to make;
    with `shape.forks_that_pay` and a `gain_of` meter (annotated text -> content tokens per
    forward pass, `solm.annotate.gain.gain_meter`), a group of forks that does not pay is
    left plain."""
    shape = shape or RuleShape(min_chunk_tokens=min_chunk_tokens)
    groups = _Groups(gain_of if shape.forks_that_pay else None)
    for unit in split_units(response):
        if unit.kind == "blank":
            groups.text(unit.text)
            continue
        if unit.kind in ("code", "table") or (unit.kind == "paragraph"
                                              and not shape.paragraphs_together):
            groups.close()
        if unit.kind not in ("item", "paragraph"):
            groups.text(unit.text)
            continue
        core, trailing = _split_trailing_ws(unit.text)
        head, topic_source, block = _fork_parts(unit, core, shape)
        n_block = count_tokens(block) if block.strip() else 0
        topic = make_topic(topic_source, block, shape.topic_words)
        if n_block < shape.min_chunk_tokens or (
                shape.forks_that_pay and n_block <= promise_cost(topic, count_tokens)):
            groups.text(unit.text)
            continue
        groups.fork(unit.text, head + promise_tag(topic, tens_for(n_block)) + ASYNC_OPEN +
                    block + ASYNC_CLOSE + trailing)
    groups.close()
    if groups.promises == 0:
        return response, 0
    return "".join(groups.out), groups.promises
