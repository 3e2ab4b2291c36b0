"""The options many commands share (model, dtype, device, --config, sharding, sampling, the LLM
annotators'), declared once."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path
from typing import Any, Callable

import typer
import yaml

from solm.cli.checks import check_device, one_of
from solm.cli.console import out_console
from solm.core.models import DEFAULT_MODEL
from solm.cli.setting_options import setting_option
from solm.core.sampling import SamplingConfig


def _load_config(ctx: typer.Context, param, value: Path | None) -> Path | None:
    """Eager callback: the YAML file's keys become the command's defaults (flags override)."""
    if value is None:
        return None
    path = Path(value)
    if not path.exists():
        raise typer.BadParameter(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or type(e).__name__
        raise typer.BadParameter(f"{where}: invalid YAML: {problem}")
    except (UnicodeDecodeError, OSError) as e:
        raise typer.BadParameter(f"{path}: cannot read it as text ({type(e).__name__})")
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path}: expected a mapping of option names to values")
    known = {p.name for p in ctx.command.params}
    defaults = {}
    for key, v in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise typer.BadParameter(f"{path}: unknown option '{key}' for this command "
                                     f"(known: {', '.join(sorted(known - {'config'}))})")
        defaults[name] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


ConfigOption = typer.Option(
    None, "--config", help="YAML file whose keys are this command's options; flags override it.",
    callback=_load_config, is_eager=True, exists=False)


QuietOption = typer.Option(False, "--quiet", "-q", help="No progress bars or chatter.")


def _trust_remote_code(value: bool) -> bool:
    from solm.core.models import set_trust_remote_code

    set_trust_remote_code(value)
    return value


TrustRemoteCodeOption = typer.Option(
    False, "--trust-remote-code", callback=_trust_remote_code,
    help="Run the modeling code a model ships (an `auto_map` in its config.json, e.g. "
         "Dream-7B); without it such a model is refused. Read that code first.")


def refuse_other_engines_settings(values: dict) -> None:
    """An engine's own setting (`--gguf-type`, `--onnx-type`) given to a command whose
    `--engine` does not read it would be ignored: refused (docs: options that do not apply
    are refused). Under `auto` it applies when an engine that reads it is chosen. torch's
    own settings (--dtype, ...) are left alone: other engines load from them."""
    from solm.cli.errors import current_context, given_explicitly
    from solm.engines import ENGINES, applies, owners

    ctx = current_context()
    if ctx is None:
        return
    engine = values.get("engine")
    chosen = engine if isinstance(engine, (list, tuple)) else [engine]  # `tip bench`: a list
    for name in sorted({s for e in ENGINES.values() if not e.reference
                        for s in e.own_settings}):
        if (name not in ctx.params or any(applies(e, name) for e in chosen)
                or not given_explicitly(ctx, name)):
            continue
        readers = " or ".join(owners(name))
        raise typer.BadParameter(f"applies to the {readers} engine only; this command runs "
                                 f"on --engine {','.join(chosen)} (choose --engine {readers} "
                                 f"or auto)", param_hint="--" + name.replace("_", "-"))


def loads_models(fn: Callable) -> Callable:
    """A command that loads a model gets `--trust-remote-code` (declared here, once), placed
    before its --config; the option's callback sets it for the loaders, so the command's own
    code never sees it."""
    params = list(inspect.signature(fn).parameters.values())
    trust = inspect.Parameter("trust_remote_code", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=TrustRemoteCodeOption, annotation="bool")
    at = next((i for i, p in enumerate(params)
               if p.name == "config" or p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
    if params and params[at - 1].kind is inspect.Parameter.KEYWORD_ONLY:
        trust = trust.replace(kind=inspect.Parameter.KEYWORD_ONLY)

    @functools.wraps(fn)
    def command(*args, **kwargs):
        kwargs.pop("trust_remote_code", None)
        refuse_other_engines_settings(kwargs)
        return fn(*args, **kwargs)

    command.__signature__ = inspect.Signature(params[:at] + [trust] + params[at:])
    command.__annotations__ = {**fn.__annotations__, "trust_remote_code": "bool"}
    return command


def model_command(fn: Callable) -> Callable:
    """`handle_errors` and `loads_models` together: a command that loads a model."""
    from solm.cli.console import handle_errors

    return handle_errors(loads_models(fn))


def out_option(default: Any, help: str, flag: str = "--out") -> Any:
    """A command's output path (`-o`), declared alike by every command."""
    return typer.Option(default, flag, "-o", help=help)


def model_option(default: Any, help: str) -> Any:
    """The model a command reads (`-m`), declared alike by every command."""
    return typer.Option(default, "--model", "-m", help=help)


ModelOption = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Alias (`solm models`), Hugging "
                           "Face folder or hub id, or .gguf file.")


DebugOption = typer.Option(False, "--debug", help="Show full tracebacks on errors.")


# the sampling settings, from `SamplingConfig`'s fields; all but the seed default to the
# model's generation_config.json (solm.core.generation)
SeedOption = setting_option(SamplingConfig, "seed")
TemperatureOption = setting_option(SamplingConfig, "temperature", from_model=True)
TopPOption = setting_option(SamplingConfig, "top_p", from_model=True)
RepetitionPenaltyOption = setting_option(SamplingConfig, "repetition_penalty", from_model=True)
NoRepeatNgramOption = setting_option(SamplingConfig, "no_repeat_ngram", from_model=True)


def decode_flags(temperature: float | None, top_p: float | None,
                 repetition_penalty: float | None, no_repeat_ngram: int | None) -> dict:
    """The decode flags `solm.core.generation.resolve_decode` reads (None: not given)."""
    return {"temperature": temperature, "top_p": top_p,
            "repetition_penalty": repetition_penalty, "no_repeat_ngram": no_repeat_ngram}


ForceOption = typer.Option(False, "--force", help="Append to an output whose rows were made "
                           "with other settings (the manifest then says mixed_settings).")


ShardOption = typer.Option(
    None, "--shard", help="K/N: only the prompts at positions K, K+N, K+2N, ... (after "
    "--limit), written beside the output as NAME.shard-K-of-N.jsonl (a folder output: "
    "OUT/shard-K-of-N/); `auto` takes K and N from the RANK / WORLD_SIZE of accelerate launch "
    "or torchrun (and each process its own GPU). `solm merge` joins the shards by id.")


DedupeOption = typer.Option(False, "--dedupe", help="Keep only the first row of each repeated "
                            "id (counted), instead of refusing the file.")


SplitOption = typer.Option("train", help="Split, for hub datasets.")


DtypeOption = typer.Option("auto", callback=one_of("auto", "fp32", "bf16", "fp16"),
                           help="auto (bf16 where the device computes it fast, else fp32), "
                                "fp32, bf16, fp16.")


def _compiled_engine_option(name: str) -> Any:
    from solm.cli.setting_options import setting_option
    from solm.decode.registry import CompiledEngine

    return setting_option(CompiledEngine, name)


# the engine settings commands outside the decode registry take (declared on CompiledEngine)
CompileOption = _compiled_engine_option("compile")
QuantizeOption = _compiled_engine_option("quantize")


DeviceOption = typer.Option(None, callback=check_device, help="cpu, cuda, cuda:N or mps "
                            "(default: cuda when available, else cpu).")


def _print_version(value: bool) -> None:
    if value:
        from solm import __version__
        out_console.print(f"solm {__version__}")
        raise typer.Exit()


VersionOption = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                             help="Print solm's version and exit.")


def engine_option(default: Any = dataclasses.MISSING, also: str = "",
                  callback: Callable | None = None, why: str = ""):
    """`--engine` as `EngineChoice` declares it, with what it means for this command in
    `also` (a command's own default needs `why`; `callback` replaces the choice check)."""
    from solm.cli.setting_options import setting_option
    from solm.decode.registry import EngineChoice

    option = setting_option(EngineChoice, "engine", default,
                            help_suffix=" " + also if also else "", why=why)
    if callback is not None:
        option.callback = callback
    return option


def gguf_type_option():
    """`--gguf-type` as `EngineChoice` declares it."""
    from solm.cli.setting_options import setting_option
    from solm.decode.registry import EngineChoice

    return setting_option(EngineChoice, "gguf_type")
