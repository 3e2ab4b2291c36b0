"""Random numbers as a pure function of (seed, stream, draw, token): counter-based noise.

A generator object hands out numbers in the order they are asked for, so a row's draws depend
on which other rows were sampled before it, and a CPU generator and a CUDA one give different
streams for one seed. Here every uniform is a hash of its coordinates instead (the idea of
Philox / counter-based RNGs, with a 32-bit integer mixer): a thread's k-th draw is the same
whether it is decoded alone or among 63 others, whatever rows were drawn and discarded, and on
every device, because the hash is integer arithmetic that each backend computes exactly. The
arithmetic stays below 2^49 in int64 (32-bit products are split into 16-bit halves), so no
backend overflows and none needs unsigned types.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
_MIX_A = 0x7FEB352D  # lowbias32's multipliers (Wellons' integer hash prospector)
_MIX_B = 0x846CA68B
_TOKEN_STEP = 0x9E3779B9  # the golden-ratio increment: spreads consecutive token ids


def mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for int64 x in [0, 2^32), without any intermediate above 2^49."""
    high = ((x * (c >> 16)) & 0xFFFF) << 16
    return (x * (c & 0xFFFF) + high) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective avalanche mix of 32-bit values held in int64."""
    x = x ^ (x >> 16)
    x = mul32(x, _MIX_A)
    x = x ^ (x >> 15)
    x = mul32(x, _MIX_B)
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, streams: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """One 32-bit key per row from its seed, stream (a thread, a point, a chunk) and draw
    number within the stream; int64 [B] tensors in, int64 [B] out."""
    k = mix32(seeds & MASK32)
    k = mix32(k ^ (streams & MASK32))
    return mix32(k ^ (draws & MASK32))


def uniforms(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """float32 [B, vocab] in (0, 1): 24 random bits per (row key, token id), + 1/2 so that
    neither 0 nor 1 occurs (a Gumbel transform takes two logs)."""
    tokens = torch.arange(vocab, device=keys.device, dtype=torch.int64)
    bits = mix32(mix32((keys[:, None] + mul32(tokens, _TOKEN_STEP)[None, :]) & MASK32))
    return ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def gumbel(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise [B, vocab]: argmax(log p + noise) draws a token with probability
    p (the Gumbel-max trick), one independent draw per row."""
    return -torch.log(-torch.log(uniforms(keys, vocab)))
