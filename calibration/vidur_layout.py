"""Where a (model, GPU, tensor parallelism) lives in a copy of Vidur's profiling data.

    DIR/compute/<gpu dir>/<org>/<model dir>/mlp.csv
    DIR/compute/<gpu dir>/<org>/<model dir>/attention_tp<t>.csv     (when measured)
    DIR/network/<node>/all_reduce.csv                               (when measured)

`pagesim calibrate import-vidur` and `fit-roofline` name models and GPUs as pagesim does
(`llama-2-70b`, `a100-80gb`); the tables below translate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text


@dataclass(frozen=True, slots=True)
class VidurGpu:
    directory: str  # compute/<directory>
    node: str | None  # network/<node>: the one-node, all-NVLink machine Vidur measured
    description: str


# Vidur's GPUs: A100-SXM4-80GB and H100-SXM in DGX nodes (all GPUs on NVSwitch), A40 (its network
# folder has no all-reduce measurement).
VIDUR_GPUS = {
    "a100-80gb": VidurGpu("a100", "a100_dgx", "A100-SXM4-80GB, DGX A100 (NVLink 3 / NVSwitch)"),
    "h100-sxm": VidurGpu("h100", "h100_dgx", "H100-SXM, DGX H100 (NVLink 4 / NVSwitch)"),
    "a40": VidurGpu("a40", None, "A40 (no all-reduce measured)"),
}
VIDUR_MODELS = {
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
}


@dataclass(frozen=True, slots=True)
class VidurFiles:
    operators: Path
    attention: Path | None
    all_reduce: Path | None


def vidur_gpu(gpu_name: str) -> VidurGpu:
    found = VIDUR_GPUS.get(gpu_name.lower())
    if found is None:
        raise InputError(
            f"no Vidur measurements for GPU {gpu_name!r}; measured: {choices_text(VIDUR_GPUS)}"
        )
    return found


def vidur_files(root: Path, gpu_name: str, model_name: str, tensor_parallel: int) -> VidurFiles:
    """The files for one import, or an InputError saying what is missing."""
    if not root.is_dir():
        raise InputError(f"{root}: not a directory (a copy of Vidur's data/profiling)")
    gpu = vidur_gpu(gpu_name)
    model_dir = VIDUR_MODELS.get(model_name.lower())
    if model_dir is None:
        measured = choices_text(VIDUR_MODELS)
        raise InputError(f"no Vidur measurements for model {model_name!r}; measured: {measured}")
    folder = root / "compute" / gpu.directory / model_dir
    operators = folder / "mlp.csv"
    if not operators.is_file():
        raise InputError(f"{operators}: no such file (Vidur did not measure this model here)")
    attention = folder / f"attention_tp{tensor_parallel}.csv"
    all_reduce = None
    if gpu.node is not None and tensor_parallel > 1:
        all_reduce = root / "network" / gpu.node / "all_reduce.csv"
        if not all_reduce.is_file():
            all_reduce = None
    return VidurFiles(operators, attention if attention.is_file() else None, all_reduce)


def measured_combinations(root: Path) -> list[tuple[str, str]]:
    """(model, gpu) pairs whose mlp.csv exists under `root`, in table order."""
    return [
        (model, gpu)
        for gpu, spec in VIDUR_GPUS.items()
        for model, folder in VIDUR_MODELS.items()
        if (root / "compute" / spec.directory / folder / "mlp.csv").is_file()
    ]
