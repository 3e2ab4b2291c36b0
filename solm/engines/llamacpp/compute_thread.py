"""Every llama.cpp computation runs on one thread of its own.

ggml's AMX kernels load their tile configuration once per thread (a thread-local flag says it
is loaded), and torch's oneDNN loads its own configuration on the threads its bf16 matmuls run
on. Both compute on the calling thread and on the OpenMP team it starts, so a torch bf16
matmul between two llama.cpp decodes on one thread leaves oneDNN's configuration where ggml
believes its own is, and ggml's next tile load dies with SIGILL (measured on an Intel Xeon
with AMX: llama.cpp, then torch bf16, then llama.cpp crashed the process; torch first did
not). libgomp gives each thread that starts a parallel region a team of its own, so
llama.cpp decoding only from a thread torch never computes on keeps its tiles, whatever
torch does in between. Where the CPU has no AMX this costs one thread hop a call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solm-llama.cpp")
_HERE = threading.local()


def _marked(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    _HERE.inside = True
    return fn(*args, **kwargs)


def on_llama_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on llama.cpp's thread (directly when already there), its result
    or its exception returned to the caller."""
    if getattr(_HERE, "inside", False):
        return fn(*args, **kwargs)
    return _POOL.submit(_marked, fn, *args, **kwargs).result()
