"""Each decode and engine setting is declared once: every command's option named after a decode
setting or an engine setting takes its default, bounds and help from a `setting()` field of a
config (the decode configs, an engine's settings, or a trainer's config), never from a
typer.Option written by hand in `solm/cli`; a command whose default differs from the
declaration's says so, with its reason, in the help (`why=`). The commands are walked from
the app, so a new command is checked the day it lands."""

from __future__ import annotations

import dataclasses

from typer.main import get_command

from cli_walk import commands as _commands
from solm.core.sampling import SamplingConfig
from solm.core.settings import cli_name, is_setting
from solm.decode.pasta.config import PastaDecodeConfig
from solm.decode.pdiff.config import PdiffDecodeConfig
from solm.decode.registry import decode_systems
from solm.decode.sot.runtime import SotConfig
from solm.decode.tip.config import TipDecodeConfig
from solm.train.base import TrainConfig

DECODE_CONFIGS = (SamplingConfig, PastaDecodeConfig, TipDecodeConfig, PdiffDecodeConfig,
                  SotConfig)
# the batch a runtime is filled with shapes the run, not what a row holds: commands size it
# for their own work (a quality run, a server, preference sampling)
SHAPE = {"batch_size"}


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _fields(classes):
    for cls in classes:
        for f in dataclasses.fields(cls):
            if is_setting(f):
                yield cli_name(f), f


def declared():
    """option name -> every setting field that may stand behind it."""
    import solm.train.bonbon, solm.train.grpo, solm.train.pdiff_sft, solm.train.sft  # noqa
    import solm.train.tip_sft  # noqa: F401

    classes = [*DECODE_CONFIGS, *(s.engine_cls for s in decode_systems().values()),
               *_subclasses(TrainConfig)]
    out: dict[str, list] = {}
    for name, f in _fields(classes):
        out.setdefault(name, []).append(f)
    return out


def _engine_classes():
    return [s.engine_cls for s in decode_systems().values()]


DECODE_NAMES = {name for name, _ in _fields([*DECODE_CONFIGS, *_engine_classes()])} - SHAPE
# commands that decode nothing, whose options only share a name with a decode setting (the
# judge's answer mode, an annotator's subset seed)
NOT_DECODING = {("judge", "mode"), ("pasta", "judge", "mode"), ("pasta", "annotate", "seed"),
                ("tip", "annotate", "seed"),
                # the engine checked against the reference: a choice among the others
                ("check-engines", "engine"), ("check-engines", "gguf_type"),
                ("check-engines", "onnx_type"),
                # how many answers preference sampling draws per prompt
                ("pasta", "prefs", "samples"),
                # how many registers an annotator assigns or a tokenizer gets: data, no model
                ("tip", "annotate", "registers"), ("tip", "traces", "registers"),
                ("tip", "tokens", "registers"),
                # the seed a task's problems are generated from: data, no model
                ("data", "make", "seed")}




def _bounds(param) -> tuple:
    return (getattr(param, "min", None), getattr(param, "max", None))


def _own_default_said(param, f: dataclasses.Field) -> bool:
    """The option's default is the declaration's, or None where a model's
    generation_config.json supplies it, or it differs and the help gives the reason."""
    if param.default is None or param.default == f.default:
        return True
    return f" Default here: {param.default}, " in (param.help or "")


def _matches(param, f: dataclasses.Field) -> bool:
    """The option's help starts with the field's; its default is the field's or a stated
    own one; its bounds are the field's, or, for a range open at its lower end (which the
    parser cannot show), none in the parser and the range in words at the end of the help."""
    from solm.core.settings import rule_text

    m = f.metadata
    help_text = param.help or ""
    if not _own_default_said(param, f):
        return False
    if m.get("above") is not None:
        return (help_text.startswith(m["help"]) and _bounds(param) == (None, None)
                and help_text.endswith(f" Must be {rule_text(f)}."))
    return (help_text.startswith(m["help"])
            and _bounds(param) == (m.get("min"), m.get("max")))


def test_every_decode_option_comes_from_a_setting_field():
    fields = declared()
    wrong, seen = [], 0
    for path, cmd in _commands():
        for p in cmd.params:
            if not p.opts or not p.opts[0].startswith("--") or p.name not in DECODE_NAMES:
                continue
            if (p.help or "").startswith("LLM:") or (*path, p.name) in NOT_DECODING:
                continue
            seen += 1
            if not any(_matches(p, f) for f in fields.get(p.name, [])):
                wrong.append(f"{' '.join(path)} --{p.name.replace('_', '-')}: {p.help!r} "
                             f"{_bounds(p)}")
    assert seen > 40
    assert not wrong, "declared by hand:\n" + "\n".join(wrong)


def test_the_check_sees_a_hand_declared_option():
    """The oracle itself: an option whose help or bounds differ from its field is caught."""
    import typer

    bad = typer.Typer()

    @bad.command()
    def decode(max_new_tokens: int = typer.Option(512, min=8, help="Cap."),
               temperature: float = typer.Option(0.0, min=0.0, max=2.0,
                                                 help="Sampling temperature; 0 = greedy.")):
        pass

    @bad.command()
    def other(seed: int = typer.Option(0)):
        pass

    @bad.command()
    def again(pool_size: int = typer.Option(4096, min=2, help=dataclasses.fields(
                  _pasta_engine())[[f.name for f in dataclasses.fields(_pasta_engine())]
                                   .index("pool_size")].metadata["help"])):
        pass

    fields = declared()
    cmd = get_command(bad).commands["decode"]
    by_name = {p.name: p for p in cmd.params}
    assert not any(_matches(by_name["max_new_tokens"], f) for f in fields["max_new_tokens"])
    assert any(_matches(by_name["temperature"], f) for f in fields["temperature"])
    # a second declaration: the field's help and bounds, another default, no reason
    second = get_command(bad).commands["again"].params[0]
    assert not any(_matches(second, f) for f in fields["pool_size"])


def _pasta_engine():
    from solm.decode.pasta.system import PastaEngine

    return PastaEngine


def test_a_command_default_needs_its_reason():
    """Declaring a command's own default without a reason fails where it is declared."""
    import pytest

    from solm.cli.setting_options import setting_option

    with pytest.raises(ValueError, match="needs its reason"):
        setting_option(_pasta_engine(), "pool_size", 4096)
    option = setting_option(_pasta_engine(), "pool_size", 4096, why="a whole answer fits")
    assert option.help.endswith(" Default here: 4096, a whole answer fits.")


def _rule_admits(meta: dict, value) -> bool:
    """The declaration's rule written a second way: inclusive min/max, exclusive above."""
    if meta.get("min") is not None and value < meta["min"]:
        return False
    if meta.get("above") is not None and value <= meta["above"]:
        return False
    return meta.get("max") is None or value <= meta["max"]


def test_server_request_fields_take_their_settings_rules():
    """Every request field of `solm serve` named after a sampling or decode setting accepts
    and refuses exactly what the setting declares (values at, inside and past each bound;
    each choice and one that is not)."""
    import pydantic

    from solm.serve.openai_schema import SolmFields

    declared_here = {f.name: (cls, f.metadata) for cls in (SamplingConfig, PastaDecodeConfig)
                     for f in dataclasses.fields(cls) if is_setting(f)}
    checked = 0
    for name in SolmFields.model_fields:
        if name not in declared_here:
            continue
        checked += 1
        _, meta = declared_here[name]
        if meta.get("choices"):
            probes = [*meta["choices"], "none-of-these"]
            admits = {v: v in meta["choices"] for v in probes}
        else:
            edges = [meta[k] for k in ("min", "max", "above") if meta.get(k) is not None]
            probes = sorted({v for e in edges for v in (e - 1, e, e + 1)} | {e + 0.5 for e in edges})
            if isinstance(meta.get("min", meta.get("above")), int):  # an integer setting
                probes = [int(v) for v in probes if float(v).is_integer()]
            admits = {v: _rule_admits(meta, v) for v in probes}
        for value, ok in admits.items():
            try:
                SolmFields(model="m", **{name: value})
                accepted = True
            except pydantic.ValidationError:
                accepted = False
            assert accepted == ok, (name, value, meta)
    assert checked >= 7  # temperature, top_p, seed, repetition_penalty, no_repeat_ngram, mode, penalize
