"""A system's decode side: what a decode command, an evaluation method or a server needs to
know about it, attached to its entry in the one registry of systems (`solm.core.systems`).

Adding a system's decode side is one config (`setting()` fields), one runtime speaking the
protocol (`solm.decode.protocol`), and one `register_system(DecodeSystem(...))` in the module
its registry entry names (`decode_module`); `decode_command` then makes its CLI command from
the entry alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from solm.core.settings import is_setting, setting
from solm.engines import ENGINE_CHOICES, ENGINE_HELP
from solm.engines.llamacpp.model import GGUF_TYPE_HELP
from solm.engines.llamacpp.export import OUTTYPES
from solm.engines.onnxruntime.engine import ONNX_TYPE_HELP
from solm.engines.onnxruntime.graph import FORMATS as ONNX_FORMATS

COMPILE_HELP = ("Run decode steps as graphs compiled per shape bucket (torch.compile; cached "
                "on disk). Default: on for CUDA, and on a CPU for jobs long enough to repay the "
                "compilation (docs: guides/engines.md, \"Fast decode step\").")
QUANTIZE_HELP = ("Weight-only quantization for decoding (torchao): int8 (CPU, CUDA) or int4 "
                 "(CUDA). Outputs agree with the full-precision model, they are not equal to "
                 "it.")


@dataclass
class EngineSettings:
    """How a system's runtime is built (not what a row means, unless named in
    `DecodeSystem.row_engine_settings`); a system's own engine settings extend these."""


@dataclass
class CompiledEngine(EngineSettings):
    compile: Optional[bool] = setting(None, COMPILE_HELP, flags=("--compile/--no-compile",))
    quantize: Optional[str] = setting(None, QUANTIZE_HELP, choices=("int8", "int4"))


@dataclass
class EngineChoice(EngineSettings):
    """A system that decodes on any engine of `solm.engines`."""

    engine: str = setting("auto", ENGINE_HELP, choices=ENGINE_CHOICES)
    gguf_type: str = setting("q8_0", GGUF_TYPE_HELP, choices=OUTTYPES)
    gguf: Optional[str] = None  # the llama.cpp engine's GGUF, found or exported at load
    onnx_type: str = setting("q8", ONNX_TYPE_HELP, choices=ONNX_FORMATS)
    onnx: Optional[str] = None  # the onnxruntime engine's graph, found or written at load


@dataclass(frozen=True)
class Display:
    """How a decode command shows a system's work.

    `describe(runner)`: what the progress bar says it does; `status(summary, row)`: the bar's
    status after a row; `report(rows, summary, runner, engine)`: extra figures for the
    manifest and the printed summary; `shown_rows`: the last rows printed after a file decode
    (0: none), each as `row_text(row)` and `row_figures(row)`; `answer(runner, job, engine)`
    -> (answer text, lines of figures) for a single prompt (default: the row's text and
    figures)."""

    describe: Callable[[Any], str] = lambda runner: "decoding"
    status: Callable[[Any, dict], Optional[str]] = lambda summary, row: None
    report: Callable[[list, Any, Any, Any], dict] = lambda rows, summary, runner, engine: {}
    shown_rows: int = 2
    row_text: Callable[[dict], str] = lambda row: row.get("response", "")
    row_figures: Callable[[dict], str] = lambda row: ""
    answer: Optional[Callable[[Any, Any, Any], tuple[str, list[str]]]] = None


@dataclass(frozen=True)
class EvalKinds:
    """The `pasta eval run` method kinds a system decodes: kind -> the config values the kind
    fixes, and the outputs row of a method from a decode row."""

    methods: dict[str, dict] = dataclasses.field(default_factory=dict)
    eval_row: Callable[[dict], dict] = lambda row: {"output": row.get("response", "")}


@dataclass(frozen=True)
class DecodeSystem:
    """A system's decode side, attached to its entry in the one registry of systems
    (`solm.core.systems`): what a decode command, an evaluation method or the server runs.

    - `config_cls`: its decode settings (a dataclass of `setting()` fields, a `sampling`
      field of `SamplingConfig`); `sampling`: the sampling settings its runtime honours.
    - `engine_cls`: the settings that shape its runtime (`EngineSettings`).
    - `load(model, engine, dtype, device)` -> (model, tokenizer);
      `runner(model, tokenizer, config, engine, prompts, single)` -> a runner
      (`prompts`: how many prompts this process decodes; `single`: one prompt given on the
      command line); `prepare(config, engine, model)` checks the settings together and fills
      what depends on the model, before anything loads.
    - `summary_cls`: its `DecodeSummary`; `per_sample`: rows keyed by (id, sample), K of
      them per prompt (`samples(engine)`).
    - rows: `row_engine_settings` (engine settings a row depends on) and `row_excluded`
      (config settings that do not change a row).
    - `command_defaults`: the one place where its commands' (decode, serve) defaults differ
      from its configs' fields, by field name, each with its reason in
      `command_default_reasons` (shown in the option's help).
    - `check_record(record)`: refuses a prompt row the system cannot use (a DataError
      naming its file, line and field), before anything loads.
    - `display` (how commands show it) and `evaluation` (its `pasta eval run` kinds).
    """

    name: str
    help: str
    config_cls: type
    engine_cls: type
    load: Callable[..., tuple[Any, Any]]
    runner: Callable[..., Any]
    summary_cls: type
    sampling: tuple[str, ...] = ("temperature", "top_p", "seed", "repetition_penalty",
                                 "no_repeat_ngram")
    per_sample: bool = False
    samples: Callable[[Any], int] = lambda engine: 1
    prepare: Callable[[Any, Any, str], None] = lambda config, engine, model: None
    row_engine_settings: tuple[str, ...] = ()
    row_excluded: tuple[str, ...] = ()
    command_defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    command_default_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    demo_prompts: Optional[Path] = None
    check_record: Callable[[Any], None] = lambda record: None  # a bad row: a DataError
    default_out: str = "runs/decode.jsonl"
    display: Display = Display()
    evaluation: EvalKinds = EvalKinds()

    def __post_init__(self) -> None:
        if set(self.command_defaults) != set(self.command_default_reasons):
            raise ValueError(f"decode system {self.name!r}: every command default needs its "
                             f"reason (command_default_reasons)")

    @property
    def tokens(self) -> str:
        """The control tokens its models carry (systems alike share weights)."""
        from solm.core.systems import get_system as system_entry

        return system_entry(self.name).token_system

    def answer_one(self, runner: Any, job: Any, engine: Any) -> tuple[str, list[str]]:
        """Decode one prompt: its answer text and lines of figures."""
        if self.display.answer is not None:
            return self.display.answer(runner, job, engine)
        done = next(iter(runner.run([job])))
        if done.error:
            from solm.core.errors import SolmError

            raise SolmError(done.error)
        row = runner.row(job, done.result)
        return self.display.row_text(row), [self.display.row_figures(row)]

    def row_settings(self, config: Any, engine: Any, model: str, dtype: str) -> dict:
        """What the rows of a decode depend on: the config's settings (sampling flattened,
        only what the runtime honours), the engine settings that change rows, model, dtype.
        A rerun with other values is refused (`check_rerun_settings`)."""
        out: dict[str, Any] = {"model": model}
        for f in dataclasses.fields(config):
            if is_setting(f) and f.name not in self.row_excluded:
                out[f.name] = getattr(config, f.name)
        for name in self.sampling:
            out[name] = getattr(config.sampling, name)
        from solm.engines import REFERENCE, applies

        name_of = getattr(engine, "engine", REFERENCE)
        for name in self.row_engine_settings:
            # each engine's own settings: another engine's do not change rows
            out[name] = getattr(engine, name) if applies(name_of, name) else None
        out["dtype"] = dtype if applies(name_of, "dtype") else None
        return out


def register_system(system: DecodeSystem) -> DecodeSystem:
    """Attach a decode side to its system's entry in `solm.core.systems` (the system must be
    registered there first: its tokens and structure)."""
    from solm.core.systems import attach_decoder

    attach_decoder(system.name, system)
    return system


def _with_decoder(entry):
    """A registry entry once its decode module is imported (which attaches its decoder)."""
    import importlib

    from solm.core.systems import SYSTEMS

    if entry.decoder is None and entry.decode_module:
        importlib.import_module(entry.decode_module)
        return SYSTEMS[entry.name]
    return entry


def decode_system(name: str) -> DecodeSystem:
    """A system's decode side, its module imported on first use."""
    from solm.core.systems import SYSTEMS

    entry = SYSTEMS.get(name)
    decoder = _with_decoder(entry).decoder if entry is not None else None
    if decoder is None:
        have = ", ".join(sorted(decode_systems()))
        raise KeyError(f"no decode system {name!r} (have {have})")
    return decoder


def decode_systems() -> dict[str, DecodeSystem]:
    """Every system that decodes, by name (their decode modules imported)."""
    from solm.core.systems import SYSTEMS

    entries = [_with_decoder(e) for e in list(SYSTEMS.values())]
    return {e.name: e.decoder for e in entries if e.decoder is not None}


def method_kinds() -> dict[str, DecodeSystem]:
    """Every `pasta eval run` method kind -> the system that decodes it."""
    return {kind: system for system in decode_systems().values()
            for kind in system.evaluation.methods}
