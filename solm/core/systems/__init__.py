"""The systems solm knows, by name: their control tokens and their structure module.

Every structure module has the same shape:

- `NAME`, and a vocabulary class (`Vocab`) with `from_tokenizer(tokenizer, ...)`;
- a tracker fed tokens in order (what the runtime uses);
- visibility written as named mask terms composed with `solm.core.structure.or_masks` /
  `and_masks`;
- `structure(token_ids, vocab, prompt_len=0) -> solm.core.structure.Structure`.

This is the one registry of systems: an entry names its control tokens, its structure module,
the module that registers its decode side (`solm.decode.registry.register_system`, which
attaches the `DecodeSystem` here: the runner, engines' refusals and evaluation method kinds)
and, for a system whose models carry another system's tokens, that system. `load_model`, the
trainers, the decode commands, evaluation and the server all look systems up here, so adding
one is a structure module, a decode package and one entry below (or `register` at run time).
"""

from __future__ import annotations

import importlib
import dataclasses
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from solm.core.control_tokens import pasta_tokens, pdiff_tokens, tip_tokens
from solm.core.errors import SolmError, look_up


@dataclass(frozen=True)
class System:
    name: str
    summary: str
    control_tokens: Callable[[int], list[str]]  # num_registers -> the tokens to add
    module: str | None  # its structure module; None until the system's structure lands
    decode_module: str | None = None  # the module whose import registers its decode side
    tokens: str | None = None  # the system whose control tokens its models carry (None: own)
    decoder: Any = None  # its `DecodeSystem`, attached when decode_module is imported

    @property
    def token_system(self) -> str:
        return self.tokens or self.name

    def structure_module(self) -> ModuleType:
        if self.module is None:
            raise SolmError(f"system '{self.name}' has control tokens but no structure yet")
        return importlib.import_module(self.module)


SYSTEMS: dict[str, System] = {s.name: s for s in (
    System("pasta", "PASTA: promised chunks decode as parallel threads",
           lambda num_registers: pasta_tokens(), "solm.core.systems.pasta",
           decode_module="solm.decode.pasta.system"),
    System("tip", "TIP: thought registers whose reuse kills the older step",
           tip_tokens, "solm.core.systems.tip", decode_module="solm.decode.tip.system"),
    System("pdiff", "Planned Diffusion: a plan of promises, chunks denoised in parallel",
           lambda num_registers: pdiff_tokens(), "solm.core.systems.pdiff",
           decode_module="solm.decode.pdiff.system"),
    System("sot", "Skeleton-of-Thought: a skeleton, then its points as threads of one pool "
           "(a baseline; any model)", lambda num_registers: pasta_tokens(),
           "solm.core.systems.sot", decode_module="solm.decode.sot.system", tokens="pasta"),
)}


def get_system(name: str) -> System:
    return look_up(SYSTEMS, name, "system")


def register(system: System) -> System:
    """Add a system at run time (a user's own, a test's toy); its name must be new."""
    if system.name in SYSTEMS and SYSTEMS[system.name] != system:
        raise ValueError(f"system {system.name!r} is already registered")
    SYSTEMS[system.name] = system
    return system


def attach_decoder(name: str, decoder: Any) -> None:
    """Called by `solm.decode.registry.register_system`: a known system's decode side."""
    system = get_system(name)
    if system.decoder is not None and system.decoder is not decoder:
        raise ValueError(f"system {name!r} already has its decode side registered")
    SYSTEMS[name] = dataclasses.replace(system, decoder=decoder)
