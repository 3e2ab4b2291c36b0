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
from solm.core.jsonl import read_jsonl

_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "model"}


@dataclass
class Record:
    id: str
    prompt: str
    response: str | None = None
    system: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _from_turns(turns: list[dict], role_key: str, text_key: str) -> tuple[str | None, str, str | None]:
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
        raise ValueError("no human/user turn")
    return system, prompt, response


def record_from_dict(raw: dict[str, Any], default_id: str) -> Record:
    """Convert one raw record; raises ValueError naming the missing field."""
    rid = str(raw.get("id", raw.get("unique_id", default_id)))
    meta = {k: raw[k] for k in ("dataset", "source", "generator") if k in raw}
    if "conversations" in raw:
        system, prompt, response = _from_turns(raw["conversations"], "from", "value")
    elif "messages" in raw:
        system, prompt, response = _from_turns(raw["messages"], "role", "content")
    elif "instruction" in raw:
        prompt = raw["instruction"]
        if raw.get("input"):
            prompt = f"{prompt}\n\n{raw['input']}"
        system, response = raw.get("system"), raw.get("output")
    elif "prompt" in raw:
        system, prompt, response = raw.get("system"), raw["prompt"], raw.get("response")
    elif "question" in raw or "problem" in raw:
        prompt = raw.get("question", raw.get("problem"))
        system, response = None, raw.get("solution", raw.get("answer"))
    else:
        raise ValueError("expected one of 'conversations', 'messages', 'instruction', 'prompt'")
    if not isinstance(prompt, str):
        raise ValueError("prompt is not a string")
    if response is not None and not isinstance(response, str):
        response = str(response)
    return Record(id=rid, prompt=prompt, response=response, system=system, meta=meta)


def _looks_like_hub_name(source: str) -> bool:
    return not os.path.exists(source) and "/" in source and not source.endswith(
        (".jsonl", ".json")) and source.count("/") == 1 and not source.startswith((".", "/"))


def load_records(source: str | os.PathLike, split: str = "train", limit: int | None = None,
                 require_response: bool = False) -> Iterator[Record]:
    """Yield Records from a local JSONL file or a Hugging Face dataset name."""
    source = str(source)
    if _looks_like_hub_name(source):
        rows: Any = _load_hub(source, split)
        origin = source
        numbered = ((i + 1, r) for i, r in enumerate(rows))
    else:
        origin = source
        numbered = enumerate(read_jsonl(source), start=1)
    count = 0
    if limit is not None and limit <= 0:
        return
    for line, raw in numbered:
        stem_id = f"{Path(origin).stem}-{line - 1}"
        try:
            rec = record_from_dict(raw, stem_id)
        except (ValueError, TypeError, AttributeError) as e:
            raise DataError(str(e), path=origin, line=line) from None
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
