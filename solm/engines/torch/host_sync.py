"""Count what makes the host wait for the device: the check behind "one copy per pass".

On CUDA the host queues kernels and runs ahead; it stops and waits when it needs a value
(`.item()`, `.tolist()`, `int(t)`, `.cpu()`), or when an op's output shape depends on data
(`nonzero`, boolean indexing, `masked_select`, `unique`). A decode pass that does either per
row pays a round trip per row. `counting_host_syncs()` counts both kinds on any device, so a
CPU test can hold a runtime to the budget a GPU needs: the Python calls by patching the
tensor methods, the shape-dependent ops with a dispatch mode (which also sees the calls made
inside torch's own functions). Where CUDA exists, `torch.cuda.set_sync_debug_mode` is the
device's own check; this is the one that runs everywhere.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# methods that hand a tensor's values to Python
VALUE_METHODS = ("item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__",
                 "__index__")
# ops whose output shape depends on the data: a device must finish before the host
# can size the result
SHAPE_FROM_DATA = {"aten::nonzero", "aten::masked_select", "aten::_unique2", "aten::unique_dim",
                   "aten::unique_consecutive", "aten::_local_scalar_dense", "aten::is_nonzero"}


class HostSyncs:
    """What ran under `counting_host_syncs()`: `calls` by name."""

    def __init__(self):
        self.calls: Counter[str] = Counter()
        self._depth = 0  # a value method's own inner ops are one sync, not two

    @property
    def total(self) -> int:
        return sum(self.calls.values())


class _ShapeFromData(TorchDispatchMode):
    def __init__(self, seen: HostSyncs):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if self.seen._depth == 0 and (name in SHAPE_FROM_DATA or _bool_index(name, args)):
            self.seen.calls[name] += 1
        return func(*args, **(kwargs or {}))


def _bool_index(name: str, args) -> bool:
    if name not in ("aten::index", "aten::index_put_", "aten::index_put"):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


@contextmanager
def counting_host_syncs() -> Iterator[HostSyncs]:
    """Count, inside the block, every call that brings tensor values to the host or sizes
    an output from data. Not thread-safe (it patches `torch.Tensor`); for tests and
    benchmarks."""
    seen = HostSyncs()
    originals = {name: getattr(torch.Tensor, name) for name in VALUE_METHODS}

    def counted(name, original):
        def method(self, *args, **kwargs):
            outer = seen._depth == 0
            if outer:
                seen.calls[f"Tensor.{name}"] += 1
            seen._depth += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                seen._depth -= 1
        return method

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    try:
        with _ShapeFromData(seen):
            yield seen
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


# what builds a tensor from host data: on a GPU, a host-to-device copy each
UPLOADERS = ("tensor", "as_tensor", "asarray", "from_numpy", "frombuffer")


class PassWork:
    """What ran under `counting_pass_work()`: eager ops dispatched (by name), uploads (a
    tensor built from Python or numpy data, or a copy from a CPU tensor to another device),
    host syncs (as `counting_host_syncs` counts them)."""

    def __init__(self):
        self.ops: Counter[str] = Counter()
        self.uploads: Counter[str] = Counter()
        self.syncs = HostSyncs()

    @property
    def op_total(self) -> int:
        return sum(self.ops.values())

    @property
    def upload_total(self) -> int:
        return sum(self.uploads.values())


class _CountOps(TorchDispatchMode):
    def __init__(self, seen: PassWork):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.ops[func._schema.name] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting_pass_work() -> Iterator[PassWork]:
    """Count, inside the block, every op dispatched, every upload and every host sync: what
    a pass costs a GPU beyond its kernels (a launch per eager op, a blocking copy per upload,
    a wait per sync), counted on any device. Not thread-safe (it patches torch); for tests
    and benchmarks."""
    seen = PassWork()
    originals = {name: getattr(torch, name) for name in UPLOADERS if hasattr(torch, name)}
    to, copy_ = torch.Tensor.to, torch.Tensor.copy_

    def counted(name, original):
        def build(data, *args, **kwargs):
            if not isinstance(data, torch.Tensor):
                seen.uploads[f"torch.{name}"] += 1
            return original(data, *args, **kwargs)
        return build

    def counted_to(self, *args, **kwargs):
        out = to(self, *args, **kwargs)
        if self.device.type == "cpu" and out.device.type != "cpu":
            seen.uploads["Tensor.to"] += 1
        return out

    def counted_copy(self, src, *args, **kwargs):
        if isinstance(src, torch.Tensor) and src.device.type == "cpu" \
                and self.device.type != "cpu":
            seen.uploads["Tensor.copy_"] += 1
        return copy_(self, src, *args, **kwargs)

    for name, original in originals.items():
        setattr(torch, name, counted(name, original))
    torch.Tensor.to, torch.Tensor.copy_ = counted_to, counted_copy
    try:
        with counting_host_syncs() as syncs, _CountOps(seen):
            seen.syncs = syncs
            yield seen
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)
        torch.Tensor.to, torch.Tensor.copy_ = to, copy_
