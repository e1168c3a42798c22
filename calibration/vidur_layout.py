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


# What Vidur published (microsoft/vidur data/profiling, the files vidur_csv.KNOWN_FILES lists): the
# models measured on each GPU, in VIDUR_MODELS' order, and the one (model, GPU, TP) with an
# attention file. A command that reads them needs every one: a file missing from a copy would
# change a fit or a profile without a word.
VIDUR_MEASURED = {
    "a100-80gb": ("llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b"),
    "h100-sxm": ("llama-2-7b", "llama-2-70b"),
    "a40": ("llama-2-7b", "llama-2-70b"),
}
VIDUR_ATTENTION = (("llama-2-70b", "a100-80gb", 2),)


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


def _data_file(path: Path, why: str) -> Path:
    """`path`, a regular file: else an InputError ending in `why` (what it holds, what to do)."""
    if path.is_file():
        return path
    problem = "is a folder, not a CSV file" if path.is_dir() else "no such file"
    raise InputError(f"{path}: {problem} ({why})")


_WHOLE_COPY = "give a whole copy of Vidur's data/profiling"


def check_vidur_root(root: Path) -> None:
    """`root` looks like a copy of Vidur's data/profiling (InputError otherwise)."""
    if not root.is_dir():
        raise InputError(f"{root}: not a directory (a copy of Vidur's data/profiling)")
    if not (root / "compute").is_dir():
        raise InputError(f"{root}: not a copy of Vidur's data/profiling (no compute/ folder in it)")


def vidur_files(
    root: Path, gpu_name: str, model_name: str, tensor_parallel: int, complete: bool = False
) -> VidurFiles:
    """The files for one (model, GPU, TP), or an InputError naming the one that is missing:
    mlp.csv always. An attention file or the node's all-reduce is read where present; with
    `complete` (a command that reproduces pagesim's shipped numbers from the whole data set),
    each one Vidur published is required too. Without it, a missing one is priced by the
    roofline, and the imported profile's sources say so."""
    check_vidur_root(root)
    gpu = vidur_gpu(gpu_name)
    model_dir = VIDUR_MODELS.get(model_name.lower())
    if model_dir is None:
        measured = choices_text(VIDUR_MODELS)
        raise InputError(f"no Vidur measurements for model {model_name!r}; measured: {measured}")
    folder = root / "compute" / gpu.directory / model_dir
    if model_name.lower() in VIDUR_MEASURED[gpu_name.lower()]:
        why = f"Vidur's measurements of {model_name} on {gpu_name}; {_WHOLE_COPY}"
    else:
        why = f"Vidur did not measure {model_name} on {gpu_name}"
    operators = _data_file(folder / "mlp.csv", why)
    attention = folder / f"attention_tp{tensor_parallel}.csv"
    if complete and (model_name.lower(), gpu_name.lower(), tensor_parallel) in VIDUR_ATTENTION:
        _data_file(attention, f"Vidur's attention measurements here; {_WHOLE_COPY}")
    all_reduce = None
    if gpu.node is not None and tensor_parallel > 1:
        all_reduce = root / "network" / gpu.node / "all_reduce.csv"
        if complete:
            why = f"Vidur's all-reduce measurements of {gpu.node}; {_WHOLE_COPY}"
            _data_file(all_reduce, why)
    return VidurFiles(
        operators,
        attention if attention.is_file() else None,
        all_reduce if all_reduce is not None and all_reduce.is_file() else None,
    )


def measured_combinations() -> list[tuple[str, str]]:
    """(model, gpu) pairs Vidur published, in table order (GPU, then model)."""
    return [(model, gpu) for gpu, models in VIDUR_MEASURED.items() for model in models]
