"""solm: toolkit for self-orchestrating language models (PASTA, TIP, Planned Diffusion)."""

import os as _os

__version__ = "0.1.0"


def _tune_mkl_for_amd() -> None:
    """MKL picks slow generic kernels on AMD CPUs; pinning its AVX2 code path measured ~1.5x
    faster multi-token decode steps here. Must run before torch loads MKL; users can override
    by setting MKL_CBWR themselves."""
    if "MKL_CBWR" in _os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        return
    if "AuthenticAMD" in cpuinfo and " avx2" in cpuinfo:
        _os.environ["MKL_CBWR"] = "AVX2"


_tune_mkl_for_amd()

import logging as _logging

# torchao (optional; imported by transformers or inductor when installed) warns at import
# about CUDA kernels a CPU build lacks, and torch about enums it registers: noise for users
_logging.getLogger("torchao").setLevel(_logging.ERROR)
_logging.getLogger("torch.utils._pytree").setLevel(_logging.ERROR)
