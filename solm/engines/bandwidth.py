"""Memory bandwidth: what a decode step moves, and what the machine can move.

At batch 1 a decode step reads every weight and the keys/values it attends to once; that
many bytes over the step's time is the bandwidth it achieved (gpt-fast reports the same).
The machine's own figure comes from a small probe (a large tensor copy, best of a few),
measured once per device and cached under solm's cache folder.
"""

from __future__ import annotations

import functools
import json
import os
import time

import torch

PROBE_BYTES = 256 << 20


# a probe whose copies differ by more than this (slowest / fastest) ran on a busy machine:
# its figure is shown but not kept
BANDWIDTH_SPREAD = 1.3


def probe_copies(device: str | torch.device = "cpu", nbytes: int = PROBE_BYTES,
                 repeats: int = 7) -> list[float]:
    """Seconds of each of `repeats` copies (read + write) of `nbytes`."""
    device = torch.device(device)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times


def probe_bandwidth(device: str | torch.device = "cpu", nbytes: int = PROBE_BYTES,
                    repeats: int = 7) -> float:
    """Bytes per second of a copy (read + write) of `nbytes`, best of `repeats`."""
    return 2 * nbytes / min(probe_copies(device, nbytes, repeats))


def machine_bandwidth(device: str | torch.device = "cpu", remeasure: bool = False,
                      copies=probe_copies) -> float:
    """This device's copy bandwidth (bytes/s), the one figure every decode and `solm bench
    step` quote: the best copy of a probe, kept in solm's cache only when the probe's
    copies agree (slowest / fastest <= BANDWIDTH_SPREAD), and then the highest such figure
    measured here (a busy spell can only lower a copy's speed). Measured when nothing
    clean is kept yet, or when `remeasure`."""
    from solm.core.models import cache_root

    device = torch.device(device)
    key = _device_key(device)
    path = cache_root() / "bandwidth.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    if key in known and not remeasure:
        return float(known[key])
    times = copies(device)
    figure = 2 * PROBE_BYTES / min(times)
    if max(times) / min(times) > BANDWIDTH_SPREAD:
        return float(known.get(key, figure))  # wandered: shown this once, not kept
    known[key] = max(figure, float(known.get(key, 0.0)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(known, indent=2))
    return float(known[key])


def kv_bytes_per_token(model) -> int:
    """Bytes of one token's keys and values over every layer."""
    from solm.engines.torch.pool import kv_shape_of, num_layers_of
    from solm.engines.torch.step import activation_dtype

    heads, dim = kv_shape_of(model)
    size = torch.tensor([], dtype=activation_dtype(model)).element_size()
    return 2 * num_layers_of(model) * heads * dim * size


def achieved(weight_bytes: int, steps: int, kv_tokens_read: int, kv_token_bytes: int,
             seconds: float, machine: float | None = None) -> dict:
    """Bandwidth a decode achieved: weights once per step plus the keys/values read."""
    moved = weight_bytes * steps + kv_tokens_read * kv_token_bytes
    gbs = moved / max(seconds, 1e-12) / 1e9
    out = {"bandwidth_gbs": _significant(gbs)}
    if machine:
        out["machine_gbs"] = _significant(machine / 1e9)
        out["bandwidth_fraction"] = _significant(gbs / (machine / 1e9))
    return out


def _significant(x: float, digits: int = 4) -> float:
    """Rounded to a few significant digits (a tiny test model's fraction is not 0)."""
    return float(f"{x:.{digits}g}")


def _device_key(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    name = "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), name)
    except OSError:
        pass
    return f"cpu:{name}:{torch.get_num_threads()}threads"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@functools.lru_cache(maxsize=1)  # a subprocess; the engines read it per context
def cpu_description() -> str:
    """CPU model, core count and vector ISA (AVX2 / AVX-512 / avx512_bf16, AMX): what every
    timing on a CPU is stated beside."""
    import platform
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor()
    name = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "?")
    flags = next((line for line in out.splitlines() if line.startswith("Flags")), "")
    isa = "AVX-512 + avx512_bf16" if "avx512_bf16" in flags else (
        "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2"))
    if "amx_tile" in flags.split():  # Intel's matrix tiles: bf16/int8 GEMMs cost far less
        isa += " + AMX"
    return f"{name}, {os.cpu_count()} cores, {isa}"
