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

import dataclasses
import re
import typing
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from solm.core.errors import SolmError
from solm.core.records import Record
from solm.core.sampling import SamplingConfig
from solm.core.settings import check_settings, field_of, is_setting
from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.registry import DecodeSystem, method_kinds
from solm.decode.sot.config import SotConfig

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
# set for every method alike by the run (`DecodeSettings`), never per method
RUN_LEVEL = ("max_new_tokens",)


def kinds() -> tuple[str, ...]:
    return tuple(method_kinds())


def knobs_of(system: DecodeSystem, kind: str) -> dict[str, dataclasses.Field]:
    """The settings a method of `kind` may set after its model (`pdiff=M,steps_ratio=0.5`):
    its system's config fields, less those the kind fixes and the run's own."""
    fixed = set(system.evaluation.methods[kind]) | set(RUN_LEVEL)
    return {f.name: f for f in dataclasses.fields(system.config_cls)
            if is_setting(f) and f.name not in fixed}


def _knob_type(system: DecodeSystem, f: dataclasses.Field) -> tuple[type, bool]:
    """(the knob's type, whether it may be `off`: an optional setting)."""
    hint = typing.get_type_hints(system.config_cls)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    return (args[0] if optional else hint), optional


def _parse_knob(spec: str, system: DecodeSystem, f: dataclasses.Field, value: str) -> Any:
    kind, optional = _knob_type(system, f)
    if value == "off":
        if not optional:
            raise SolmError(f"--method {spec!r}: {f.name} cannot be off")
        return None
    if kind is bool:
        if value not in ("0", "1"):
            raise SolmError(f"--method {spec!r}: {f.name} is 0 or 1, got {value}")
        return value == "1"
    try:
        return kind(value)
    except ValueError:
        raise SolmError(f"--method {spec!r}: {f.name}={value} is not a "
                        f"{kind.__name__}") from None


@dataclass(frozen=True)
class Method:
    label: str  # names its outputs file and its point on the plots
    kind: str
    model: str
    options: str = ""  # its knobs, `name=value` joined by commas in its config's field order

    @property
    def system(self) -> DecodeSystem:
        return method_kinds()[self.kind]

    @classmethod
    def parse(cls, spec: str) -> "Method":
        """`KIND=MODEL` or `KIND:LABEL=MODEL`, e.g. `sot=smollm2-135m`,
        `apar:pasta-sft-lora=pasta-sft-cpu`; knobs of the kind's decode config follow the
        model: `pdiff:pd-0.5=pdiff-cpu,steps_ratio=0.5,confidence_threshold=0.9`."""
        head, eq, model = spec.partition("=")
        kind, colon, label = head.partition(":")
        known = method_kinds()
        if not eq or not model or kind not in known or (colon and not label):
            raise SolmError(f"--method {spec!r}: expected KIND=MODEL or KIND:LABEL=MODEL with "
                            f"KIND one of {', '.join(known)}")
        label = label or kind
        if not _LABEL.match(label):
            raise SolmError(f"--method {spec!r}: a label is letters, digits and _.+- only")
        model, _, options = model.partition(",")
        return cls(label, kind, model, _canonical_options(spec, known[kind], kind, options))

    def knobs(self) -> dict[str, Any]:
        """The knobs as typed values."""
        system = self.system
        fields = knobs_of(system, self.kind)
        out = {}
        for item in filter(None, self.options.split(",")):
            name, _, value = item.partition("=")
            out[name] = _parse_knob(self.options, system, fields[name], value)
        return out

    def config(self, settings: "DecodeSettings") -> Any:
        """This method's decode config: the run's settings, the kind's fixed values, the
        knobs."""
        system = self.system
        names = {f.name for f in dataclasses.fields(system.config_cls) if is_setting(f)}
        shared = {k: v for k, v in settings.values(system.name).items() if k in names}
        return system.config_cls(**shared, **system.evaluation.methods[self.kind], **self.knobs(),
                                 sampling=settings.sampling)


def _canonical_options(spec: str, system: DecodeSystem, kind: str, options: str) -> str:
    """`name=value,...` checked against the kind's knobs (types, bounds), in field order."""
    fields = knobs_of(system, kind)
    values = {}
    for item in filter(None, options.split(",")):
        name, eq, value = item.partition("=")
        if name not in fields or not eq or not value:
            if not fields:
                raise SolmError(f"--method {spec!r}: {kind} methods take no options after "
                                f"the model")
            raise SolmError(f"--method {spec!r}: {item!r} is not NAME=VALUE with NAME one of "
                            f"{', '.join(fields)}")
        values[name] = _parse_knob(spec, system, fields[name], value)
    try:  # each knob in its range, as the decode command checks it (before any model loads)
        check_settings(system.config_cls(**system.evaluation.methods[kind], **values))
    except ValueError as e:
        raise SolmError(f"--method {spec!r}: {e}") from None
    raw = dict(item.split("=", 1) for item in filter(None, options.split(",")))
    return ",".join(f"{n}={raw[n]}" for n in fields if n in raw)


@dataclass
class DecodeSettings:
    """What a run sets for every method alike; the defaults are the declarations'."""

    max_new_tokens: int = field_of(PastaDecodeConfig, "max_new_tokens").default
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    sot_skeleton_tokens: int = field_of(SotConfig, "max_skeleton_tokens").default
    sot_point_tokens: int = field_of(SotConfig, "max_point_tokens").default
    max_fork_tokens: int = field_of(PastaDecodeConfig, "max_fork_tokens").default

    def values(self, system: str) -> dict[str, Any]:
        """The settings as the `system`'s config names them."""
        out = {"max_new_tokens": self.max_new_tokens, "max_fork_tokens": self.max_fork_tokens}
        if system == "sot":
            out.update(max_skeleton_tokens=self.sot_skeleton_tokens,
                       max_point_tokens=self.sot_point_tokens)
        return out


class MethodRunner:
    """One method through its system's runner (`solm.decode.registry`): `decode(record)`
    returns the outputs row (timed fields from the last of `repeats` decodes)."""

    def __init__(self, method: Method, model, tokenizer, settings: DecodeSettings,
                 pool_size: int = 2048, compile: bool = False, engine: dict | None = None):
        """`engine`: engine settings of the method's system beyond the pool and compile
        (the resolved `engine`, its `gguf`); none given: the reference engine, which
        `model` is loaded for."""
        from solm.engines import REFERENCE

        self.method, self.settings, self.tokenizer = method, settings, tokenizer
        self.model = model
        self.system = method.system
        self.config = method.config(settings)
        self.engine_values = {"engine": REFERENCE, **(engine or {})}
        self.engine = self._engine(pool_size=pool_size, compile=compile)
        self.runner = self.system.runner(model, tokenizer, self.config, self.engine, 1, True)

    def _engine(self, **values: Any) -> Any:
        names = {f.name for f in dataclasses.fields(self.system.engine_cls)}
        values = {**values, **self.engine_values}
        return self.system.engine_cls(**{k: v for k, v in values.items() if k in names})

    @property
    def engine_name(self) -> str:
        return getattr(self.engine, "engine", "torch")

    def _job(self, record: Record):
        from solm.decode.jobs import pending_jobs

        (job,), _ = pending_jobs([record], self.tokenizer, set())
        return job

    def _once(self, record: Record) -> dict:
        job = self._job(record)
        done = next(iter(self.runner.run([job])))
        if done.error:
            raise SolmError(f"{self.method.label}: {record.id}: {done.error}")
        return self.system.evaluation.eval_row(self.runner.row(job, done.result))

    def _head(self, record: Record, index: int) -> dict:
        return {"id": record.id, "index": index, "instruction": record.prompt,
                "generator": self.method.label, "kind": self.method.kind,
                "model": self.method.model}

    def warm_up(self) -> None:
        """One short decode, untimed (first-call allocations, graph builds)."""
        self.runner.config = replace(self.config, max_new_tokens=8)
        try:
            self._once(Record("-", "Say hello."))
        finally:
            self.runner.config = self.config

    def decode(self, record: Record, index: int, repeats: int = 1) -> dict:
        for _ in range(max(1, repeats)):
            row = self._once(Record("-", record.prompt, system=record.system))
        return {**self._head(record, index), "repeats": repeats, **row}

    def timed(self, index: dict[str, int], repeats: int) -> "TimedRunner":
        """This method as a protocol runner, one prompt at a time, timed: each job's result
        is its finished outputs row (`index`: a prompt id's place in the evaluation set)."""
        return TimedRunner(self, index, repeats)

    def batched(self, index: dict[str, int], batch_size: int):
        """(a protocol runner decoding many prompts together, the outputs row of a finished
        job): for quality runs. A row's wall time would count its batch mates, so timed
        fields are None and the row says `batched`."""
        engine = self._engine(pool_size=self.engine.pool_size, batch_size=batch_size)
        runner = self.system.runner(self.model, self.tokenizer, self.config, engine,
                                    batch_size, False)

        def row(job, result) -> dict:
            out = self.system.evaluation.eval_row(runner.row(job, result))
            out.update(wall_s=None, prefill_s=None, decode_s=None)
            return {**self._head(job.record, index[job.record.id]), "batched": batch_size,
                    **out}

        return runner, row


class TimedRunner:
    """A method decoding one job at a time (`repeats` decodes, the last one's times kept)."""

    def __init__(self, method: MethodRunner, index: dict[str, int], repeats: int):
        self.method, self.index, self.repeats = method, index, repeats

    def run(self, jobs):
        from solm.decode.protocol import Done

        for job in jobs:
            yield Done(job.rid, self.method.decode(job.record, self.index[job.record.id],
                                                   self.repeats))


def answer_tokens(tokenizer, text: str) -> int:
    """An answer's length: its text tokenized (the count every method's row records as
    `content_tokens`, so lengths and speedups compare across methods)."""
    from solm.core.chat import text_ids

    return len(text_ids(tokenizer, text))


def method_engine(m: Method, settings: DecodeSettings, engine: str, gguf_type: str) -> Any:
    """The method's engine settings with `--engine` resolved for it (`auto`: llama.cpp where
    the method can run there); a system with no engine choice decodes on the reference."""
    from solm.engines import ENGINES, REFERENCE

    system = m.system
    names = {f.name for f in dataclasses.fields(system.engine_cls)}
    if "engine" not in names:
        if engine in ENGINES and engine != REFERENCE:
            raise SolmError(f"--engine {engine}: {m.label} ({m.kind}) decodes on "
                            f"{REFERENCE} only")
        return system.engine_cls()
    out = system.engine_cls(engine=engine, gguf_type=gguf_type)
    system.prepare(m.config(settings), out, m.model)
    return out


def load_runners(methods: list[Method], settings: DecodeSettings | dict[str, DecodeSettings],
                 dtype: str = "auto", device: str | None = None, pool_size: int = 2048,
                 compile: bool = False, engine: str = "torch",
                 gguf_type: str = "q8_0") -> dict[str, MethodRunner]:
    """A runner per method (settings shared, or per label); methods whose systems load a
    model alike on one engine share its weights. `engine`: every method's (`auto`: each
    method's own choice, recorded in its runner's `engine_name`)."""
    loaded: dict[tuple[str, Any, str], tuple] = {}
    engines = {m.label: method_engine(m, settings[m.label] if isinstance(settings, dict)
                                      else settings, engine, gguf_type) for m in methods}
    runners = {}
    for m in methods:
        system = m.system
        chosen = engines[m.label]
        key = (m.model, system.tokens, getattr(chosen, "engine", "torch"))
        if key not in loaded:
            # what loading found or wrote for the engine (the GGUF, the ONNX graph), for
            # every method that shares these weights
            loaded[key] = (system.load(m.model, chosen, dtype, device),
                           {name: getattr(chosen, name, None) for name in ("gguf", "onnx")})
        (model, tok), files = loaded[key]
        own = settings[m.label] if isinstance(settings, dict) else settings
        values = ({"engine": chosen.engine, "gguf_type": chosen.gguf_type,
                   "onnx_type": chosen.onnx_type, **files}
                  if hasattr(chosen, "engine") else {})
        runners[m.label] = MethodRunner(m, model, tok, own, pool_size, compile, values)
    return runners


def default_repeats(device: torch.device | str) -> int:
    """Decode each request twice and time the second on GPUs (as the thesis does); on a CPU
    one decode after the runner's warm-up is already steady."""
    return 2 if torch.device(device).type == "cuda" else 1
