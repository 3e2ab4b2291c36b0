"""The engines solm decodes on, by name: one folder per engine (`solm.engines.torch`,
`solm.engines.llamacpp`, `solm.engines.onnxruntime`), each an `Engine` saying whether it runs here, which decodes it refuses
and why, and how it times a pass. `--engine` choices and `auto` read this registry."""

from __future__ import annotations

from solm.core.errors import SolmError, look_up
from solm.engines.base import Engine
from solm.engines.llamacpp.engine import LlamaCppEngine
from solm.engines.onnxruntime.engine import OnnxRuntimeEngine
from solm.engines.torch.engine import TorchEngine

# in `auto`'s order of preference where nothing is measured here: the first that runs here
# and takes the decode. The order is what every CPU measured so far agrees on (llama.cpp's
# one-token pass 4-7x torch's, onnxruntime's k-token pass 4-5x torch's; docs: engines);
# torch, the reference, takes every decode, so it is the last resort, never the default
ENGINES: dict[str, Engine] = {e.name: e for e in (LlamaCppEngine(), OnnxRuntimeEngine(),
                                                  TorchEngine())}
REFERENCE = next(e.name for e in ENGINES.values() if e.reference)
AUTO = "auto"
ENGINE_CHOICES = (*ENGINES, AUTO)
ENGINE_HELP = ("Decoding engine: torch (solm's own runtime, the reference), llama.cpp (the "
               "model exported to a GGUF in solm's cache on first use, decoded by "
               "llama-cpp-python: faster on a CPU), onnxruntime (the model written as an ONNX "
               "graph in solm's cache on first use, taking each pass's attention mask: every "
               "system and layout), auto (of the engines installed and able "
               "to run this decode, the fastest `solm bench step` measured on this CPU for "
               "the model's tokens per pass; unmeasured: llama.cpp, else onnxruntime, else torch). Greedy answers agree up to near-ties on an f32 "
               "export; other types round the logits (`solm check-engines` measures it).")


def get_engine(name: str) -> Engine:
    return look_up(ENGINES, name, "engine")


def engine_names() -> list[str]:
    return list(ENGINES)


def applies(engine: str, setting: str) -> bool:
    """Whether the engine named `engine` reads `setting`: its own settings, and those no
    engine claims (`Engine.own_settings`); `auto` may choose any engine, so all apply."""
    if engine not in ENGINES:
        return True
    owned = any(setting in e.own_settings for e in ENGINES.values())
    return not owned or setting in ENGINES[engine].own_settings


def owners(setting: str) -> list[str]:
    """The engines that read `setting` (every engine when none claims it)."""
    return [n for n, e in ENGINES.items() if applies(n, setting)]


def engine_note(engine: str) -> str:
    """", <engine>" beside a description, or nothing for the reference engine."""
    return "" if ENGINES[engine].reference else f", {engine}"


def recorded_choice(choice: str, **settings) -> dict:
    """What a job's manifest records of its `--engine choice` and the engine `settings`:
    nothing for the reference (manifests written before engines were a choice stay valid)."""
    return {} if choice in ENGINES and ENGINES[choice].reference else \
        {"engine": choice, **settings}


def load_on_engine(model: str, settings, dtype: str, device: str | None, system: str,
                   num_registers: int = 16):
    """(model, tokenizer) for a decode of `system` on the engine `settings.engine` names."""
    return get_engine(settings.engine).load(model, settings, dtype, device, system,
                                            num_registers)


def choose(choice: str, system: str, **facts) -> str:
    """The engine `--engine choice` runs this decode of `system` on (`facts`: what
    `Engine.refusal` reads). An explicit engine that cannot run here or refuses the decode
    is a one-line error; `auto` takes, of the engines that can, the fastest measured on
    this CPU for this model (`solm.engines.cost`), else the first in `ENGINES`' order, and
    says why."""
    from solm.core.notices import notice

    if choice not in ENGINE_CHOICES:
        raise SolmError(f"--engine must be one of {', '.join(ENGINE_CHOICES)}, got {choice!r}")
    if choice != AUTO:
        engine = ENGINES[choice]
        missing = engine.unavailable()
        if missing:
            raise SolmError(f"--engine {choice}: {missing}; {engine.install_hint()}")
        why = engine.refusal(system, **facts)
        if why:
            raise SolmError(f"--engine {choice}: {why}")
        engine.settle(facts.get("settings"), facts.get("model"), system)
        return choice
    passed, able = [], []  # passed: the engines ranked above the first able one, and why
    for name, engine in ENGINES.items():
        missing = engine.unavailable()
        why = None if missing else engine.refusal(system, **facts)
        if missing is None and why is None:
            able.append(name)
        elif not able:
            passed.append(missing or f"{name} cannot run this decode ({why})")
    if not able:
        raise SolmError("--engine auto: no engine can run this decode (" + "; ".join(passed)
                        + ")")
    from solm.engines.cost import fastest

    measured = fastest({name: ENGINES[name] for name in able}, facts.get("model"), system,
                       facts.get("config"), facts.get("settings"))
    chosen = measured[0] if measured is not None else able[0]
    if measured is not None:
        notice(f"--engine auto: {measured[0]}, the fastest {measured[1]}")
    else:
        notice(f"--engine auto: {able[0]}" + (f", since {'; '.join(passed)}" if passed else
                                              " (installed, and able to run this decode)"))
    ENGINES[chosen].settle(facts.get("settings"), facts.get("model"), system)
    return chosen
