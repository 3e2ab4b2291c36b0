"""Pasta-Lang at the text level: parse, validate, serialize, strip.

    <promise topic="T" tokens="N"/><async>chunk</async> ... <sync/>

A parsed document is a list of items, each keeping its exact source text, so
`serialize(parse(text)) == text` always holds. Validation (strict parsing) requires every
promise to be followed directly by its async block, forbids nesting, stray closers and `"`
inside topics, and reports the character offset and line:column of the first problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from solm.core.control_tokens import ASYNC_CLOSE, ASYNC_OPEN, MAX_PROMISE_TENS, SYNC

PROMISE_RE = re.compile(r'<promise topic="([^"]*)" tokens="(\d+)"/>')
TAG_RE = re.compile(r'<promise topic="[^"]*" tokens="\d+"/>|<async>|</async>|<sync/>|<promise\b')


class PastaSyntaxError(ValueError):
    def __init__(self, message: str, text: str, offset: int):
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        self.offset, self.line, self.column = offset, line, col
        super().__init__(f"{message} (line {line}, column {col}, offset {offset})")


@dataclass
class Text:
    text: str


@dataclass
class Promise:
    topic: str
    tens: int
    body: str | None  # the async block's content; None when the promise has no block

    @property
    def tag(self) -> str:
        return f'<promise topic="{self.topic}" tokens="{self.tens}"/>'


@dataclass
class Sync:
    pass


Item = Union[Text, Promise, Sync]


def serialize(items: list[Item]) -> str:
    out = []
    for it in items:
        if isinstance(it, Text):
            out.append(it.text)
        elif isinstance(it, Promise):
            out.append(it.tag)
            if it.body is not None:
                out.append(f"{ASYNC_OPEN}{it.body}{ASYNC_CLOSE}")
        else:
            out.append(SYNC)
    return "".join(out)


def parse(text: str) -> list[Item]:
    """Strict parse; raises PastaSyntaxError at the first violation."""
    items: list[Item] = []
    pos = 0
    while pos < len(text):
        m = TAG_RE.search(text, pos)
        if m is None:
            items.append(Text(text[pos:]))
            break
        if m.start() > pos:
            items.append(Text(text[pos:m.start()]))
        tag = m.group(0)
        if tag == "<promise":
            raise PastaSyntaxError('malformed promise tag: expected <promise topic="..." '
                                   'tokens="N"/>', text, m.start())
        if tag == SYNC:
            items.append(Sync())
            pos = m.end()
            continue
        if tag in (ASYNC_OPEN, ASYNC_CLOSE):
            raise PastaSyntaxError(f"{tag} without a promise directly before it", text, m.start())
        pm = PROMISE_RE.fullmatch(tag)
        topic, tens = pm.group(1), int(pm.group(2))
        if not 1 <= tens <= MAX_PROMISE_TENS:
            raise PastaSyntaxError(f"tokens={tens} out of range 1..{MAX_PROMISE_TENS}", text,
                                   m.start())
        if not text.startswith(ASYNC_OPEN, m.end()):
            raise PastaSyntaxError("promise not followed directly by <async>", text, m.end())
        body_start = m.end() + len(ASYNC_OPEN)
        close = text.find(ASYNC_CLOSE, body_start)
        if close < 0:
            raise PastaSyntaxError("unclosed <async> block", text, m.end())
        inner = TAG_RE.search(text, body_start, close)
        if inner is not None:
            raise PastaSyntaxError(f"{inner.group(0)[:12]}... inside an async block (nesting is "
                                   f"not allowed)", text, inner.start())
        items.append(Promise(topic, tens, text[body_start:close]))
        pos = close + len(ASYNC_CLOSE)
    return items


def validate(text: str) -> list[str]:
    """Return a list of problems (empty when the text is valid Pasta-Lang)."""
    try:
        parse(text)
    except PastaSyntaxError as e:
        return [str(e)]
    return []


def strip(text: str, strict: bool = True) -> str:
    """The plain response: tags removed, each async block spliced in at its promise.

    With strict=False, malformed input is handled leniently by deleting every tag.
    """
    if strict:
        out = []
        for it in parse(text):
            if isinstance(it, Text):
                out.append(it.text)
            elif isinstance(it, Promise) and it.body is not None:
                out.append(it.body)
        return "".join(out)
    return TAG_RE.sub("", re.sub(r'<promise topic="[^"]*" tokens="\d+"/>', "", text))


def promises(text: str) -> list[Promise]:
    return [it for it in parse(text) if isinstance(it, Promise)]


def is_annotated(text: str) -> bool:
    return TAG_RE.search(text) is not None


def normalize_ws(text: str) -> str:
    return " ".join(text.split())


def faithful(annotated: str, original: str) -> bool:
    """strip(annotated) equals the original up to whitespace."""
    try:
        return normalize_ws(strip(annotated)) == normalize_ws(original)
    except PastaSyntaxError:
        return False
