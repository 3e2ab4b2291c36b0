"""One upload per pass: the host data every part of a pass needs, copied to the device once.

A decode pass has host data in several places: the fed tokens' ids, positions, slots and
attributes (the step), every row's sampling settings and noise coordinates (the chooser).
Each `torch.tensor(list, device=...)` is a blocking host-to-device copy on CUDA, so a pass
that builds them separately pays one round trip each. A `PassStaging` collects the parts
(`put`, named), and the first `get` copies them all at once (one float64 tensor: integers up
to 2^53 and the float settings alike; from pinned memory without blocking on CUDA), then
hands out each part as a slice on the device. Parts put after the upload go up in a copy of
their own (counted, so a test sees it).
"""

from __future__ import annotations

from typing import Sequence

import torch


class PassStaging:
    """The host data of one pass, uploaded once (module docstring)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self._parts: dict[str, list[float]] = {}
        self._on_device: dict[str, torch.Tensor] = {}
        self.uploads = 0

    def put(self, name: str, values: Sequence[float]) -> None:
        if name in self._parts or name in self._on_device:
            raise ValueError(f"part {name!r} was put twice")
        self._parts[name] = list(values)

    def get(self, name: str) -> torch.Tensor:
        """Part `name` (float64) on the device; the first call uploads every part put."""
        if name not in self._on_device:
            self._upload()
        return self._on_device[name]

    def _upload(self) -> None:
        if not self._parts:
            return
        names = list(self._parts)
        flat = [v for n in names for v in self._parts[n]]
        data = torch.tensor(flat, dtype=torch.float64)
        if self.device.type == "cuda":
            data = data.pin_memory().to(self.device, non_blocking=True)
        elif self.device.type != "cpu":
            data = data.to(self.device)
        at = 0
        for n in names:
            k = len(self._parts[n])
            self._on_device[n] = data[at:at + k]
            at += k
        self._parts.clear()
        self.uploads += 1
