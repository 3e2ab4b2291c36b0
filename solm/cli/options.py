"""Typer options generated from a settings dataclass (`solm.core.settings.setting` fields)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from pathlib import Path
from typing import Any, Callable, Optional, Union

import typer

from solm.cli.console import console, handle_errors, info, out_console
from solm.cli.flags import loads_models, ConfigOption, DebugOption, QuietOption
from solm.cli.setting_options import option_for
from solm.core.settings import cli_name, is_setting


def _plain(annotation: Any) -> Any:
    """`X | None` -> `Optional[X]` (what typer's option parser understands)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return Optional[args[0]]
    return annotation


def config_parameters(cls: type, defaults: dict[str, Any] | None = None,
                      only: typing.Iterable[str] | None = None,
                      from_model: typing.Iterable[str] = (),
                      why: dict[str, str] | None = None) -> list[inspect.Parameter]:
    """One keyword parameter (a typer Option) per setting of the dataclass `cls`.

    `defaults`: a command's own defaults over the fields' (by field name); `only`: these
    fields alone; `from_model`: fields whose option defaults to None (not given), because a
    model's generation_config.json may set them (`solm.core.generation`)."""
    hints = typing.get_type_hints(cls)
    defaults = defaults or {}
    from_model = set(from_model)
    params = []
    for f in dataclasses.fields(cls):
        if not is_setting(f) or (only is not None and f.name not in only):
            continue
        annotation = _plain(hints[f.name])
        if f.name in from_model:
            annotation = Optional[annotation]
        option = option_for(f, defaults.get(f.name, dataclasses.MISSING),
                            from_model=f.name in from_model, why=(why or {}).get(f.name, ""))
        params.append(inspect.Parameter(cli_name(f), inspect.Parameter.KEYWORD_ONLY,
                                        default=option, annotation=annotation))
    required_first = sorted(params, key=lambda p: p.default.default is not ...)
    return required_first


def config_from_options(cls: type, values: dict[str, Any], **fixed: Any) -> Any:
    """Build `cls` from parsed option values (by option name) plus fields set in code."""
    kwargs = {f.name: values[cli_name(f)] for f in dataclasses.fields(cls) if is_setting(f)}
    return cls(**kwargs, **fixed)


def with_parameters(fn: Callable, params: list[inspect.Parameter]) -> Callable:
    """Give `fn(**values)` the signature typer reads: `params` first, then fn's own."""
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(fn).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    fn.__signature__ = inspect.Signature(params + own)
    fn.__annotations__ = {p.name: p.annotation for p in params + own}
    return fn


def settings_options(*classes: type) -> Callable[[Callable], Callable]:
    """Give a command the options of these settings classes as keyword values it takes in
    `**options` (declared once, in the classes); `SamplingConfig`'s settings but the seed
    default to the model's generation_config.json."""
    from solm.core.generation import MODEL_SETTINGS
    from solm.core.sampling import SamplingConfig

    def wrap(fn: Callable) -> Callable:
        params = [p for cls in classes for p in config_parameters(
            cls, from_model=MODEL_SETTINGS if cls is SamplingConfig else ())]
        return with_parameters(fn, params)

    return wrap


def sampling_options(fn: Callable) -> Callable:
    """`settings_options(SamplingConfig)`: the sampling options, in `**sampling`."""
    from solm.core.sampling import SamplingConfig

    return settings_options(SamplingConfig)(fn)


def llm_options(fn: Callable) -> Callable:
    """Give an annotation command the LLM annotator's options (`LLMAnnotatorSettings`'
    fields) as keyword values it takes in `**llm`."""
    from solm.annotate.llm_job import LLMAnnotatorSettings

    return with_parameters(loads_models(fn), config_parameters(LLMAnnotatorSettings))


def without_seed(sampling: dict[str, Any]) -> dict[str, Any]:
    """The sampling values a model may set (for `resolve_decode`'s flags)."""
    from solm.core.generation import MODEL_SETTINGS

    return {k: sampling[k] for k in MODEL_SETTINGS}


def train_command(app: typer.Typer, name: str, help: str, config_cls: type,
                  trainer_path: str, describe: Callable[[Any, Any], str]) -> None:
    """Register `name` on `app`: options from `config_cls`, the trainer (a
    "module:Class" path, imported when the command runs) checked before anything loads,
    trained, and its summary printed as JSON."""
    def command(config: Optional[Path] = ConfigOption, quiet: bool = QuietOption,
                debug: bool = DebugOption, **options) -> None:
        import importlib

        module, _, cls_name = trainer_path.partition(":")
        trainer_cls = getattr(importlib.import_module(module), cls_name)
        cfg = config_from_options(config_cls, options, quiet=quiet)
        trainer = trainer_cls(cfg)
        trainer.check()  # refused settings and paths before anything is printed or loaded
        for notice in trainer.notices:
            console.print(f"[yellow]warning:[/] {notice}")
        info(describe(trainer, cfg))
        meta = trainer.train()
        if meta:
            out_console.print_json(json.dumps({"out": cfg.out, "system": meta["system"],
                                               "format": meta["format"], **meta["data"],
                                               **meta["results"]}))

    command.__name__ = name.replace("-", "_")
    app.command(name=name, help=help)(handle_errors(loads_models(with_parameters(
        command, config_parameters(config_cls)))))
