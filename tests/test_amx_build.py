"""llama.cpp's AMX kernels are built in by the set-up: the header it force-includes makes
GCC keep a tile configuration's rows (without it, GCC 12 drops them and the first tile load
dies with SIGILL), and where the CPU has AMX the installed llama.cpp carries its AMX code."""

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "solm" / "engines" / "llamacpp" / "amx_tilecfg.h"
PROGRAM = Path(__file__).parent / "data" / "amx_tile_roundtrip.c"


def cpu_has_amx() -> bool:
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


needs_amx = pytest.mark.skipif(platform.machine() != "x86_64" or not cpu_has_amx(),
                               reason="this CPU has no AMX")


@needs_amx
@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_a_tile_configured_through_the_header_holds_its_rows(tmp_path):
    binary = tmp_path / "roundtrip"
    subprocess.run(["gcc", "-O2", "-march=native", "-include", str(HEADER), "-o", str(binary),
                    str(PROGRAM)], check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    if run.returncode == 3:
        pytest.skip("the kernel does not grant AMX tiles to this process")
    assert run.returncode == 0, f"died with signal {-run.returncode}: {run.stderr}"
    # the tile's 16th row came back: the bytes written at row 15, columns 0 and 63
    assert run.stdout.split() == [str(15 * 64 % 127), str((16 * 64 - 1) % 127)]


def compiler_builds_amx() -> bool:
    """Whether this machine's gcc targets AMX with -march=native (what llama.cpp's build
    uses); a compiler that does not builds llama.cpp without it, correctly."""
    if shutil.which("gcc") is None:
        return False
    macros = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-"], input="",
                            capture_output=True, text=True).stdout
    return "__AMX_INT8__" in macros


@needs_amx
def test_the_installed_llama_cpp_carries_its_amx_kernels():
    if not compiler_builds_amx():
        pytest.skip("this machine's gcc does not build AMX code for -march=native")
    llama_cpp = pytest.importorskip("llama_cpp")
    info = llama_cpp.llama_print_system_info().decode()
    assert "AMX_INT8 = 1" in info, f"llama.cpp was built without AMX here: {info}"
