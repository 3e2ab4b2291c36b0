"""llama.cpp's own loop timed in a process of its own: the yardstick a parallel decode is
measured against.

Timed inside a process that has just run onnxruntime or torch, llama.cpp's one-token loop on
the demo's q4_0 GGUF measured 11.7 ms a token where the same GGUF in a fresh process decodes
at 5.75-6.38 ms (AMD EPYC, 2 cores): the other engine's worker threads (onnxruntime's
intra-op pool spinning after a run, libgomp's team after a parallel region) compete with
llama.cpp's for the same two cores. So the yardstick runs in a child process that imports
llama.cpp and nothing else that computes: the parent sends it (prompt ids, tokens) one request
at a time, waiting, and the child answers with its decode seconds. Requests interleave with
the parent's own timed runs, so the alternating order the demos time in is kept.

Protocol (one JSON object a line): the child's first line is `{"ready": true}` once the GGUF
is loaded; each request `{"ids": [...], "n": N}` gets `{"tokens": [...], "prefill_s": s,
"decode_s": s}` (or `{"error": "..."}`); end of input ends the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


class FreshProcessLoop:
    """`OwnLoop` in a child process: `generate(ids, n)` -> (tokens, prefill s, decode s)."""

    def __init__(self, gguf: str | Path, cells: int, kv_type: str = "f16",
                 flash_attn: bool = False, threads: int | None = None):
        import torch

        from solm.core.errors import SolmError

        request = {"gguf": str(gguf), "cells": int(cells), "kv_type": kv_type,
                   "flash_attn": bool(flash_attn),
                   "threads": int(threads or torch.get_num_threads())}
        env = {**os.environ, "OMP_NUM_THREADS": str(request["threads"])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solm.engines.llamacpp.fresh_loop", json.dumps(request)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        first = self.proc.stdout.readline()
        if not first or not json.loads(first).get("ready"):
            err = self.proc.stderr.read().strip().splitlines()
            self.close()
            raise SolmError(f"llama.cpp's loop in a fresh process did not start: "
                            f"{(err or ['no output'])[-1]}")

    def generate(self, ids: list[int], n_tokens: int) -> tuple[list[int], float, float]:
        from solm.core.errors import SolmError

        self.proc.stdin.write(json.dumps({"ids": [int(t) for t in ids],
                                          "n": int(n_tokens)}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline() or '{"error": "the child ended"}')
        if "error" in reply:
            raise SolmError(f"llama.cpp's loop in a fresh process: {reply['error']}")
        return reply["tokens"], reply["prefill_s"], reply["decode_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def serve(request: dict) -> None:
    """The child: load the GGUF, say ready, answer requests until standard input ends."""
    from solm.engines.llamacpp.binding import LlamaContext
    from solm.engines.llamacpp.own_loop import OwnLoop

    ctx = LlamaContext(request["gguf"], n_ctx=request["cells"], n_seq=1,
                       kv_type=request["kv_type"], flash_attn=request["flash_attn"],
                       threads=request["threads"])
    loop = OwnLoop(ctx)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        ask = json.loads(line)
        try:
            tokens, prefill, decode = loop.generate(ask["ids"], ask["n"])
            reply = {"tokens": tokens, "prefill_s": prefill, "decode_s": decode}
        except Exception as e:  # said to the parent, which raises it as one line
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    loop.close()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
