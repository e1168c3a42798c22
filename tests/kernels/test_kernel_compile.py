"""kernels/*.cu compile with CuPy's flags, for every variant the catalog uses, with no spill and no
stack frame, within the registers their launch bounds promise; and suit NVRTC.

No GPU needed: `nvcc --cubin` only compiles. Skips with a reason where nvcc is absent. CuPy
compiles with -ftz=true (calibration/kernel.py's CUPY_NVRTC_FLAGS say where in CuPy's source),
which changes register allocation (the GQA-4 variant took 157 registers with it, 128 without),
so every build here uses CuPy's flags.
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

from pagesim.calibration.kernel import (
    CUPY_EQUIVALENT_NVCC_FLAGS,
    CUPY_NVRTC_FLAGS,
    LAYER_OPS_FILE,
    TIMING_FILE,
    Variant,
    kernel_path,
)
from pagesim.calibration.partitions import heads_per_cta, max_registers, min_ctas_per_sm, unroll
from pagesim.simulator.core.catalog import CLASSIC_MODELS as MODELS

NVCC = shutil.which("nvcc") or next(
    (p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc") if Path(p).exists()), None
)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
TENSOR_PARALLEL = (1, 2, 4, 8)
BLOCK_SIZES = (8, 16, 32)
H200_ARCH = "sm_90"  # the H200 (compute capability 9.0); CuPy compiles for the device's own


def catalog_variants() -> list[Variant]:
    """Every decode variant a catalog model launches: each (head_dim, heads per CTA) it has at
    tensor parallelism 1-8, in fp16 at every block size and in bf16 at 16 tokens, and the
    contiguous MHA baseline the bench times."""
    layouts = set()
    for model in MODELS.values():
        for t in TENSOR_PARALLEL:
            if model.num_heads % t == 0:
                group = max(1, model.num_heads // t) // model.kv_heads_per_gpu(t)
                layouts.add((model.head_dim, heads_per_cta(group)))
    variants = [Variant("fp16", d, b, h, True) for d, h in sorted(layouts) for b in BLOCK_SIZES]
    variants += [Variant("bf16", d, 16, h, True) for d, h in sorted(layouts)]
    return [*variants, Variant("fp16", 128, 16, 1, False)]


CATALOG = catalog_variants()
# The catalog's layouts at 16-token blocks (Llama-2-7B MHA paged and contiguous, Llama-3-8B GQA-4,
# Qwen2.5-7B GQA-7, Llama-2-70B GQA-8): also built for sm_80 (the A100s of the GPU catalog).
CORE = [
    Variant("fp16", 128, 16, 1, True),
    Variant("fp16", 128, 16, 1, False),
    Variant("fp16", 128, 16, 4, True),
    Variant("fp16", 128, 16, 7, True),
    Variant("fp16", 128, 16, 8, True),
]


def _instantiations(variants: list[Variant]) -> str:
    lines = set()
    for v in variants:
        tag = 0 if v.kv_dtype == "fp16" else 1
        paged = "true" if v.is_paged else "false"
        lines.add(
            f"PAGESIM_DECODE({tag}, {v.head_dim}, {v.block_size}, {v.heads_per_cta}, {paged})"
        )
        lines.add(f"PAGESIM_REDUCE({tag}, {v.head_dim})")
    return "\n".join(sorted(lines))


def _arch(build: str) -> int:
    return int(build.removeprefix("sm_"))


def _mirror_asserts(arch: int) -> str:
    """static_asserts that the .cu's Unroll and MinCtasPerSm (for this arch) equal
    calibration/partitions.py's."""
    lines = []
    for h in range(1, 9):
        lines.append(f'static_assert(pagesim::Unroll<{h}>::value == {unroll(h)}, "Unroll");')
        for d in (64, 128, 256):
            value = min_ctas_per_sm(h, d, arch)
            lines.append(
                f"static_assert(pagesim::MinCtasPerSm<{h}, {d}>::value == {value}, "
                f'"MinCtasPerSm<{h}, {d}>: calibration/partitions.py disagrees");'
            )
    return "\n".join(lines)


def _compile(arch: str, source: Path, out: Path, *defines: str) -> subprocess.Popen[str]:
    command = [NVCC, "--cubin", *CUPY_EQUIVALENT_NVCC_FLAGS, f"-arch={arch}", "-Xptxas", "-v"]
    command += [*defines, str(source), "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _check(processes: dict[str, subprocess.Popen[str]]) -> dict[str, dict[str, int]]:
    """Fails on a build error, a spill or a stack frame; returns {build: {function: registers}}."""
    registers: dict[str, dict[str, int]] = {}
    for build, process in processes.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"nvcc ({build}) failed:\n{output}"
        report = re.findall(
            r"Compiling entry function '(\w+)'.*?\n\s*(\d+) bytes stack frame, (\d+) bytes spill "
            r"stores.*?Used (\d+) registers",
            output,
            re.DOTALL,
        )
        assert report, f"no ptxas report ({build}):\n{output}"
        for name, stack, spills, _ in report:
            assert spills == "0", f"{build}: {name} spills {spills} bytes"
            assert stack == "0", f"{build}: {name} has a {stack}-byte stack frame (local memory)"
        registers[build] = {name: int(count) for name, _, _, count in report}
    return registers


DECODE = re.compile(r"decode_attentionILi(\d)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)E")


def _check_launch_bounds(functions: dict[str, int], build: str) -> int:
    """Each decode kernel within 65536 / (128 x its MinCtasPerSm) registers; returns how many."""
    checked = 0
    for name, count in functions.items():
        match = DECODE.search(name)
        if match is None:
            continue
        heads, head_dim = int(match[4]), int(match[2])
        limit = max_registers(heads, head_dim, _arch(build))
        assert count <= limit, (
            f"{build}: {name} uses {count} registers, over the {limit} that "
            f"{min_ctas_per_sm(heads, head_dim, _arch(build))} CTAs per SM allow"
        )
        checked += 1
    return checked


@needs_nvcc
def test_catalog_variants_compile_with_cupys_flags(tmp_path: Path) -> None:
    """Every catalog variant for the H200 (sm_90) and its 16-token ones for the A100 (sm_80), with
    -ftz=true as CuPy adds it: no spill, no stack frame, registers within the launch bounds, and
    the .cu's tables equal to the Python mirrors the split-K sizing reads."""
    assert {(v.head_dim, v.heads_per_cta) for v in CATALOG} == {(128, h) for h in (1, 4, 7, 8)}
    sources = {}
    for build, variants in ((H200_ARCH, CATALOG), ("sm_80", CORE)):
        source = tmp_path / f"{build}.cu"
        body = f"{_instantiations(variants)}\n{_mirror_asserts(_arch(build))}"
        source.write_text(f'#include "{kernel_path()}"\n{body}\n')
        sources[build] = source
    processes = {
        build: _compile(build, source, tmp_path / f"{build}.cubin")
        for build, source in sources.items()
    }
    registers = _check(processes)
    decode_kernels = {v.decode_name for v in CATALOG}
    assert _check_launch_bounds(registers[H200_ARCH], H200_ARCH) == len(decode_kernels)
    assert _check_launch_bounds(registers["sm_80"], "sm_80") == len(CORE)


@needs_nvcc
@pytest.mark.parametrize("name", [LAYER_OPS_FILE, TIMING_FILE])
def test_helper_kernels_compile_with_cupys_flags(tmp_path: Path, name: str) -> None:
    process = _compile(H200_ARCH, kernel_path(name), tmp_path / "helper.cubin")
    functions = _check({name: process})[name]
    expected = {
        LAYER_OPS_FILE: {"pagesim_add_rms_norm", "pagesim_silu_mul", "pagesim_write_kv"},
        TIMING_FILE: {"pagesim_noop", "pagesim_l2_flush_read"},
    }[name]
    assert set(functions) == expected


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
    for build, functions in _check(processes).items():
        assert _check_launch_bounds(functions, build) >= 10


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
    from pagesim.calibration.kernel import NVRTC_OPTIONS, kernel_source

    variants = [
        Variant("fp16", 128, 16, 1, True),
        Variant("fp16", 128, 16, 1, False),
        Variant("bf16", 64, 8, 7, True),
        Variant("bf16", 256, 32, 8, True),
    ]
    names = [n for v in variants for n in (v.decode_name, v.reduce_name)]
    options = [*NVRTC_OPTIONS, *CUPY_NVRTC_FLAGS, f"-arch={arch}"]
    lowered = nvrtc_compile(kernel_source(), names, options)
    assert all(lowered[n].startswith("_Z") for n in names)
    assert nvrtc_compile(kernel_source(), [], options) == {}
