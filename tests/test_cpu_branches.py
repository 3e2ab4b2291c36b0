"""Every CPU-kind branch, forced, on whatever machine runs the tests: the oneDNN-packed output
head and the plain one (and a quantized head, which must never take the packed path: on an
AMD AVX2 CPU it raised NotImplementedError), MKL's code path on AMD, and `--dtype auto`."""

import pytest
import torch

from solm.core.models import cpu_has_fast_bf16, resolve_dtype
from solm.engines.torch.head import OutputHead, can_pack

AMD_AVX2 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma"
AMD_AVX512_BF16 = AMD_AVX2 + " avx512f avx512_bf16"
INTEL_AVX512_BF16 = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f avx512_bf16"


def fresh_tiny(pasta_tokenizer):
    from solm.core.models import tiny_model

    model, _ = tiny_model(pasta_tokenizer, seed=5)
    return model


def head_logits(model, ids):
    head = OutputHead(model)
    with torch.no_grad():
        return head, head.model_logits({"input_ids": ids}, lambda h: h[0])


@pytest.mark.parametrize("mkldnn", [True, False])
def test_packed_and_plain_heads_give_the_models_logits(pasta_tokenizer, monkeypatch, mkldnn):
    # a torch build without oneDNN keeps the plain path whatever is asked (not on the pinned
    # CPU wheel, which has it)
    mkldnn = mkldnn and torch.backends.mkldnn.is_available()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: mkldnn)
    model = fresh_tiny(pasta_tokenizer)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    head, logits = head_logits(model, ids)
    assert head.packs is mkldnn
    with torch.no_grad():
        expected = model(input_ids=ids).logits[0]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def quantized(model):
    from solm.core.quantize import quantize_weights

    quantize_weights(model, "int8")
    return model


def test_an_int8_head_never_takes_the_packed_path(pasta_tokenizer, monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)  # force it
    model = quantized(fresh_tiny(pasta_tokenizer))
    assert not can_pack(model.get_output_embeddings().weight)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    head, logits = head_logits(model, ids)
    assert head.packs is False
    with torch.no_grad():
        expected = model(input_ids=ids).logits[0]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_a_head_packed_before_quantization_falls_back(pasta_tokenizer, monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    model = fresh_tiny(pasta_tokenizer)
    head = OutputHead(model)
    assert head.packs
    quantized(model)
    hidden = torch.randn(3, model.config.hidden_size)
    with torch.no_grad():
        out = head(hidden)  # NotImplementedError before the fix
        torch.testing.assert_close(out, model.get_output_embeddings()(hidden))


def test_a_quantized_model_decodes_through_the_runtime(pasta_tokenizer, monkeypatch):
    from solm.decode.pasta.runtime import PastaDecodeConfig, PastaRuntime

    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    reference = fresh_tiny(pasta_tokenizer)
    model = quantized(fresh_tiny(pasta_tokenizer))
    cfg = PastaDecodeConfig(mode="sequential", max_new_tokens=6, record_logits=True)
    a = PastaRuntime(reference, pasta_tokenizer, pool_size=64).generate([5, 6, 7], cfg)
    b = PastaRuntime(model, pasta_tokenizer, pool_size=64).generate([5, 6, 7], cfg)
    assert len(b.ids) == 6
    # int8 weights agree with fp32, they are not equal to it
    assert torch.nn.functional.cosine_similarity(a.logits[0], b.logits[0], dim=0) > 0.99


def test_mkl_code_path_per_cpu_kind():
    from solm import mkl_code_path

    assert mkl_code_path(AMD_AVX2) == "AVX2"
    assert mkl_code_path(AMD_AVX512_BF16) == "AVX2"
    assert mkl_code_path(INTEL_AVX512_BF16) is None
    assert mkl_code_path("vendor_id\t: AuthenticAMD\nflags\t\t: sse2") is None


@pytest.mark.parametrize("cpuinfo,fast", [(AMD_AVX2, False), (AMD_AVX512_BF16, True),
                                          (INTEL_AVX512_BF16, True),
                                          ("flags: amx_bf16 amx_tile", True)])
def test_dtype_auto_per_cpu_kind(monkeypatch, cpuinfo, fast):
    from solm.core import models

    assert cpu_has_fast_bf16(cpuinfo) is fast
    monkeypatch.setattr(models, "cpu_has_fast_bf16", lambda: fast)
    assert resolve_dtype("auto", "cpu") == (torch.bfloat16 if fast else torch.float32)


@pytest.mark.parametrize("flags,isa", [
    ("fpu avx2 fma", "AVX2"),
    ("fpu avx2 avx512f avx512_vnni", "AVX-512"),
    ("fpu avx2 avx512f avx512_bf16", "AVX-512 + avx512_bf16"),
    ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", "AVX-512 + avx512_bf16 + AMX"),
    ("fpu sse4_2", "no AVX2"),
])
def test_the_cpu_named_beside_every_timing_says_its_vector_and_matrix_units(monkeypatch, flags,
                                                                              isa):
    import subprocess
    import types

    from solm.engines import bandwidth

    lscpu = f"Architecture: x86_64\nModel name:   Some CPU\nFlags:   {flags}\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=lscpu))
    monkeypatch.setattr(bandwidth.os, "cpu_count", lambda: 2)
    bandwidth.cpu_description.cache_clear()
    try:
        assert bandwidth.cpu_description() == f"Some CPU, 2 cores, {isa}"
    finally:
        bandwidth.cpu_description.cache_clear()  # the next caller reads this machine's
