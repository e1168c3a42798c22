"""kernels/*.cu compile with nvcc for sm_80 and sm_90 without register spills, and suit NVRTC.

No GPU needed: `nvcc --cubin` only compiles. Skips with a reason where nvcc is absent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pagesim.calibration.kernel import kernel_path

NVCC = shutil.which("nvcc") or next(
    (p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc") if Path(p).exists()), None
)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")

# The variants the calibration and the benchmark use first: MHA paged and contiguous (Llama-2),
# GQA 4 (Llama-3-8B), the split-K reduce. The full grid is compiled by the slow test.
CORE_INSTANCES = """
PAGESIM_DECODE(0, 128, 16, 1, true)
PAGESIM_DECODE(0, 128, 16, 1, false)
PAGESIM_DECODE(0, 128, 16, 4, true)
PAGESIM_REDUCE(0, 128)
"""


def _compile(arch: str, source: Path, out: Path, *defines: str) -> subprocess.Popen[str]:
    command = [NVCC, "--cubin", "-std=c++17", f"-arch={arch}", "-Xptxas", "-v", *defines]
    command += [str(source), "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _check(processes: dict[str, subprocess.Popen[str]]) -> dict[str, dict[str, int]]:
    """Fails on a build error, a spill or a stack frame; returns {arch: {function: registers}}."""
    registers: dict[str, dict[str, int]] = {}
    for arch, process in processes.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"nvcc -arch={arch} failed:\n{output}"
        spills = re.findall(r"(\d+) bytes spill stores", output)
        assert spills, f"no ptxas report for {arch}:\n{output}"
        assert all(s == "0" for s in spills), f"register spills on {arch}:\n{output}"
        stacks = re.findall(r"(\d+) bytes stack frame", output)
        assert all(s == "0" for s in stacks), f"local-memory stack frame on {arch}:\n{output}"
        report = re.findall(
            r"Compiling entry function '(\w+)'.*?Used (\d+) registers", output, re.DOTALL
        )
        registers[arch] = {name: int(count) for name, count in report}
    return registers


# Llama-2-7B's variant (fp16, D 128, B 16, 1 head per CTA, paged): at most 128 registers per
# thread keeps 4 CTAs of 128 threads resident per SM (64k registers), 16 warps with 8 KiB of K/V
# loads in flight each, the headroom the >= 70%-of-copy-bandwidth target is planned on.
MHA_DECODE = "_ZN7pagesim16decode_attentionILi0ELi128ELi16ELi1ELb1EE"
MAX_MHA_REGISTERS = 128


@needs_nvcc
def test_core_variants_compile_for_sm80_and_sm90(tmp_path: Path) -> None:
    source = tmp_path / "core.cu"
    source.write_text(f'#include "{kernel_path()}"\n{CORE_INSTANCES}')
    processes = {
        arch: _compile(arch, source, tmp_path / f"{arch}.cubin") for arch in ("sm_80", "sm_90")
    }
    registers = _check(processes)
    for arch, functions in registers.items():
        (mha,) = [count for name, count in functions.items() if name.startswith(MHA_DECODE)]
        assert mha <= MAX_MHA_REGISTERS, f"{arch}: the MHA decode variant uses {mha} registers"


@needs_nvcc
@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("PAGESIM_FULL_COMPILE"),
    reason="about a minute on two cores: set PAGESIM_FULL_COMPILE=1 to compile the full grid",
)
def test_full_instantiation_grid_compiles(tmp_path: Path) -> None:
    processes = {
        arch: _compile(
            arch, kernel_path(), tmp_path / f"{arch}.cubin", "-DPAGESIM_INSTANTIATE_GRID"
        )
        for arch in ("sm_80", "sm_90")
    }
    _check(processes)


def test_kernel_sources_are_nvrtc_ready() -> None:
    """NVRTC gets no host headers: the source includes nothing and defines no host code."""
    for path in sorted(kernel_path().parent.glob("*.cu")):
        text = path.read_text()
        assert not re.search(r"^\s*#\s*include", text, re.MULTILINE), f"{path} includes a header"
        assert "__host__" not in text, f"{path} has host code"
        assert "int main" not in text, f"{path} has host code"


def test_kernel_documents_its_layout() -> None:
    text = kernel_path().read_text()
    assert "[num_blocks, num_kv_heads, block_size, head_dim]" in text
    assert "Why this layout" in text


# ---------------------------------------------------------- NVRTC, as CuPy's RawModule uses it


def _find_nvrtc() -> str | None:
    """libnvrtc: $PAGESIM_NVRTC, the toolkit's, or the loader's (pip's nvidia-cuda-nvrtc)."""
    candidates = [os.environ.get("PAGESIM_NVRTC"), ctypes.util.find_library("nvrtc")]
    candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    for candidate in candidates:
        if not candidate:
            continue
        try:
            lib = ctypes.CDLL(candidate)
            program = ctypes.c_void_p()
            source = b'extern "C" __global__ void probe() {}'
            lib.nvrtcCreateProgram(ctypes.byref(program), source, b"probe.cu", 0, None, None)
            status = lib.nvrtcCompileProgram(program, 0, None)  # needs nvrtc-builtins too
            lib.nvrtcDestroyProgram(ctypes.byref(program))
        except (OSError, AttributeError):
            continue
        if status == 0:
            return candidate
    return None


NVRTC = _find_nvrtc()
# CuPy's RawModule appends these to the caller's options (cupy.cuda.compiler._compile_with_cache_
# cuda); the language standard stays NVRTC's default (the source also builds as C++11).
CUPY_ADDED_OPTIONS = ("-ftz=true",)


def nvrtc_compile(source: str, names: list[str], options: list[str]) -> dict[str, str]:
    """Compile with NVRTC and return {name expression: lowered (mangled) name}."""
    lib = ctypes.CDLL(NVRTC)
    program = ctypes.c_void_p()

    def check(status: int, what: str) -> None:
        if status != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(program, log)
            raise AssertionError(f"NVRTC {what} failed ({status}):\n{log.value.decode()}")

    check(
        lib.nvrtcCreateProgram(
            ctypes.byref(program), source.encode(), b"paged_attention.cu", 0, None, None
        ),
        "create",
    )
    try:
        for name in names:
            check(lib.nvrtcAddNameExpression(program, name.encode()), f"name {name}")
        argv = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        check(lib.nvrtcCompileProgram(program, len(options), argv), "compile")
        lowered = {}
        for name in names:
            out = ctypes.c_char_p()
            check(lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(out)), name)
            lowered[name] = out.value.decode()
        return lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


@pytest.mark.skipif(NVRTC is None, reason="libnvrtc not found (set PAGESIM_NVRTC to its path)")
@pytest.mark.parametrize("arch", ["compute_80", "sm_90"])
def test_nvrtc_compiles_the_name_expressions_calibration_asks_for(arch: str) -> None:
    from pagesim.calibration.kernel import NVRTC_OPTIONS, Variant, kernel_source

    variants = [
        Variant("fp16", 128, 16, 1, True),
        Variant("fp16", 128, 16, 1, False),
        Variant("bf16", 64, 8, 7, True),
        Variant("bf16", 256, 32, 8, True),
    ]
    names = [n for v in variants for n in (v.decode_name, v.reduce_name)]
    options = [*NVRTC_OPTIONS, f"-arch={arch}", *CUPY_ADDED_OPTIONS]
    lowered = nvrtc_compile(kernel_source(), names, options)
    assert all(lowered[n].startswith("_Z") for n in names)
    assert nvrtc_compile(kernel_source(), [], options) == {}
