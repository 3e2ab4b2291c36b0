"""The GGUF the llama.cpp engine reads: exported from the model on first use into solm's
cache, reused while the model's files are unchanged; loading a model for a decode on it and
the llama.cpp context a decode uses. Which engine decodes, and which decodes llama.cpp
refuses, is `solm.engines`' business."""

from __future__ import annotations

from pathlib import Path

from solm.core.errors import SolmError
from solm.engines.llamacpp.binding import MAX_SEQUENCES
from solm.engines.llamacpp.export import OUTTYPES

GGUF_TYPE_HELP = ("llama.cpp engine: the weight type of the exported GGUF (f32 equals torch's "
                  "fp32 logits to ~1e-4; q8_0 and bf16 batch parallel threads well on a CPU; "
                  "the 4-bit q4_1 / q4_0 decode one request fastest, batch worst).")
EXPORT_VERSION = 1  # bump when the exporter writes different files for the same model


def cached_gguf_path(model: str, control_tokens: str | None, num_registers: int,
                     outtype: str) -> Path:
    from solm.core.models import export_path

    return export_path(model, "gguf", outtype, ".gguf", tokens=control_tokens,
                       registers=num_registers, outtype=outtype, exporter=EXPORT_VERSION)


def gguf_for(model: str, outtype: str, control_tokens: str | None = None,
             num_registers: int = 16, loaded=None) -> Path:
    """The GGUF of `model` with `control_tokens` added, exported once (under a lock, written
    atomically). `loaded`: the (model, tokenizer) already in memory in fp32 with the tokens
    added, to export without loading again."""
    from solm.core.models import build_once
    from solm.engines.llamacpp.export import model_meta, write_gguf

    if outtype not in OUTTYPES:
        raise SolmError(f"--gguf-type must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    path = cached_gguf_path(model, control_tokens, num_registers, outtype)

    def write(loaded) -> None:
        meta = model_meta(model)
        meta["control_tokens"] = control_tokens
        write_gguf(*loaded, path, outtype, meta=meta, source=str(model))

    return build_once(path, f"exporting {model} to a {outtype} GGUF for llama.cpp (`solm "
                            f"cache` shows the cache's size, `solm cache clean --gguf` empties "
                            f"it)", write, loaded, model, control_tokens or "pasta",
                      num_registers)


def kv_type(engine) -> str:
    """The KV cache's type: F32 beside f32 weights (equal to torch's fp32), else F16."""
    return "f32" if engine.gguf_type == "f32" else "f16"


def flash_attn(engine, faster: bool) -> bool:
    """llama.cpp's flash attention for a decode on `engine`: where it is `faster` on this CPU
    (what `solm bench step` measured), never beside f32 weights: its CPU kernel rounds through
    F16 even with an F32 cache (measured: logits 6e-4 off, relative, at one token, against
    7e-7 without it), and an f32 export promises the reference's logits."""
    return faster and kv_type(engine) != "f32"


def llama_context(engine, cells: int, sequences: int = MAX_SEQUENCES, unified: bool = True,
                  flash_attn_faster: bool = False):
    """The llama.cpp context of a decode on `engine` (its `gguf`, `gguf_type`): `cells` KV
    cells for up to `sequences` sequences (`LlamaContext`), flash attention as `flash_attn`
    says."""
    from solm.engines.llamacpp.binding import LlamaContext

    return LlamaContext(engine.gguf, n_ctx=cells, n_seq=sequences, kv_type=kv_type(engine),
                        unified=unified, flash_attn=flash_attn(engine, flash_attn_faster))
