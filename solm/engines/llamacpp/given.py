"""A GGUF file given as the model: llama.cpp decodes it as it is, with its own weight type
(and the KV type that goes with it), or the decode is refused with the reason. Converting it
(another weight type, control tokens added) is an explicit request: `solm export gguf`."""

from __future__ import annotations

from pathlib import Path

from solm.core.errors import SolmError
from solm.engines.llamacpp.export import OUTTYPES

# general.file_type (llama.cpp's LLAMA_FTYPE_*) -> solm's name for the weight type
FILE_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 32: "bf16"}
DEFAULT_TYPE = "q8_0"  # --gguf-type's default: the type solm exports a source model to


def gguf_facts(path: str | Path) -> tuple[str | None, set[str]]:
    """(the file's weight type as solm names it, or None for one solm does not name; its
    tokens)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    ftype = FILE_TYPES.get(int(field.contents())) if field is not None else None
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return ftype, set(tokens.contents()) if tokens is not None else set()


def given_gguf(path: str, asked_type: str, system: str, num_registers: int = 16) -> str:
    """The weight type to decode the GGUF at `path` with: its own. Refused in one line when
    the file lacks the control tokens `system` writes, or when `asked_type` (a --gguf-type
    other than the default) would need a conversion."""
    from solm.core.control_tokens import tokens_to_add
    from solm.core.vocabulary import system_tokens

    file = Path(path).expanduser()
    if not file.is_file():
        raise SolmError(f"GGUF file not found: {path}")
    ftype, tokens = gguf_facts(file)
    convert = (f"`solm export gguf {path} OUT.gguf --outtype TYPE --system {system}` "
               f"writes a converted copy")
    if ftype is None:
        raise SolmError(f"{path}: its weight type is not one solm decodes as given "
                        f"({', '.join(OUTTYPES)}); {convert}")
    if asked_type not in (ftype, DEFAULT_TYPE):
        raise SolmError(f"{path} holds {ftype} weights and llama.cpp decodes a given GGUF as "
                        f"it is; --gguf-type {asked_type} would convert it: {convert}")
    missing = tokens_to_add(system_tokens(system, num_registers), tokens)
    if missing:
        raise SolmError(f"{path} lacks {len(missing)} of {system}'s control tokens "
                        f"({missing[0]}, ...), and llama.cpp decodes a given GGUF as it is: "
                        f"{convert}, or decode it with --engine torch")
    return ftype
