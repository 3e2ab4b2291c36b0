"""The ONNX graph of a model in solm's cache (built on first use per weight format, reused
while the model's files are unchanged), an ONNX Runtime session over it, and the KV pool
its passes read and write."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from solm.core.errors import SolmError
from solm.engines.onnxruntime.graph import FORMATS

GRAPH_VERSION = 2  # bump when the graph builder writes a different graph for the same model
INSTALL_HINT = "pip install onnxruntime onnx (or `make setup`, which installs solm[onnx])"
PACKAGES = ["onnxruntime", "onnx"]  # the session runs the graph, onnx writes it


def onnxruntime_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in PACKAGES)


def cached_graph_path(model: str, fmt: str, control_tokens: str | None,
                      num_registers: int) -> Path:
    from solm.core.models import export_path

    return export_path(model, "onnx", fmt, ".onnx", tokens=control_tokens,
                       registers=num_registers, format=fmt, graph=GRAPH_VERSION)


def graph_for(model: str, fmt: str, control_tokens: str | None = None,
              num_registers: int = 16, loaded=None) -> Path:
    """The ONNX graph of `model` with `control_tokens` added in weight format `fmt`, built
    once (under a lock, written atomically). `loaded`: the (model, tokenizer) already in
    memory in fp32 with the tokens added."""
    from solm.core.models import build_once
    from solm.engines.onnxruntime.graph import build_graph

    if fmt not in FORMATS:
        raise SolmError(f"--onnx-type must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path = cached_graph_path(model, fmt, control_tokens, num_registers)

    def write(loaded) -> None:
        proto, _ = build_graph(loaded[0], fmt)
        path.parent.mkdir(parents=True, exist_ok=True)
        facts = {"format": fmt, "bytes_a_pass_reads": pass_bytes(proto)}
        path.with_suffix(".json").write_text(json.dumps(facts) + "\n")
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(proto.SerializeToString())
        os.replace(partial, path)

    return build_once(path, f"writing {model} as a {fmt} ONNX graph for onnxruntime", write,
                      loaded, model, control_tokens or "pasta", num_registers)


def pass_bytes(proto) -> int:
    """The weight bytes one pass reads: every initializer but the embedding table, of which
    a pass gathers only the rows of its tokens."""
    return sum(len(t.raw_data) for t in proto.graph.initializer
               if not t.name.startswith("embed_"))


def graph_pass_bytes(graph: Path | str) -> int:
    """`pass_bytes` of a cached graph (its file's size when the note beside it is missing)."""
    note = Path(graph).with_suffix(".json")
    if note.is_file():
        return int(json.loads(note.read_text())["bytes_a_pass_reads"])
    return Path(graph).stat().st_size


class OrtModel:
    """An ONNX Runtime session over a graph of `solm.engines.onnxruntime.graph` and a KV pool of `cells`
    cells: `forward` feeds tokens that read given pool cells under an additive bias, writes
    their keys and values at their slots, and returns their logits."""

    def __init__(self, graph: Path | str, cells: int, threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # onnxruntime's intra-op threads spin after each run by default, taking the cores
        # from the Python and torch work between two passes and from llama.cpp in another
        # process: off, solm's decode on the demo's q8 graph measured 12.3-13.1 ms a pass
        # against 17.6-17.8 ms spinning (AMD EPYC, 2 cores, alternating runs)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(graph), options,
                                            providers=["CPUExecutionProvider"])
        pools = [i for i in self.session.get_inputs() if i.name.startswith("pool_")]
        _, _, width = pools[0].shape  # [1, cells, kv heads x head dim]
        self.layers = len(pools) // 2
        self.cells = cells
        self.pool = {i.name: np.zeros((1, cells, width), np.float32) for i in pools}
        self.new_names = [o.name for o in self.session.get_outputs()]

    def forward(self, tokens: Sequence[int], positions: Sequence[int], read_slots: np.ndarray,
                bias: np.ndarray, write_slots: Sequence[int],
                rows: Sequence[int] | None = None) -> torch.Tensor:
        """Logits [len(rows or tokens), vocab] of the fed `tokens`; `bias` [fed, read + fed]:
        0 where a fed token reads a cell (the `read_slots`, then the fed tokens), -inf where
        it does not."""
        slots = np.asarray(list(write_slots), dtype=np.int64)
        if len(slots) and (slots.min() < 0 or slots.max() >= self.cells):
            raise RuntimeError(f"a write outside the pool of {self.cells} cells")
        out = self.session.run(self.new_names, {
            "input_ids": np.asarray(list(tokens), dtype=np.int64),
            "position_ids": np.asarray(list(positions), dtype=np.int64),
            "read_slots": np.asarray(read_slots, dtype=np.int64), "bias": bias, **self.pool})
        for name, value in zip(self.new_names[1:], out[1:]):
            self.pool[name.replace("new_", "pool_")][0, slots] = value[0]
        logits = out[0] if rows is None else out[0][list(rows)]
        return torch.from_numpy(np.ascontiguousarray(logits))


class OrtOwnLoop:
    """The sequential yardstick on onnxruntime: one token a pass on the same graph, the
    greedy argmax in numpy, nothing of solm's runtimes between the passes."""

    def __init__(self, model: OrtModel):
        self.model = model

    def generate(self, ids: list[int], n_tokens: int) -> tuple[list[int], float, float]:
        """(the n_tokens generated, prefill seconds, decode seconds) from the prompt `ids`."""
        import time

        n = len(ids)
        if n + n_tokens > self.model.cells:
            raise RuntimeError(f"{n + n_tokens} tokens do not fit {self.model.cells} cells")
        t0 = time.perf_counter()
        causal = np.triu(np.full((n, n), -np.inf, np.float32), 1)
        logits = self.model.forward(ids, range(n), np.zeros(0, np.int64), causal, range(n),
                                    rows=[n - 1])
        t1 = time.perf_counter()
        out = [int(logits[0].argmax())]
        for step in range(n_tokens - 1):
            at = n + step
            logits = self.model.forward([out[-1]], [at], np.arange(at),
                                        np.zeros((1, at + 1), np.float32), [at])
            out.append(int(logits[0].argmax()))
        return out, t1 - t0, time.perf_counter() - t1

    def close(self) -> None:
        self.model = None
