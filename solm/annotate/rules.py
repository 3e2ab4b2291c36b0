"""Rule-based Pasta-Lang annotation in the spirit of APAR (the APAR baseline's preprocessing).

Syntactic rules only:
- a numbered or bulleted list item keeps its marker and short title (up to ':' / ' - ' /
  the end of a bold title / the first sentence) in the main thread; its description becomes
  an async block;
- a paragraph keeps its first sentence in the main thread; the rest becomes an async block;
- fenced code, headings, tables and short pieces stay in the main thread;
- `<sync/>` goes before a paragraph, code block or table that follows open blocks (such text
  usually refers back to them), and at the end of the response if blocks are open.

`tokens="N"` is the chunk's real length in tokens rounded to tens (at least 1). The result
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


def make_topic(head: str, body: str, max_words: int = 4) -> str:
    text = re.sub(r"^\s*(\d{1,3}[.)]|[-*•+])\s+", "", head)
    text = re.sub(r"[*_`#\"<>\n\r\t]", " ", text).strip(" :-–—.,;")
    if len(text.split()) < 1:
        text = re.sub(r"[*_`#\"<>\n\r\t]", " ", body).strip()
    words = text.split()[:max_words]
    return " ".join(words) or "detail"


def tens_for(n_tokens: int) -> int:
    return max(1, min(MAX_PROMISE_TENS, round(n_tokens / 10)))


def promise_tag(topic: str, tens: int) -> str:
    return f'<promise topic="{topic}" tokens="{tens}"/>'


def annotate_rules(response: str, count_tokens: Callable[[str], int],
                   min_chunk_tokens: int = 12) -> tuple[str, int]:
    """Return (annotated text, number of promises); 0 promises means nothing to annotate."""
    out: list[str] = []
    open_blocks = 0
    n_promises = 0
    for unit in split_units(response):
        if unit.kind == "blank":
            out.append(unit.text)
            continue
        if open_blocks and unit.kind in ("paragraph", "code", "table"):
            out.append(SYNC)
            open_blocks = 0
        if unit.kind not in ("item", "paragraph"):
            out.append(unit.text)
            continue
        core, trailing = _split_trailing_ws(unit.text)
        split = _item_head_length(core) if unit.kind == "item" else _paragraph_head_length(core)
        head, body = core[:split], core[split:]
        n_body = count_tokens(body) if body.strip() else 0
        if n_body < min_chunk_tokens:
            out.append(unit.text)
            continue
        out.append(head + promise_tag(make_topic(head, body), tens_for(n_body)) + ASYNC_OPEN +
                   body + ASYNC_CLOSE + trailing)
        open_blocks += 1
        n_promises += 1
    if open_blocks:
        out.append(SYNC)
    if n_promises == 0:
        return response, 0
    return "".join(out), n_promises
