"""llama.cpp computes on a thread of its own, so torch's AMX matmuls never clobber ggml's tile
configuration between two decodes."""

import subprocess
import sys
import textwrap
import threading

import pytest

from solm.engines.llamacpp.compute_thread import on_llama_thread
from test_amx_build import needs_amx


def test_calls_run_on_one_other_thread_nest_and_raise():
    here = threading.get_ident()
    first, second = on_llama_thread(threading.get_ident), on_llama_thread(threading.get_ident)
    assert first == second != here
    # a call made from llama.cpp's thread runs there at once (a second hop would deadlock)
    assert on_llama_thread(lambda: on_llama_thread(threading.get_ident)) == first

    def boom():
        raise RuntimeError("llama_decode failed")

    with pytest.raises(RuntimeError, match="llama_decode failed"):
        on_llama_thread(boom)


@pytest.mark.slow
@needs_amx
def test_a_torch_bf16_matmul_between_two_llama_decodes_does_not_kill_the_process(tmp_path):
    """On an AMX CPU, ggml's tile configuration loaded on the calling thread was replaced by
    oneDNN's in a bf16 matmul, and the next llama.cpp decode died with SIGILL."""
    pytest.importorskip("llama_cpp")
    script = textwrap.dedent("""
        import torch
        from solm.engines.llamacpp.binding import LlamaContext
        from solm.engines.llamacpp.model import gguf_for
        from solm.engines.llamacpp.own_loop import OwnLoop

        loop = OwnLoop(LlamaContext(gguf_for("smollm2-135m", "q4_0"), n_ctx=256))
        ids = list(range(100, 140))
        first = loop.generate(ids, 16)[0]
        a, b = torch.randn(64, 576, dtype=torch.bfloat16), torch.randn(576, 1536, dtype=torch.bfloat16)
        for _ in range(20):
            (a @ b).sum()
        again = loop.generate(ids, 16)[0]
        print("same" if again == first else "differs")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=600, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("same")
