"""`pagesim calibrate import-vidur`: a pagesim profile (the format calibration/profile.py writes)
from the Vidur project's measurements of one (model, GPU, tensor parallelism).

Each term of a step says where it comes from (`sources`, shown in the report):

- linear layers and the small operators (`gemm`, per layer): Vidur's mlp.csv medians, summed per
  token count, made non-decreasing, interpolated as calibration's GEMM series are;
- all-reduce (`all_reduce`, per call, 2 per layer): Vidur's single-node NCCL medians of the GPU's
  node at t workers, by half-octave size bins, interpolated in bytes, as measured: where they fall
  with size (NCCL's size regimes, calibration/allreduce_fit.knots_s) a larger message costs less,
  as the roofline's measured table does; the GPU's roofline link where Vidur has no all-reduce
  (A40);
- attention: Vidur's attention file where one exists for this (model, GPU, t); otherwise pagesim's
  own kernel profile when one is given (`--attention-profile`); otherwise the roofline's attention
  term with the GPU's factors;
- LM head and copy bandwidth: the roofline's (Vidur did not measure them);
- host overhead: not measured; the engine era's (execution/overhead.py) is added at run time.

Held-out points and units: vidur_sections.py's docstring.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pagesim.calibration.outputs import check_out_file, check_out_folder, write_out
from pagesim.calibration.vidur_csv import read_all_reduce, read_attention, read_operators
from pagesim.calibration.vidur_layout import VIDUR_GPUS, vidur_files
from pagesim.calibration.vidur_sections import (
    all_reduce_section,
    gemm_section,
    lm_head_section,
    measured_attention,
    profile_attention,
    provenance_section,
    roofline_attention,
    sources_section,
)
from pagesim.simulator.core.catalog import ModelSpec, get_gpu
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.profile_file import PROFILE_SCHEMA, PROFILE_SCHEMA_VERSION
from pagesim.simulator.execution.roofline import RooflineModel


def import_vidur(
    root: Path,
    model: ModelSpec,
    gpu_name: str,
    tensor_parallel: int,
    attention_profile: Path | None = None,
    complete: bool = False,
) -> dict[str, Any]:
    """The profile (a dict, written as JSON by `write_imported`) of `model` on `gpu_name` at
    `tensor_parallel`, from the files under `root` (every one Vidur published for it when
    `complete`: vidur_layout.vidur_files)."""
    if tensor_parallel < 1 or model.num_heads % tensor_parallel:
        raise InputError(
            f"--tp {tensor_parallel} must be >= 1 and divide {model.name}'s {model.num_heads} heads"
        )
    gpu = get_gpu(gpu_name)
    files = vidur_files(root, gpu_name, model.name, tensor_parallel, complete)
    operators = read_operators(files.operators, model)
    if not (operators.tensor_parallel == tensor_parallel).any():
        measured = sorted(set(operators.tensor_parallel.tolist()))
        raise InputError(
            f"{files.operators}: column 'num_tensor_parallel_workers' has no rows at "
            f"{tensor_parallel} (measured: {', '.join(map(str, measured))})"
        )
    roof = RooflineModel(model, gpu, ExecutionConfig(), tensor_parallel=tensor_parallel)
    read = [files.operators]
    block_size = 16  # vLLM's default; Vidur's attention files were measured at 16 too
    if files.attention is not None:
        table = read_attention(files.attention, model, tensor_parallel)
        decode, prefill = measured_attention(model, table)
        block_size = table.block_size
        read.append(files.attention)
    elif attention_profile is not None:
        decode, prefill, measured_block = profile_attention(
            attention_profile, model, tensor_parallel
        )
        block_size = measured_block or block_size
    else:
        decode, prefill = roofline_attention(roof)
    sections: dict[str, Any] = {
        "gemm": gemm_section(operators.at_tp(tensor_parallel)),
        "decode_attention": decode,
        "prefill_attention": prefill,
        "lm_head": lm_head_section(roof),
        "copy_bandwidth": {
            "median_bps": gpu.mem_bandwidth_bps * roof.factors.attention_bw_efficiency,
            "source": "roofline: datasheet bandwidth x the attention bandwidth factor",
        },
        "overhead": {
            "empty_step_s": 0.0,
            "host": "engine",
            "what": "not measured (Vidur timed kernels only): the engine era's host overhead "
            "(execution/overhead.py) is added to each step",
        },
    }
    if tensor_parallel > 1 and files.all_reduce is not None:
        node = VIDUR_GPUS[gpu_name].node or "?"
        sections["all_reduce"] = all_reduce_section(
            read_all_reduce(files.all_reduce), tensor_parallel, node
        )
        read.append(files.all_reduce)
    provenance = provenance_section(gpu, read)
    return {
        "schema": PROFILE_SCHEMA,
        "schema_version": PROFILE_SCHEMA_VERSION,
        "provenance": provenance,
        "model": model.dense_shape(),
        "measured": {
            "tensor_parallel": tensor_parallel,
            "block_size": block_size,
            "kv_dtype": "fp16",
        },
        "sources": sources_section(sections, roof, tensor_parallel),
        **sections,
    }


def _rounded(value: Any) -> Any:
    """Floats to 6 significant figures (the medians' own precision is 3 to 4)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def write_imported(profile: dict[str, Any], out: Path) -> Path:
    out = check_out_file(Path(out), ".json")
    text = json.dumps(_rounded(profile), indent=1)
    # Lists of numbers on one line each: a shipped profile stays short and diffs stay readable.
    text = re.sub(
        r"\[\s*([^\[\]{}\"]*?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m[1]) + "]", text
    )
    return write_out(out, text + "\n")


def builtin_name(model_name: str, gpu_name: str, tensor_parallel: int) -> str:
    """A shipped profile's name: `profile = "builtin:<name>"` in a scenario."""
    return f"vidur-{model_name}-{gpu_name}-tp{tensor_parallel}"


def import_every(root: Path, folder: Path) -> list[Path]:
    """Every (model, GPU, TP) Vidur measured, imported into `folder` under its built-in name."""
    from pagesim.calibration.vidur_layout import measured_combinations
    from pagesim.simulator.core.catalog import get_model

    check_out_folder(folder)
    profiles = {}  # all imported (every file read and checked) before the first is written
    for model_name, gpu_name in measured_combinations():
        model = get_model(model_name)
        files = vidur_files(root, gpu_name, model_name, 1, complete=True)
        operators = read_operators(files.operators, model)
        for tp in sorted(set(operators.tensor_parallel.tolist())):
            name = builtin_name(model_name, gpu_name, int(tp))
            profiles[name] = import_vidur(root, model, gpu_name, int(tp), complete=True)
    return [write_imported(profile, folder / f"{name}.json") for name, profile in profiles.items()]
