"""llama.cpp through llama-cpp-python's low-level API: one model, one context with a unified
KV cache shared by many sequences, one `llama_decode` per call.

Only what solm's runtimes need: feed tokens (each with its position and sequence, logits
where asked), read the logits, and edit sequences (`seq_cp` gives a sequence another's cells
without copying them, `seq_rm` frees cells). llama.cpp's own sampler and tokenizer are not
used: solm samples from the logits with its own rules and feeds token ids.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from solm.core.errors import SolmError
from solm.engines.llamacpp.compute_thread import on_llama_thread

MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ
INSTALL_HINT = ("pip install llama-cpp-python==0.3.36 (built from source: see the docs' "
                "guides/engines.md for the flags an AMX CPU needs)")


def llama_cpp_module():
    """The `llama_cpp` module, or a one-line error saying how to install it."""
    try:
        import llama_cpp
    except ImportError:
        raise SolmError(f"the llama.cpp engine needs llama-cpp-python: {INSTALL_HINT}") from None
    return llama_cpp


def llama_cpp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


_BACKEND_READY = False
_LOG_CALLBACK = None


def _init_backend(L) -> None:
    """Initialise llama.cpp once per process and keep its log quiet unless SOLM_LLAMA_LOG=1."""
    global _BACKEND_READY, _LOG_CALLBACK
    if _BACKEND_READY:
        return
    if os.environ.get("SOLM_LLAMA_LOG") != "1":
        @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
        def _quiet(level, text, user_data):
            return None

        _LOG_CALLBACK = _quiet  # llama.cpp keeps the pointer: the callback must stay alive
        L.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    L.llama_backend_init()
    _BACKEND_READY = True


@dataclass(frozen=True)
class Token:
    """One token of a `decode` call: its id, position, sequence, whether its logits are
    wanted, and more sequences its cell joins (it attends to `seq`'s cells only)."""

    id: int
    pos: int
    seq: int
    logits: bool = True
    also: tuple[int, ...] = ()


class LlamaContext:
    """A GGUF model and one context of `n_ctx` KV cells for up to `n_seq` sequences, F32 or
    F16 KV, `threads` CPU threads.

    `unified`: one cache all sequences share, where `seq_cp` shares cells without copying
    them (what threads forked from one main thread need); but every token's attention then
    spans every used cell of every sequence (masked), so its cost grows with the whole
    batch's KV. Not unified: each sequence has a stream of `n_ctx / n_seq` cells of its own
    and a token reads its own stream only (what independent requests want).

    `flash_attn`: llama.cpp's flash attention; which is faster depends on the CPU (the
    llama.cpp engine passes what `solm bench step` measured here: `solm.engines.cost`).

    `repack`: llama.cpp's repacked weight layouts on a CPU (its extra buffer types, on by
    default: Q4_0 and IQ4_NL interleaved 8x8 on AVX2); off, the plain kernels run. Measured on
    an AVX-512 EPYC (bench/results/engine_step/README.md): on, the one-token pass is 1.3x faster and a pass of 2 to 4
    tokens no slower, so decodes keep llama.cpp's default."""

    def __init__(self, gguf_path: str | Path, n_ctx: int = 4096, n_seq: int = 1,
                 n_batch: int | None = None, threads: int | None = None,
                 kv_type: str = "f16", unified: bool = True, flash_attn: bool = False,
                 repack: bool = True):
        L = llama_cpp_module()
        _init_backend(L)
        self.L, self.model, self.ctx, self._batch = L, None, None, None
        path = Path(gguf_path)
        if not path.is_file():
            raise SolmError(f"GGUF file not found: {path}")
        mparams = L.llama_model_default_params()
        mparams.use_extra_bufts = bool(repack)
        self.model = L.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise SolmError(f"{path}: llama.cpp could not load this GGUF (run with "
                            f"SOLM_LLAMA_LOG=1 to see why)")
        if not 1 <= n_seq <= MAX_SEQUENCES:
            raise SolmError(f"llama.cpp holds 1 to {MAX_SEQUENCES} sequences, not {n_seq}")
        threads = threads or torch.get_num_threads()
        self.n_ctx, self.n_seq, self.unified = int(n_ctx), int(n_seq), bool(unified)
        self.n_batch = int(n_batch or min(self.n_ctx, 2048))
        cparams = L.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = self.n_seq
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = unified
        # llama.cpp's default (auto) turns flash attention on for a CPU; measured on a 2-core
        # Xeon (q8_0, 8 sequences): 2.3x slower per step at 2,000 cells each, 1.08x at 128
        cparams.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                   else L.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        kinds = {"f32": L.GGML_TYPE_F32, "f16": L.GGML_TYPE_F16}
        if kv_type not in kinds:
            raise SolmError(f"KV cache type must be one of {', '.join(kinds)}, got {kv_type!r}")
        cparams.type_k = kinds[kv_type]
        cparams.type_v = kinds[kv_type]
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            self.model = None
            raise SolmError(f"{path}: llama.cpp could not make a context of {self.n_ctx} cells "
                            f"for {self.n_seq} sequences")
        self.memory = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self._batch = L.llama_batch_init(self.n_batch, 0, self.n_seq)
        self._causal = True

    # ---- feeding -------------------------------------------------------------------------

    def decode(self, tokens: Sequence[Token]) -> torch.Tensor:
        """Feed `tokens` (in `n_batch` pieces when longer); returns the float32 logits of the
        tokens that asked for them, in order, as a [k, vocab] tensor (computed on llama.cpp's
        own thread: `solm.engines.llamacpp.compute_thread`)."""
        return on_llama_thread(self._decode_all, tokens)

    def _decode_all(self, tokens: Sequence[Token]) -> torch.Tensor:
        out = []
        for start in range(0, len(tokens), self.n_batch):
            piece = tokens[start:start + self.n_batch]
            out.append(self._decode_piece(piece))
        return torch.cat(out) if out else torch.empty(0, self.n_vocab)

    def _decode_piece(self, tokens: Sequence[Token]) -> torch.Tensor:
        L, b = self.L, self._batch
        wanted = 0
        for i, t in enumerate(tokens):
            b.token[i] = t.id
            b.pos[i] = t.pos
            b.n_seq_id[i] = 1 + len(t.also)
            b.seq_id[i][0] = t.seq
            for j, extra in enumerate(t.also):
                b.seq_id[i][1 + j] = extra
            b.logits[i] = 1 if t.logits else 0
            wanted += bool(t.logits)
        b.n_tokens = len(tokens)
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with status {rc} (1: no KV room for "
                               f"{len(tokens)} tokens; negative: an invalid batch, e.g. a "
                               f"position that does not follow its sequence's last)")
        if not wanted:
            return torch.empty(0, self.n_vocab)
        ptr = L.llama_get_logits(self.ctx)
        array = np.ctypeslib.as_array(ptr, shape=(wanted, self.n_vocab))
        return torch.from_numpy(array.copy())

    def set_causal(self, causal: bool) -> None:
        if causal != self._causal:
            self.L.llama_set_causal_attn(self.ctx, causal)
            self._causal = causal

    # ---- sequences -----------------------------------------------------------------------

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Give sequence `dst` the cells of `src` in positions [p0, p1) (all: -1, -1)."""
        self.L.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        """Take sequence `seq` off its cells in [p0, p1) (all: -1, -1); a cell no sequence
        holds any more is free."""
        if not self.L.llama_memory_seq_rm(self.memory, seq, p0, p1):
            raise RuntimeError(f"llama.cpp refused to remove positions [{p0}, {p1}) of "
                               f"sequence {seq}")

    def seq_compact(self, seq: int) -> None:
        """Move sequence `seq`'s cells together at the start of its stream (its KV copied out
        through `llama_state_seq_get_data`, the sequence removed, the copy set back), so its
        passes read only as many cells as it holds. Streams only (`unified=False`): there the
        emptied stream always has room for the copy."""
        if self.unified:
            raise RuntimeError("seq_compact needs a stream per sequence (unified=False)")
        L = self.L
        size = L.llama_state_seq_get_size(self.ctx, seq)
        blob = (ctypes.c_uint8 * size)()
        if L.llama_state_seq_get_data(self.ctx, blob, size, seq) != size:
            raise RuntimeError(f"llama.cpp could not copy out sequence {seq}")
        self.seq_rm(seq)
        if L.llama_state_seq_set_data(self.ctx, blob, size, seq) == 0:
            raise RuntimeError(f"llama.cpp could not set back sequence {seq}")

    def seq_pos_max(self, seq: int) -> int:
        """The largest position sequence `seq` holds (-1 when empty)."""
        return int(self.L.llama_memory_seq_pos_max(self.memory, seq))

    def clear(self) -> None:
        self.L.llama_memory_clear(self.memory, True)

    def close(self) -> None:
        L = self.L
        if getattr(self, "_batch", None) is not None:
            L.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            L.llama_model_free(self.model)
            self.model = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "LlamaContext":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
