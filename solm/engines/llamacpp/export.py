"""A solm model (folder, kept model or alias, LoRA merged) written as a GGUF llama.cpp loads.

Hand-written on the `gguf` package (its writer, tensor-name map and quantizers) rather than
running llama.cpp's `convert_hf_to_gguf.py`: that script ships only inside llama.cpp's source
tree (not in any installed package), reads a folder from disk (a kept model is a packed LoRA
over a GGUF-derived parent, merged only in memory), and would need the model re-saved first.
What this module does by hand, and the converter does the same way:

- the Llama attention layout: Hugging Face stores q/k rows per head as two rotary halves,
  GGUF interleaves them (`_permute_rotary`, the converter's `LlamaModel.permute`);
- the vocabulary: byte-level BPE tokens and merges from `tokenizer.json`, special tokens as
  CONTROL, solm's added control tokens as USER_DEFINED (whole tokens in llama.cpp too);
- 1-D tensors (norms) stay F32 whatever the output type, as llama.cpp expects.

solm feeds llama.cpp token ids, never text, so the pre-tokenizer name matters only to other
users of the file: a model descended from an embedded alias carries its GGUF's name
(`smollm`), any other model "default".
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from solm.core.errors import SolmError
from solm.core.models import rope_theta

OUTTYPES = ("f32", "f16", "bf16", "q8_0", "q4_1", "q4_0")
# general.file_type values (llama.cpp's LLAMA_FTYPE_*)
_FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "bf16": 32}
_BLOCKED = ("q8_0", "q4_1", "q4_0")  # types stored in blocks of 32 along a row
# architectures written, by the Hugging Face class that loads them
ARCHITECTURES = {"LlamaForCausalLM": "llama"}
SOLM_KEYS = ("solm.system", "solm.control_tokens", "solm.positions", "solm.num_registers",
             "solm.source")


@dataclass(frozen=True)
class ExportedModel:
    path: Path
    outtype: str
    tensors: int
    vocab: int
    bytes: int


def gguf_architecture(model) -> str:
    """The GGUF architecture of a loaded model, or a one-line error naming what is supported."""
    names = list(getattr(model.config, "architectures", None) or [type(model).__name__])
    for name in names + [type(model).__name__]:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    raise SolmError(f"architecture {names[0]} cannot be exported to GGUF by solm yet "
                    f"(supported: {', '.join(ARCHITECTURES)})")


def _permute_rotary(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Rows [head][half][i] -> [head][i][half]: Hugging Face's rotate-half layout to the
    interleaved pairs llama.cpp's rope reads."""
    rows = weight.shape[0]
    return (weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _vocabulary(tokenizer, rows: int) -> tuple[list[str], list[int], list[str]]:
    """Token strings, GGUF token types and BPE merges for `rows` embedding rows."""
    import gguf

    state = json.loads(tokenizer.backend_tokenizer.to_str())
    model = state.get("model", {})
    if model.get("type") != "BPE":
        raise SolmError(f"tokenizer type {model.get('type')} cannot be exported to GGUF by solm "
                        f"yet (byte-level BPE only)")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    special = set(tokenizer.all_special_ids)
    added = {i for i in tokenizer.get_added_vocab().values()}
    n = len(tokenizer)
    if n > rows:
        raise SolmError(f"the tokenizer has {n} tokens but the model only {rows} embedding rows")
    tokens = tokenizer.convert_ids_to_tokens(list(range(n)))
    T = gguf.TokenType
    types = [int(T.CONTROL if i in special else T.USER_DEFINED if i in added else T.NORMAL)
             for i in range(n)]
    for i in range(n, rows):  # embedding rows no token uses
        tokens.append(f"[PAD{i}]")
        types.append(int(T.UNUSED))
    return tokens, types, merges


def _pre_tokenizer(source: str) -> str:
    from solm.core.models import ALIASES, alias_gguf_path

    root = _root_parent(source)
    if root in ALIASES:
        import gguf

        reader = gguf.GGUFReader(alias_gguf_path(root))
        field = reader.fields.get("tokenizer.ggml.pre")
        if field is not None:
            return str(field.contents())
    return "default"


def _root_parent(source: str) -> str:
    """The model a chain of solm trainings started from (its solm.json parent_model links)."""
    from solm.core.models import artifact_folder

    seen = set()
    name = source
    while name not in seen:
        seen.add(name)
        folder = Path(artifact_folder(name) or name)
        meta = folder / "solm.json"
        if not meta.is_file():
            return name
        parent = json.loads(meta.read_text()).get("parent_model")
        if not parent:
            return name
        name = str(parent)
    return name


def _array(tensor: torch.Tensor, outtype: str) -> tuple[np.ndarray, Any]:
    """A tensor as the writer takes it: (data, raw GGML type or None for a plain dtype)."""
    import gguf

    data = tensor.detach().to(torch.float32).cpu().numpy()
    if data.ndim == 1 or outtype == "f32":
        return data, None
    if outtype == "f16":
        return data.astype(np.float16), None
    Q = gguf.GGMLQuantizationType
    kind = {"bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_1": Q.Q4_1, "q4_0": Q.Q4_0}[outtype]
    if outtype in _BLOCKED and data.shape[-1] % 32:
        return data.astype(np.float16), None  # rows not a whole number of blocks
    return gguf.quants.quantize(data, kind), kind


def write_gguf(model, tokenizer, out: Path, outtype: str = "f16", *, meta: dict | None = None,
               source: str = "", name: str | None = None) -> ExportedModel:
    """Write a loaded Llama-architecture model and its tokenizer to `out` (atomically: the
    file appears complete or not at all). `meta`: solm facts written as `solm.*` keys."""
    import gguf

    if outtype not in OUTTYPES:
        raise SolmError(f"--outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    arch = gguf_architecture(model)
    config = model.config
    n_head, n_kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_head
    state = model.state_dict()
    rows = state["model.embed_tokens.weight"].shape[0]
    tokens, types, merges = _vocabulary(tokenizer, rows)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch)
    try:
        writer.add_name(name or Path(source or "solm-model").name)
        writer.add_context_length(int(config.max_position_embeddings))
        writer.add_embedding_length(int(config.hidden_size))
        writer.add_block_count(int(config.num_hidden_layers))
        writer.add_feed_forward_length(int(config.intermediate_size))
        writer.add_head_count(int(n_head))
        writer.add_head_count_kv(int(n_kv))
        writer.add_rope_dimension_count(int(head_dim))
        writer.add_rope_freq_base(rope_theta(config, "GGUF"))
        writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
        writer.add_vocab_size(int(rows))
        writer.add_file_type(_FILE_TYPES[outtype])
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(_pre_tokenizer(source) if source else "default")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        for kind, tid in (("bos", tokenizer.bos_token_id), ("eos", tokenizer.eos_token_id),
                          ("pad", tokenizer.pad_token_id), ("unk", tokenizer.unk_token_id)):
            if tid is not None:
                getattr(writer, f"add_{kind}_token_id")(int(tid))
        writer.add_add_bos_token(False)
        template = getattr(tokenizer, "chat_template", None)
        if isinstance(template, str):
            writer.add_chat_template(template)
        for key, value in (meta or {}).items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                value = json.dumps(value)
            (writer.add_uint32 if isinstance(value, int) else writer.add_string)(
                f"solm.{key}", value)
        tied = bool(getattr(config, "tie_word_embeddings", False))
        count = 0
        for key, tensor in state.items():
            if key == "lm_head.weight" and tied:
                continue
            if re.search(r"rotary_emb", key):
                continue
            target = names.get_name(key, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise SolmError(f"tensor {key} has no GGUF name for architecture {arch}")
            array = tensor
            if key.endswith("self_attn.q_proj.weight"):
                array = torch.from_numpy(_permute_rotary(tensor.float().cpu().numpy(), n_head))
            elif key.endswith("self_attn.k_proj.weight"):
                array = torch.from_numpy(_permute_rotary(tensor.float().cpu().numpy(), n_kv))
            data, raw = _array(array, outtype)
            writer.add_tensor(target, data, raw_dtype=raw)
            count += 1
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, out)
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    return ExportedModel(out, outtype, count, rows, out.stat().st_size)


def model_meta(source: str) -> dict:
    """The solm facts of a model folder or kept model (its solm.json), as GGUF `solm.*` keys."""
    from solm.core.models import artifact_folder

    folder = Path(artifact_folder(source) or source)
    info = json.loads((folder / "solm.json").read_text()) if (folder / "solm.json").is_file() \
        else {}
    return {"system": info.get("system"), "control_tokens": info.get("control_tokens"),
            "positions": info.get("positions", "pred10x" if info.get("system") in
                                  ("pasta", "pdiff") else None),
            "num_registers": info.get("num_registers"), "source": source}


def export_gguf(source: str, out: Path, outtype: str = "f16",
                system: str | None = None) -> ExportedModel:
    """`solm export gguf`: load `source` (LoRA merged, fp32), add the control tokens of its
    system (solm.json's, else `system`, else none), write `out`."""
    from solm.core.models import load_model
    from solm.core.vocabulary import add_control_tokens

    check_export(source, out, outtype)
    out = Path(out)
    meta = model_meta(source)
    tokens = meta.get("control_tokens") or system
    if str(source).endswith(".gguf"):
        meta["source"] = str(source)
    model, tokenizer = load_model(source, dtype=torch.float32, device="cpu")
    if tokens:
        add_control_tokens(model, tokenizer, tokens,
                           num_registers=meta.get("num_registers") or 16)
        meta["control_tokens"] = tokens
    return write_gguf(model, tokenizer, out, outtype, meta=meta, source=str(source))


def check_export(source: str, out: Path, outtype: str) -> None:
    """A one-line error for an export that cannot be written, before anything loads."""
    from solm.core.models import resolve_model_path

    if outtype not in OUTTYPES:
        raise SolmError(f"--outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    out = Path(out)
    if Path(source).resolve() == out.resolve():
        raise SolmError(f"{out}: it is the input model; write the GGUF to another file")
    if out.suffix != ".gguf":
        raise SolmError(f"{out}: the output must be a .gguf file")
    if out.is_dir():
        raise SolmError(f"{out}: a folder; the output is a .gguf file")
    if Path(source).exists() and not Path(source).is_dir() and not str(source).endswith(".gguf"):
        raise SolmError(f"{source}: not a model (a model folder, a kept model, an alias or a "
                        f".gguf file)")
    if not Path(source).exists():
        resolve_model_path(source)  # an unknown name fails here, in one line
