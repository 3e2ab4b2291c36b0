"""The decoding methods `pasta eval run` compares, all decoded by solm's runtimes so their
wall times are comparable: `sequential` (any model, one token per step), `pasta` and `apar`
(a Pasta-Lang model through the asynchronous runtime: the same decoding, told apart by how the
model was trained), `sot` (Skeleton-of-Thought on any model, points as threads of one pool).

What an outputs row counts, for every method: `content_tokens` is the answer text tokenized
(its length as a reader gets it); `generated_tokens` the tokens the model decoded (tags, and
for sot the skeleton, included); `forward_passes` the decode steps after prefill;
`critical_path` the tokens decoded one after another. sot adds `skeleton_tokens` and
`point_tokens`, and flags `skeleton_cap` when the skeleton stopped at its cap. `pdiff`
(Planned Diffusion, `pdiff=MODEL,steps_ratio=0.5,...`) counts every forward pass as a step of
its critical path (a denoising pass fills many slots at once) and adds its chunk health
(`chunks`, `pad_only_chunks`, `chunk_repeated_ngrams`, `well_formed`).
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

KINDS = ("sequential", "pasta", "apar", "sot", "pdiff")
# the knobs a pdiff method takes after its model: name -> parser
PDIFF_OPTIONS = {"steps_ratio": float, "confidence_threshold": float, "length_scale": float,
                 "order": str, "chunk_temperature": float, "max_continuation": int,
                 "defer_pads": int}
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class Method:
    label: str  # names its outputs file and its point on the plots
    kind: str
    model: str
    options: str = ""  # pdiff: its knobs, `name=value` joined by commas

    @classmethod
    def parse(cls, spec: str) -> "Method":
        """`KIND=MODEL` or `KIND:LABEL=MODEL`, e.g. `sot=smollm2-135m`,
        `apar:pasta-sft-lora=pasta-sft-cpu`; pdiff takes knobs after its model:
        `pdiff:pd-0.5=pdiff-cpu,steps_ratio=0.5,confidence_threshold=0.9`."""
        head, eq, model = spec.partition("=")
        kind, colon, label = head.partition(":")
        if not eq or not model or kind not in KINDS or (colon and not label):
            raise SolmError(f"--method {spec!r}: expected KIND=MODEL or KIND:LABEL=MODEL with "
                            f"KIND one of {', '.join(KINDS)}")
        label = label or kind
        if not _LABEL.match(label):
            raise SolmError(f"--method {spec!r}: a label is letters, digits and _.+- only")
        model, _, options = model.partition(",")
        if options and kind != "pdiff":
            raise SolmError(f"--method {spec!r}: only pdiff methods take options after the "
                            f"model")
        return cls(label, kind, model, _canonical_options(spec, options))

    def pdiff_options(self) -> dict:
        """The pdiff knobs as typed values (empty for other kinds)."""
        out = {}
        for item in filter(None, self.options.split(",")):
            name, _, value = item.partition("=")
            out[name] = None if value == "off" else PDIFF_OPTIONS[name](value)
        if "defer_pads" in out:
            out["defer_pads"] = bool(out["defer_pads"])
        return out


def _canonical_options(spec: str, options: str) -> str:
    """`name=value,...` checked against PDIFF_OPTIONS, in a fixed order."""
    values = {}
    for item in filter(None, options.split(",")):
        name, eq, value = item.partition("=")
        if name not in PDIFF_OPTIONS or not eq or not value:
            raise SolmError(f"--method {spec!r}: {item!r} is not NAME=VALUE with NAME one of "
                            f"{', '.join(PDIFF_OPTIONS)}")
        if value != "off":
            try:
                PDIFF_OPTIONS[name](value)
            except ValueError:
                raise SolmError(f"--method {spec!r}: {name}={value} is not a "
                                f"{PDIFF_OPTIONS[name].__name__}") from None
        values[name] = value
    _check_pdiff_values(spec, values)
    return ",".join(f"{n}={values[n]}" for n in PDIFF_OPTIONS if n in values)


def _check_pdiff_values(spec: str, values: dict[str, str]) -> None:
    """Each knob in its range, as `pdiff decode` checks it (before any model loads)."""
    from solm.decode.pdiff.runtime import PdiffDecodeConfig

    typed = {n: None if v == "off" else PDIFF_OPTIONS[n](v) for n, v in values.items()}
    if "defer_pads" in typed:
        if typed["defer_pads"] not in (0, 1):
            raise SolmError(f"--method {spec!r}: defer_pads is 0 or 1, got "
                            f"{values['defer_pads']}")
        typed["defer_pads"] = bool(typed["defer_pads"])
    for name in ("steps_ratio", "length_scale", "order", "chunk_temperature",
                 "max_continuation", "defer_pads"):
        if name in typed and typed[name] is None:
            raise SolmError(f"--method {spec!r}: {name} cannot be off")
    try:
        PdiffDecodeConfig(**typed).check()
    except ValueError as e:
        raise SolmError(f"--method {spec!r}: {e}") from None


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
        elif method.kind == "pdiff":
            from solm.decode.pdiff.runtime import PdiffRuntime
            self.runtime = PdiffRuntime(model, tokenizer, pool_size=pool_size, max_batch=1)
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
        if self.method.kind == "pdiff":
            yield from self._pdiff_batched(records, batch_size)
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

    def pdiff_config(self, max_new_tokens: int | None = None):
        from solm.decode.pdiff.runtime import PdiffDecodeConfig

        s = self.settings
        return PdiffDecodeConfig(max_new_tokens=max_new_tokens or s.max_new_tokens,
                                 sampling=s.sampling, **self.method.pdiff_options())

    def _pdiff_row(self, rec: Record, res, config) -> dict:
        from solm.decode.pdiff.decode_file import result_record

        row = result_record(self.runtime, rec, res, config)
        return {"output": row["response"], "annotated": row["annotated"],
                "content_tokens": row["content_tokens"],
                "critical_path": row["forward_passes"],
                "forward_passes": row["forward_passes"], "promises": row["promises"],
                "threads": row["promises"], "generated_tokens": row["total_tokens"],
                "total_tokens": row["total_tokens"],
                "wall_s": row["wall_s"], "prefill_s": row["prefill_s"],
                "decode_s": row["decode_s"], "flags": row["flags"],
                **{k: row[k] for k in ("plan_passes", "denoise_passes", "chunks",
                                       "pad_only_chunks", "chunk_repeated_ngrams",
                                       "well_formed")}}

    def _pdiff_batched(self, records: list[tuple[int, Record]], batch_size: int):
        from solm.decode.pdiff.runtime import PdiffRequest, PdiffRuntime

        rt = self.runtime
        batched = PdiffRuntime(rt.model, rt.tokenizer, pool_size=rt.pool_size * batch_size,
                               max_batch=batch_size)
        config = self.pdiff_config()
        by_id = {rec.id: (index, rec) for index, rec in records}
        reqs = (PdiffRequest(rec.id, prompt_ids(self.tokenizer, rec.prompt, rec.system), config)
                for _, rec in records)
        self.runtime = batched  # result_record reads its vocab
        try:
            for rid, res, error in batched.run(reqs):
                if error:
                    raise SolmError(f"{self.method.label}: {rid}: {error}")
                index, rec = by_id[rid]
                row = self._pdiff_row(rec, res, config)
                row.update(wall_s=None, prefill_s=None, decode_s=None)
                yield {"id": rec.id, "index": index, "instruction": rec.prompt,
                       "generator": self.method.label, "kind": self.method.kind,
                       "model": self.method.model, "batched": batch_size, **row}
        finally:
            self.runtime = rt

    def _decode_once(self, prompt: str, system: str | None = None,
                     max_new_tokens: int | None = None) -> dict:
        s = self.settings
        if self.method.kind == "pdiff":
            config = self.pdiff_config(max_new_tokens)
            res = self.runtime.generate(prompt_ids(self.tokenizer, prompt, system), config)
            return self._pdiff_row(Record("-", prompt, system=system), res, config)
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

    loaded: dict[tuple[str, str], tuple] = {}
    runners = {}
    for m in methods:
        system = "pdiff" if m.kind == "pdiff" else "pasta"  # pdiff adds its mask and pad
        if (m.model, system) not in loaded:
            loaded[(m.model, system)] = load_decoder(m.model, dtype=dtype, device=device,
                                                     system=system)
        model, tok = loaded[(m.model, system)]
        own = settings[m.label] if isinstance(settings, dict) else settings
        runners[m.label] = MethodRunner(m, model, tok, own, pool_size, compile)
    return runners


def default_repeats(device: torch.device | str) -> int:
    """Decode each request twice and time the second on GPUs (as the thesis does); on a CPU
    one decode after the runner's warm-up is already steady."""
    return 2 if torch.device(device).type == "cuda" else 1
