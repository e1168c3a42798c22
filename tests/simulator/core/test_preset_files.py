"""The hardware presets are data (simulator/core/presets/*.toml) read by one reader: every preset
round-trips (read, written, read again: equal), the catalog has exactly the files' presets, and a
broken file is refused with one line naming the file, the table and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import GPUS, TENSOR_PEAKS, custom_gpu
from pagesim.simulator.core.hardware import ALLREDUCE_KNOT_BYTES, GIB
from pagesim.simulator.core.link import LINK_PRESETS
from pagesim.simulator.core.preset_files import (
    PRESET_DIR,
    PRESET_FILES,
    PresetFileError,
    read_presets,
    shipped_presets,
)
from pagesim.simulator.core.preset_writer import write_presets

SHIPPED = shipped_presets()


def test_every_preset_round_trips(tmp_path: Path) -> None:
    written = write_presets(SHIPPED, tmp_path)
    assert sorted(p.name for p in written) == sorted(PRESET_FILES)
    again = read_presets(tmp_path)
    assert again == SHIPPED
    # and field by field, so a failure names the preset that moved
    for name, gpu in SHIPPED.gpus.items():
        assert again.gpus[name] == gpu, name
    for name, link in SHIPPED.interconnects.items():
        assert again.interconnects[name] == link, name


def test_the_catalog_is_the_files_presets() -> None:
    """Every preset the catalog offers comes from the files, and every file preset is used."""
    assert SHIPPED.gpus == GPUS
    assert SHIPPED.tensor_peaks == TENSOR_PEAKS
    assert SHIPPED.links == LINK_PRESETS
    assert set(SHIPPED.gpu_sources) == set(GPUS)
    used_links = {g.interconnect for g in GPUS.values()} | {SHIPPED.custom_interconnect}
    assert all(link in used_links for link in SHIPPED.interconnects.values())
    used_customs = {link.custom for link in SHIPPED.interconnects.values()}
    assert all(c in used_customs for c in SHIPPED.custom_allreduce.values())
    fitted_to = {g.factors.source for g in GPUS.values() if g.factors.is_fitted}
    assert fitted_to == {f.source for f in SHIPPED.factors.values()}


def test_figures_read_in_the_units_people_write() -> None:
    """[gpu.h200-sxm]: 141 GiB as marketed, 4,800 GB/s, 989 TFLOP/s dense (NVIDIA H200 page);
    the H100's fitted factors, marked extrapolated; the DGX H100 all-reduce, 2 GPUs measured at
    7 us for 8 KiB (Vidur network/h100_dgx)."""
    h200 = GPUS["h200-sxm"]
    assert h200.memory_bytes == 141 * GIB
    assert h200.mem_bandwidth_bps == 4800e9
    assert h200.fp16_flops == 989e12
    assert not h200.factors.is_fitted
    assert h200.factors.gemm_efficiency == GPUS["h100-sxm"].factors.gemm_efficiency == 0.7918
    small = dict(h200.interconnect.small_by_workers)
    assert len(small[2]) == len(ALLREDUCE_KNOT_BYTES)
    assert small[2][0] == 7e-6
    assert LINK_PRESETS["ib-ndr"].bandwidth_bytes_s == 50e9
    assert custom_gpu("mine", 10, 100, 50).interconnect is SHIPPED.custom_interconnect


@settings(max_examples=30)
@given(
    memory_gib=st.integers(1, 10_000),
    figures=st.lists(
        st.decimals(min_value="0.01", max_value="99999.99", places=2), min_size=3, max_size=3
    ),
)
def test_a_gpu_written_as_people_write_it_round_trips(
    tmp_path_factory: pytest.TempPathFactory, memory_gib: int, figures: list[object]
) -> None:
    """Any GPU given by decimal figures (as a datasheet writes them) reads back exactly."""
    folder = tmp_path_factory.mktemp("gpu")
    shutil.copytree(PRESET_DIR, folder, dirs_exist_ok=True)
    bandwidth, tflops, host = (str(f) for f in figures)
    with (folder / "gpus.toml").open("a") as f:
        f.write(
            f"\n[gpu.new]\nmemory_gib = {memory_gib}\nmem_bandwidth_gbps = {bandwidth}\n"
            f'fp16_tflops = {tflops}\nhost_link_gbps = {host}\nfactors = "a40"\n'
            f'interconnect = "pcie4"\nsource = "a test"\n'
        )
    presets = read_presets(folder)
    assert presets.gpus["new"].memory_bytes == memory_gib * GIB
    assert presets.gpus["new"].mem_bandwidth_bps == float(bandwidth) * 1e9
    out = tmp_path_factory.mktemp("out")
    write_presets(presets, out)
    assert read_presets(out) == presets


def _broken(tmp_path: Path, file_name: str, old: str, new: str) -> Path:
    shutil.copytree(PRESET_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / file_name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("file_name", "old", "new", "message"),
    [
        (
            "gpus.toml",
            "memory_gib = 80\n",
            "memory_gb = 80\n",
            "[gpu.a100-80gb]: unknown key 'memory_gb'; valid keys: ",
        ),
        (
            "gpus.toml",
            "mem_bandwidth_gbps = 1555\n",
            "",
            "[gpu.a100-40gb]: missing key 'mem_bandwidth_gbps'",
        ),
        (
            "gpus.toml",
            "fp16_tflops = 312\n",
            'fp16_tflops = "312"\n',
            "[gpu.a100-40gb] fp16_tflops: must be a number, got '312'",
        ),
        (
            "gpus.toml",
            'interconnect = "dgx-a100"',
            'interconnect = "nvlink9"',
            "[gpu.a100-40gb] interconnect: 'nvlink9' names nothing; valid: ",
        ),
        (
            "interconnects.toml",
            "knots_us = [46, 55, ",
            "knots_us = [",
            "[interconnect.dgx-a100] measured[0] knots_us: 17 figures; give one per size",
        ),
        (
            "links.toml",
            "latency_s = 0.0\n",
            "latency_s = true\n",
            "[link.ib-ndr] latency_s: must be a number, got True",
        ),
        (
            "roofline_factors.toml",
            "gemm_num_sms = 108",
            "gemm_num_sms = 108.5",
            "[factors.a100-80gb] gemm_num_sms: must be a whole number, got 108.5",
        ),
        ("links.toml", "[link.ib-hdr]", "[links.ib-hdr]", "unknown table [links]; valid: "),
    ],
)
def test_a_broken_file_is_refused_with_where_and_what(
    tmp_path: Path, file_name: str, old: str, new: str, message: str
) -> None:
    path = _broken(tmp_path, file_name, old, new)
    with pytest.raises(PresetFileError) as exc:
        read_presets(tmp_path)
    text = str(exc.value)
    assert text.startswith(str(path)), text
    assert message in text, text
    assert "\n" not in text


def test_the_gpus_of_2026_read_as_their_datasheets_give_them() -> None:
    """B200 (NVIDIA HGX table: 180 GB, 7.7 TB/s, FP4 72 PFLOPS dense per 8 GPUs), GB200 (NVL72:
    72 GPUs on one NVLink domain), B300 (no verified INT8 figure), MI355X (MXFP4 only: no
    NVFP4); none measured here, so their factors and links are marked extrapolated/estimates,
    and the round trip (above) covers them as every preset."""
    b200, gb200, mi355x = GPUS["b200"], GPUS["gb200"], GPUS["mi355x"]
    assert b200.memory_bytes == 180 * GIB and b200.mem_bandwidth_bps == 7700e9
    assert TENSOR_PEAKS["b200"].fp4 == 72e15 / 8
    assert TENSOR_PEAKS["b200"].runs_fp4("nvfp4") and TENSOR_PEAKS["b200"].runs_fp4("mxfp4")
    assert (gb200.scale_up_gpus, b200.scale_up_gpus, mi355x.scale_up_gpus) == (72, 8, 8)
    assert TENSOR_PEAKS["b300"].int8 is None
    assert TENSOR_PEAKS["mi355x"].runs_fp4("mxfp4") and not TENSOR_PEAKS["mi355x"].runs_fp4("nvfp4")
    assert TENSOR_PEAKS["mi300x"].fp4 is None and not TENSOR_PEAKS["mi300x"].runs_fp4("mxfp4")
    for name in ("b200", "gb200", "b300", "mi300x", "mi325x", "mi355x"):
        gpu = GPUS[name]
        assert not gpu.factors.is_fitted and not gpu.interconnect.is_fitted, name
        assert gpu.interconnect.custom is not None and not gpu.interconnect.custom.is_fitted
    assert (
        LINK_PRESETS["nvlink5"].bandwidth_bytes_s == 2 * LINK_PRESETS["nvlink4"].bandwidth_bytes_s
    )
