"""solm: toolkit for self-orchestrating language models (PASTA, TIP, Planned Diffusion)."""

import os as _os

__version__ = "0.1.0"


def mkl_code_path(cpuinfo: str) -> str | None:
    """The MKL_CBWR value for a CPU (from /proc/cpuinfo's text): AVX2 on AMD CPUs with AVX2,
    where MKL otherwise picks slow generic kernels; None elsewhere."""
    if "AuthenticAMD" in cpuinfo and " avx2" in cpuinfo:
        return "AVX2"
    return None


def _tune_mkl_for_amd() -> None:
    """Pinning MKL's AVX2 code path on AMD measured ~1.5x faster multi-token decode steps
    here. Must run before torch loads MKL; users can override by setting MKL_CBWR."""
    if "MKL_CBWR" in _os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        return
    path = mkl_code_path(cpuinfo)
    if path:
        _os.environ["MKL_CBWR"] = path


_tune_mkl_for_amd()

import logging as _logging

# torchao (optional; imported by transformers or inductor when installed) warns at import
# about CUDA kernels a CPU build lacks, and torch about enums it registers: noise for users
_logging.getLogger("torchao").setLevel(_logging.ERROR)
_logging.getLogger("torch.utils._pytree").setLevel(_logging.ERROR)
