"""The engines solm decodes on, by name: one module per engine (`torch_engine`,
`llamacpp_engine`), each an `Engine` saying whether it runs here and how it times a pass.
Commands that list or validate engines read this registry."""

from __future__ import annotations

from solm.core.errors import SolmError
from solm.engines.base import Engine
from solm.engines.llamacpp_engine import LlamaCppEngine
from solm.engines.torch_engine import TorchEngine

ENGINES: dict[str, Engine] = {e.name: e for e in (TorchEngine(), LlamaCppEngine())}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise SolmError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}") \
            from None


def engine_names() -> list[str]:
    return list(ENGINES)
