"""The systems solm knows, by name: their control tokens and their structure module.

Every structure module has the same shape:

- `NAME`, and a vocabulary class (`Vocab`) with `from_tokenizer(tokenizer, ...)`;
- a tracker fed tokens in order (what the runtime uses);
- visibility written as named mask terms composed with `solm.core.structure.or_masks` /
  `and_masks`;
- `structure(token_ids, vocab, prompt_len=0) -> solm.core.structure.Structure`.

`load_model(system=...)`, the trainers and the CLIs look systems up here, so adding one is one
module and one entry below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from solm.core.control_tokens import pasta_tokens, pdiff_tokens, tip_tokens
from solm.core.errors import SolmError


@dataclass(frozen=True)
class System:
    name: str
    summary: str
    control_tokens: Callable[[int], list[str]]  # num_registers -> the tokens to add
    module: str | None  # its structure module; None until the system's structure lands

    def structure_module(self) -> ModuleType:
        if self.module is None:
            raise SolmError(f"system '{self.name}' has control tokens but no structure yet")
        return importlib.import_module(self.module)


SYSTEMS: dict[str, System] = {s.name: s for s in (
    System("pasta", "PASTA: promised chunks decode as parallel threads",
           lambda num_registers: pasta_tokens(), "solm.core.systems.pasta"),
    System("tip", "TIP: thought registers whose reuse kills the older step",
           tip_tokens, "solm.core.systems.tip"),
    System("pdiff", "Planned Diffusion: a plan of promises, chunks denoised in parallel",
           lambda num_registers: pdiff_tokens(), "solm.core.systems.pdiff"),
)}


def get_system(name: str) -> System:
    try:
        return SYSTEMS[name]
    except KeyError:
        raise SolmError(f"unknown system '{name}': expected one of {', '.join(SYSTEMS)}") \
            from None
