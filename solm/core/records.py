"""One prompt/response record type, and loaders from the common instruction formats.

Accepted per JSONL line (the format is detected per record):
- ShareGPT: {"conversations": [{"from": "system"|"human"|"gpt", "value": ...}, ...]}
- OpenAI messages: {"messages": [{"role": ..., "content": ...}, ...]}
- Alpaca: {"instruction", "input"?, "output"?}
- plain: {"prompt", "response"?}
Hugging Face dataset names (e.g. `Open-Orca/SlimOrca`, `tatsu-lab/alpaca_eval`) load through
`datasets` and are converted the same way.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from solm.core.errors import DataError, SolmError
from solm.core.jsonl import read_jsonl_numbered

_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "model"}


@dataclass
class Record:
    id: str
    prompt: str
    response: str | None = None
    system: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # where the record was read (file, line, the prompt's field), for errors that name it
    origin: tuple[str, int, str] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FieldError(ValueError):
    """A record's field is missing or of the wrong kind (the loader adds file and line)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def _from_turns(turns: Any, role_key: str, text_key: str, field: str
                ) -> tuple[str | None, str, str | None]:
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise FieldError(field, f"expected a list of {{{role_key!r}, {text_key!r}}} turns, "
                                f"got {type(turns).__name__}")
    system, prompt, response = None, None, None
    for turn in turns:
        role, text = str(turn.get(role_key, "")).lower(), turn.get(text_key)
        if role == "system":
            system = text
        elif role in _HUMAN and prompt is None:
            prompt = text
        elif role in _ASSISTANT and prompt is not None and response is None:
            response = text
    if prompt is None:
        raise FieldError(field, "no human/user turn")
    return system, prompt, response


def record_from_dict(raw: dict[str, Any], default_id: str) -> Record:
    """Convert one raw record; raises ValueError naming the missing field."""
    rid = str(raw.get("id", raw.get("unique_id", default_id)))
    # a problem's gold answer and task travel with it, so its decodes are graded; a generated
    # task's reads per line (`needs`), for `tip annotate --rule needs`
    meta = {k: raw[k] for k in ("dataset", "source", "generator", "answer", "final_answer",
                                "expected_answer", "task", "needs") if k in raw}
    if "conversations" in raw:
        system, prompt, response = _from_turns(raw["conversations"], "from", "value",
                                               "conversations")
        field = "conversations"
    elif "messages" in raw:
        system, prompt, response = _from_turns(raw["messages"], "role", "content", "messages")
        field = "messages"
    elif "instruction" in raw:
        prompt, field = raw["instruction"], "instruction"
        if isinstance(prompt, str) and raw.get("input"):
            prompt = f"{prompt}\n\n{raw['input']}"
        system, response = raw.get("system"), raw.get("output")
    elif "prompt" in raw:
        system, prompt, response = raw.get("system"), raw["prompt"], raw.get("response")
        field = "prompt"
    elif "question" in raw or "problem" in raw:
        field = "question" if "question" in raw else "problem"
        prompt = raw[field]
        system, response = None, raw.get("solution", raw.get("answer"))
    else:
        raise ValueError("expected one of 'conversations', 'messages', 'instruction', 'prompt'")
    if not isinstance(prompt, str):
        raise FieldError(field, f"expected text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise FieldError(field, "the prompt is empty")
    if response is not None and not isinstance(response, str):
        response = str(response)
    return Record(id=rid, prompt=prompt, response=response, system=system, meta=meta,
                  origin=("", 0, field))


def _looks_like_hub_name(source: str) -> bool:
    return not os.path.exists(source) and "/" in source and not source.endswith(
        (".jsonl", ".json")) and source.count("/") == 1 and not source.startswith((".", "/"))


def load_records(source: str | os.PathLike, split: str = "train", limit: int | None = None,
                 require_response: bool = False,
                 duplicates: list[str] | None = None) -> Iterator[Record]:
    """Yield Records from a local JSONL file or a Hugging Face dataset name.

    Ids must be unique (outputs are resumed by id; `1` and `"1"` are one id): a repeated id
    raises a DataError naming both lines, unless `duplicates` is a list, which then collects
    the repeated ids while only each id's first row is yielded (`--dedupe`)."""
    source = str(source)
    if _looks_like_hub_name(source):
        rows: Any = _load_hub(source, split)
        origin = source
        numbered = ((i + 1, r) for i, r in enumerate(rows))
    else:
        origin = source
        numbered = read_jsonl_numbered(source)
    count = 0
    first_line: dict[str, int] = {}
    if limit is not None and limit <= 0:
        return
    for line, raw in numbered:
        stem_id = f"{Path(origin).stem}-{line - 1}"
        try:
            rec = record_from_dict(raw, stem_id)
        except FieldError as e:
            raise DataError(str(e), path=origin, line=line, field=e.field) from None
        except (ValueError, TypeError, AttributeError) as e:
            raise DataError(str(e), path=origin, line=line) from None
        if rec.id in first_line:
            if duplicates is None:
                raise DataError(f"id {rec.id!r} already used on line {first_line[rec.id]} "
                                f"(outputs are resumed by id); make ids unique or pass "
                                f"--dedupe to keep each id's first row", path=origin,
                                line=line, field="id")
            duplicates.append(rec.id)
            continue
        first_line[rec.id] = line
        rec.origin = (origin, line, rec.origin[2] if rec.origin else "prompt")
        if require_response and not rec.response:
            raise DataError("record has no response", path=origin, line=line, field="response")
        yield rec
        count += 1
        if limit is not None and count >= limit:
            return


def _load_hub(name: str, split: str):
    try:
        import datasets
        return datasets.load_dataset(name, split=split)
    except Exception as e:  # offline, unknown name, gated...
        raise SolmError(
            f"could not load dataset '{name}' from the Hugging Face hub ({type(e).__name__}). "
            f"If this machine is offline, download it elsewhere and pass a local JSONL file "
            f"(ShareGPT, Alpaca or prompt/response form) instead.") from None


def sample_records(records: Iterator[Record], k: int, seed: int) -> list[Record]:
    """A seeded uniform random subset of k records (reservoir sampling), in input order."""
    import random

    rng = random.Random(seed)
    reservoir: list[tuple[int, Record]] = []
    for i, rec in enumerate(records):
        if len(reservoir) < k:
            reservoir.append((i, rec))
        else:
            j = rng.randint(0, i)
            if j < k:
                reservoir[j] = (i, rec)
    return [rec for _, rec in sorted(reservoir, key=lambda t: t[0])]
