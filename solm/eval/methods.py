"""The decoding methods `pasta eval run` compares, all decoded by solm's runtimes so their
wall times are comparable: `sequential` (any model, one token per step), `pasta` and `apar`
(a Pasta-Lang model through the asynchronous runtime: the same decoding, told apart by how the
model was trained), `sot` (Skeleton-of-Thought on any model, points as threads of one pool).

What an outputs row counts, for every method: `content_tokens` is the answer text tokenized
(its length as a reader gets it); `generated_tokens` the tokens the model decoded (tags, and
for sot the skeleton, included); `forward_passes` the decode steps after prefill;
`critical_path` the tokens decoded one after another. sot adds `skeleton_tokens` and
`point_tokens`, and flags `skeleton_cap` when the skeleton stopped at its cap.
`--max-new-tokens` caps `generated_tokens` of every method (sot: both stages together).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from solm.core.chat import prompt_ids
from solm.core.errors import SolmError
from solm.core.records import Record
from solm.core.sampling import SamplingConfig

KINDS = ("sequential", "pasta", "apar", "sot")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class Method:
    label: str  # names its outputs file and its point on the plots
    kind: str
    model: str

    @classmethod
    def parse(cls, spec: str) -> "Method":
        """`KIND=MODEL` or `KIND:LABEL=MODEL`, e.g. `sot=smollm2-135m`,
        `apar:pasta-sft-lora=pasta-sft-cpu`."""
        head, eq, model = spec.partition("=")
        kind, colon, label = head.partition(":")
        if not eq or not model or kind not in KINDS or (colon and not label):
            raise SolmError(f"--method {spec!r}: expected KIND=MODEL or KIND:LABEL=MODEL with "
                            f"KIND one of {', '.join(KINDS)}")
        label = label or kind
        if not _LABEL.match(label):
            raise SolmError(f"--method {spec!r}: a label is letters, digits and _.+- only")
        return cls(label, kind, model)


@dataclass
class DecodeSettings:
    max_new_tokens: int = 512
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    sot_skeleton_tokens: int = 160
    sot_point_tokens: int = 128
    max_fork_tokens: int = 512


class MethodRunner:
    """One method's runtime; `decode(record)` returns the outputs row (timed fields from the
    last of `repeats` decodes)."""

    def __init__(self, method: Method, model, tokenizer, settings: DecodeSettings,
                 pool_size: int = 2048, compile: bool = False):
        self.method, self.settings, self.tokenizer = method, settings, tokenizer
        if method.kind == "sot":
            from solm.decode.sot.runtime import SotRuntime
            self.runtime = SotRuntime(model, tokenizer, pool_size=pool_size, compile=compile)
        else:
            from solm.decode.pasta.runtime import PastaRuntime
            self.runtime = PastaRuntime(model, tokenizer, pool_size=pool_size, compile=compile)

    def warm_up(self) -> None:
        """One short decode, untimed (first-call allocations, graph builds)."""
        self._decode_once("Say hello.", max_new_tokens=8)

    def decode(self, record: Record, index: int, repeats: int = 1) -> dict:
        for _ in range(max(1, repeats)):
            row = self._decode_once(record.prompt, record.system)
        return {"id": record.id, "index": index, "instruction": record.prompt,
                "generator": self.method.label, "kind": self.method.kind,
                "model": self.method.model, "repeats": repeats, **row}

    def decode_batched(self, records: list[tuple[int, Record]], batch_size: int):
        """Rows for many records decoded together (continuous batching): for quality runs.
        A row's wall time would count its batch mates, so timed fields are None and the
        row says `batched` (SoT too: its skeletons and points of several prompts share
        each step)."""
        if batch_size <= 1:
            for index, rec in records:
                yield self.decode(rec, index)
            return
        if self.method.kind == "sot":
            yield from self._sot_batched(records, batch_size)
            return
        from solm.decode.pasta.batched import BatchedPastaRuntime, BatchRequest
        from solm.decode.pasta.decode_file import result_record
        from solm.decode.pasta.runtime import PastaDecodeConfig

        s = self.settings
        mode = "sequential" if self.method.kind == "sequential" else "parallel"
        cfg = PastaDecodeConfig(mode=mode, max_new_tokens=s.max_new_tokens,
                                sampling=s.sampling, max_fork_tokens=s.max_fork_tokens)
        rt = self.runtime
        batched = BatchedPastaRuntime(rt.model, rt.tokenizer,
                                      pool_size=rt.pool_size * batch_size, max_batch=batch_size)
        by_id = {rec.id: (index, rec) for index, rec in records}
        reqs = (BatchRequest(rec.id, prompt_ids(self.tokenizer, rec.prompt, rec.system), cfg)
                for _, rec in records)
        for done in batched.run(reqs):
            if done.error:
                raise SolmError(f"{self.method.label}: {done.rid}: {done.error}")
            index, rec = by_id[done.rid]
            row = result_record(rt, rec, done.result, mode)
            out = {"id": rec.id, "index": index, "instruction": rec.prompt,
                   "generator": self.method.label, "kind": self.method.kind,
                   "model": self.method.model, "batched": batch_size,
                   "output": row["response"],
                   **{k: row[k] for k in ("content_tokens", "critical_path", "forward_passes",
                                          "promises", "threads", "flags")},
                   "generated_tokens": row["total_tokens"], "total_tokens": row["total_tokens"],
                   "wall_s": None, "prefill_s": None, "decode_s": None}
            if mode == "parallel":
                out["annotated"] = row["annotated"]
            yield out

    def _sot_batched(self, records: list[tuple[int, Record]], batch_size: int):
        from solm.decode.sot.batched import BatchedSotRuntime
        from solm.decode.sot.runtime import SotConfig

        s = self.settings
        batched = BatchedSotRuntime(self.runtime.model, self.tokenizer,
                                    pool_size=self.runtime.forward.pool_size * batch_size,
                                    max_batch=batch_size)
        cfg = SotConfig(max_skeleton_tokens=s.sot_skeleton_tokens,
                        max_point_tokens=s.sot_point_tokens, sampling=s.sampling,
                        max_new_tokens=s.max_new_tokens)
        by_id = {rec.id: (index, rec) for index, rec in records}
        for rid, res in batched.run(((rec.id, rec.prompt) for _, rec in records), cfg):
            index, rec = by_id[rid]
            yield {"id": rec.id, "index": index, "instruction": rec.prompt,
                   "generator": self.method.label, "kind": self.method.kind,
                   "model": self.method.model, "batched": batch_size, "output": res.text,
                   "content_tokens": answer_tokens(self.tokenizer, res.text),
                   "generated_tokens": res.generated_tokens,
                   "skeleton_tokens": res.skeleton_tokens, "point_tokens": sum(res.point_tokens),
                   "critical_path": res.critical_path, "forward_passes": res.forward_passes,
                   "points": len(res.points), "wall_s": None, "prefill_s": None,
                   "decode_s": None, "flags": res.flags}

    def _decode_once(self, prompt: str, system: str | None = None,
                     max_new_tokens: int | None = None) -> dict:
        s = self.settings
        if self.method.kind == "sot":
            from solm.decode.sot.runtime import SotConfig

            skeleton, point = s.sot_skeleton_tokens, s.sot_point_tokens
            if max_new_tokens is not None:  # the warm-up's short decode
                skeleton, point = min(skeleton, max_new_tokens), min(point, max_new_tokens)
            res = self.runtime.generate(prompt, SotConfig(
                max_skeleton_tokens=skeleton, max_point_tokens=point, sampling=s.sampling,
                max_new_tokens=max_new_tokens or s.max_new_tokens))
            return {"output": res.text, "content_tokens": answer_tokens(self.tokenizer, res.text),
                    "generated_tokens": res.generated_tokens,
                    "skeleton_tokens": res.skeleton_tokens, "point_tokens": sum(res.point_tokens),
                    "critical_path": res.critical_path, "forward_passes": res.forward_passes,
                    "points": len(res.points),
                    "wall_s": round(res.wall_s, 4), "prefill_s": round(res.prefill_s, 4),
                    "decode_s": round(res.decode_s, 4), "flags": res.flags}
        from solm.decode.pasta.decode_file import result_record
        from solm.decode.pasta.runtime import PastaDecodeConfig

        mode = "sequential" if self.method.kind == "sequential" else "parallel"
        cfg = PastaDecodeConfig(mode=mode, max_new_tokens=max_new_tokens or s.max_new_tokens,
                                sampling=s.sampling, max_fork_tokens=s.max_fork_tokens)
        ids = prompt_ids(self.tokenizer, prompt, system)
        res = self.runtime.generate(ids, cfg)
        row = result_record(self.runtime, Record("-", prompt, system=system), res, mode)
        keep = ("content_tokens", "critical_path", "forward_passes", "promises",
                "threads", "wall_s", "prefill_s", "decode_s", "flags")
        out = {"output": row["response"], **{k: row[k] for k in keep},
               "generated_tokens": row["total_tokens"], "total_tokens": row["total_tokens"]}
        if mode == "parallel":
            out["annotated"] = row["annotated"]
        return out


def answer_tokens(tokenizer, text: str) -> int:
    """An answer's length: its text tokenized (the count every method's row records as
    `content_tokens`, so lengths and speedups compare across methods)."""
    from solm.core.chat import text_ids

    return len(text_ids(tokenizer, text))


def load_runners(methods: list[Method], settings: DecodeSettings | dict[str, DecodeSettings],
                 dtype: str = "auto", device: str | None = None, pool_size: int = 2048,
                 compile: bool = False) -> dict[str, MethodRunner]:
    """A runner per method (settings shared, or per label); methods naming the same model
    share its weights."""
    from solm.core.models import load_decoder

    loaded: dict[str, tuple] = {}
    runners = {}
    for m in methods:
        if m.model not in loaded:
            loaded[m.model] = load_decoder(m.model, dtype=dtype, device=device)
        model, tok = loaded[m.model]
        own = settings[m.label] if isinstance(settings, dict) else settings
        runners[m.label] = MethodRunner(m, model, tok, own, pool_size, compile)
    return runners


def default_repeats(device: torch.device | str) -> int:
    """Decode each request twice and time the second on GPUs (as the thesis does); on a CPU
    one decode after the runner's warm-up is already steady."""
    return 2 if torch.device(device).type == "cuda" else 1
