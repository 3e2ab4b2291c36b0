"""The engines solm decodes on, by name: one module per engine (`torch_engine`,
`llamacpp_engine`), each an `Engine` saying whether it runs here, which decodes it refuses
and why, and how it times a pass. `--engine` choices and `auto` read this registry."""

from __future__ import annotations

from solm.core.errors import SolmError
from solm.engines.base import Engine
from solm.engines.llamacpp_engine import LlamaCppEngine
from solm.engines.torch_engine import TorchEngine

# in `auto`'s order of preference: the first that runs here and takes the decode (torch,
# the reference, takes every decode)
ENGINES: dict[str, Engine] = {e.name: e for e in (LlamaCppEngine(), TorchEngine())}
AUTO = "auto"
ENGINE_CHOICES = (*ENGINES, AUTO)
ENGINE_HELP = ("Decoding engine: torch (solm's own runtime, the reference), llama.cpp (the "
               "model exported to a GGUF in solm's cache on first use, decoded by "
               "llama-cpp-python: faster on a CPU), auto (llama.cpp when installed and able "
               "to run this decode, else torch). Greedy answers agree up to near-ties on an f32 "
               "export; other types round the logits (`solm check-engines` measures it).")


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise SolmError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}") \
            from None


def engine_names() -> list[str]:
    return list(ENGINES)


def choose(choice: str, system: str, **facts) -> str:
    """The engine `--engine choice` runs this decode of `system` on (`facts`: what
    `Engine.refusal` reads). An explicit engine that cannot run here or refuses the decode
    is a one-line error; `auto` takes the first engine of `ENGINES` that can, and says why
    it passed over the others."""
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
        return choice
    passed = []
    for name, engine in ENGINES.items():
        missing = engine.unavailable()
        why = None if missing else engine.refusal(system, **facts)
        if missing is None and why is None:
            notice(f"--engine auto: {name}" + (f", since {'; '.join(passed)}" if passed else
                                                " (installed, and able to run this decode)"))
            return name
        passed.append(missing or f"{name} cannot run this decode ({why})")
    raise SolmError("--engine auto: no engine can run this decode (" + "; ".join(passed) + ")")
