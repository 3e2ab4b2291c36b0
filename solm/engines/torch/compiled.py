"""A decode step compiled whole over static shapes (gpt-fast's recipe, on transformers' models).

`torch.compile` pays only when shapes repeat: a graph is built per (tokens fed, keys read)
shape, so both are rounded up to buckets. Tokens fed per step go to 1, 8 or 16
(`TOKEN_BUCKETS`); padded rows write their keys past the last real slot (slots no real
token has reached yet, overwritten before anyone may see them) and attend to slot 0 only, so
they change nothing real. Keys read go up to the next power of two (at least `KV_BLOCK`),
the slots past the real ones masked out: a few graphs per token bucket over a whole pool
(a graph per 256 slots was measured no faster per step; a dynamic key length was 1.25x
slower per step than a static one on this CPU). The model's own forward runs inside the graph (no
hand-written model), so anything transformers loads as a decoder with a Cache compiles.

Steps with more tokens than the largest bucket (long prompts) run eagerly on the same pool.
Graphs are cached by inductor on disk (`TORCHINDUCTOR_CACHE_DIR`), so a second process
spends seconds, not a minute, per bucket; `compiles` counts graphs built in this process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import torch

from solm.engines.torch.head import OutputHead

TOKEN_BUCKET_MAX = 16  # PASTA steps feed one token per thread; longer prefills run eagerly
KV_BLOCK = 256


def power_of_two_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# Token widths a step is padded to. One token (sequential decoding, one thread) stays exact;
# every other width pads to 8 or 16: a graph costs tens of seconds to build (minutes on a
# 2-core AVX2 CPU) and a step of 8 tokens costs little more than one of 2 on a CPU (reading
# the weights dominates), so fewer graphs beat tighter padding.
TOKEN_BUCKETS = (1, 8, 16)


def bucket(n: int, largest: int) -> int:
    """Tokens fed, padded: the smallest of TOKEN_BUCKETS >= n (n <= largest)."""
    if n > largest:
        raise ValueError(f"{n} tokens is over the largest bucket ({largest})")
    return min(min(b for b in TOKEN_BUCKETS if b >= n), largest) if n <= TOKEN_BUCKETS[-1] \
        else power_of_two_at_least(n)


def token_buckets_up_to(fed: int) -> list[int]:
    """The widths a decode feeding at most `fed` tokens per step compiles."""
    return [b for b in TOKEN_BUCKETS if b <= bucket(fed, max(fed, TOKEN_BUCKETS[-1]))]


def kv_bucket(n: int, smallest: int, capacity: int) -> int:
    """The power of two >= n, at least `smallest`, at most `capacity`."""
    return min(max(power_of_two_at_least(n), smallest), capacity)


def configure_dynamo(max_graphs: int) -> None:
    import logging

    import torch._dynamo

    # torchao (imported by inductor when installed) warns about CUDA kernels a CPU lacks
    logging.getLogger("torchao").setLevel(logging.ERROR)

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), max_graphs))
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 4 * max_graphs)
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")


class CompiledForward:
    """`fn(input_ids [1, B], position_ids [1, B], mask [1, 1, B, K], write_slots [B])` ->
    logits [B, V], compiled once per (B, K). `body` runs the model on the pool with the read
    length K taken from the mask's shape (a constant of each graph).

    `cudagraphs` (a CUDA model): inductor captures each graph's kernels once and replays them
    (vLLM's and gpt-fast's launch-free step); the body's inputs must then all be tensors,
    the KV pool at a static address (`mark_static`), and the logits are copied out of the
    graph's output buffer, which the next replay overwrites."""

    def __init__(self, body: Callable, backend: str | Callable = "inductor",
                 max_graphs: int = 128, cudagraphs: bool = False):
        configure_dynamo(max_graphs)
        self.compiles = 0
        self.build_s = 0.0  # wall time of the calls that built a graph
        self.cudagraphs = cudagraphs
        inner = _backend(backend, cudagraphs)

        def counting(gm, example_inputs):
            self.compiles += 1
            return inner(gm, example_inputs)

        self.fn = torch.compile(body, backend=counting, dynamic=False)

    def __call__(self, *args):
        graphs, started = self.compiles, time.perf_counter()
        out = self.fn(*args)
        if self.cudagraphs:
            out = out.clone()
        if self.compiles != graphs:
            self.build_s += time.perf_counter() - started
        return out


def _backend(backend: str | Callable, cudagraphs: bool = False) -> Callable:
    if callable(backend):
        return backend
    if backend == "inductor":
        from torch._inductor.compile_fx import compile_fx

        if cudagraphs:
            return lambda gm, example_inputs: compile_fx(
                gm, example_inputs, config_patches={"triton.cudagraphs": True})
        return compile_fx
    if backend == "eager":
        return lambda gm, example_inputs: gm.forward
    raise ValueError(f"unknown compile backend {backend!r}")


def mark_static(*tensors: torch.Tensor) -> None:
    """Pool tensors a CUDA graph writes in place keep their address: tell dynamo, so the
    graphs read and write them directly (transformers' StaticCache does the same)."""
    for t in tensors:
        if t.device.type == "cuda":
            torch._dynamo.mark_static_address(t)


def pool_body(model, cache, head: OutputHead) -> Callable:
    """The compiled function for a `PoolCache`: write at `write_slots`, read the first K."""

    def body(input_ids, position_ids, mask, write_slots):
        cache.state.write_slots = write_slots
        cache.state.kv_len = mask.shape[-1]
        inputs = dict(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                      cache=cache, use_cache=True)
        return head.model_logits(inputs, lambda hidden: hidden[0], plain=True)

    return body


def paged_body(model, cache, head: OutputHead) -> Callable:
    """The compiled function for a `PagedCache` decode step (one token per row): write at
    `write_slots`, each row reading its `L` slots of `read_index` [B * L]."""

    def body(input_ids, position_ids, mask, write_slots, read_index):
        cache.state.write_slots = write_slots
        cache.state.padded_index = read_index
        inputs = dict(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                      cache=cache, use_cache=True)
        return head.model_logits(inputs, lambda hidden: hidden[:, -1], plain=True)

    return body


def padded_step_inputs(tokens: list[int], positions: list[int], visible: torch.Tensor,
                       first_slot: int, largest: int, kv_block: int, capacity: int,
                       device) -> tuple[torch.Tensor, ...]:
    """Pad one step to its bucket: ids, positions, the bool mask [1, 1, B, K] (real rows:
    `visible` [n, first_slot + n] in the top-left corner; padded rows see slot 0) and the
    slots to write."""
    n = len(tokens)
    b = bucket(n, largest)
    k = kv_bucket(first_slot + n, kv_block, capacity)
    mask = torch.zeros(b, k, dtype=torch.bool)
    mask[:n, :visible.shape[1]] = visible
    mask[n:, 0] = True
    pad = b - n
    ids = torch.tensor([list(tokens) + [0] * pad], device=device)
    pos = torch.tensor([list(positions) + [0] * pad], device=device)
    slots = torch.arange(first_slot, first_slot + b, device=device)
    return ids, pos, mask[None, None].to(device), slots


# `--compile auto` on a CPU counts the graphs' build on an empty inductor cache (a fresh
# machine's) against what they save. Measured (bench/compiled_replay.py, 135M model, bf16):
# 4 graphs in 134 s on a 2-core AMD EPYC with AVX-512 bf16 (about 34 s a graph), saving
# 8-11 ms per step (50 -> 42 ms); a 2-core AVX2 CPU took about 2 minutes a graph; a 2-core
# Intel Xeon with AMX built the graphs in 406 s on an empty cache (about 100 s a graph),
# where the eager bf16 step already runs on AMX tiles. A decode repays its graphs after
# TYPICAL_GRAPHS x seconds per graph / seconds saved per token.
TYPICAL_GRAPHS = 4
SECONDS_PER_GRAPH = {"amx": 101.5, "avx512_bf16": 34.0, "other": 120.0}
SAVED_S_PER_TOKEN = 0.008


def compile_cpu_kind(cpuinfo: str | None = None) -> str:
    """The CPU kind whose graph-build time `compile_pays_tokens` reads: `amx` (Intel's
    matrix tiles), `avx512_bf16` (native bf16 dot products), else `other`."""
    from solm.core.models import cpu_has_fast_bf16

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    if "amx_tile" in cpuinfo.split():
        return "amx"
    return "avx512_bf16" if cpu_has_fast_bf16(cpuinfo) else "other"


def compile_pays_tokens(cpuinfo: str | None = None) -> int:
    """Tokens a CPU decode must have before compiling its step repays the build."""
    return int(TYPICAL_GRAPHS * SECONDS_PER_GRAPH[compile_cpu_kind(cpuinfo)]
               / SAVED_S_PER_TOKEN)


def should_compile(flag: bool | None, expected_tokens: int, device) -> bool:
    """`--compile/--no-compile` when given, else whether compiling repays itself here."""
    if flag is not None:
        return flag
    if torch.device(device).type == "cuda":
        return True
    return expected_tokens >= compile_pays_tokens()
