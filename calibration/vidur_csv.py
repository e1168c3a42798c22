"""Reading the Vidur project's per-operator GPU measurements (microsoft/vidur, MIT License; times in
milliseconds), with one-line `InputError`s that name the file and the column.

Three kinds of file (the layout of Vidur's `data/profiling/`, as a clone of microsoft/vidur keeps
it):

    compute/<gpu>/meta-llama/<model>/mlp.csv           per-layer operators over num_tokens and TP
    compute/<gpu>/meta-llama/<model>/attention_tp<t>.csv   attention kernels (decode, prefill)
    network/<node>/all_reduce.csv                      NCCL all-reduce over message size, workers

Every column a file needs must be present and hold, in every row that uses it, a number in the
column's range (below: a kernel's median above 0, a count from 1, ...); a model shape column
(n_head, n_embd, ...) must match the model being imported. Rows measured
twice keep the median of their medians. Times are returned in **seconds**.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.simulator.core.catalog import ModelSpec
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.limits import (
    MAX_BLOCK_SIZE,
    MAX_COUNT,
    MAX_GIB,
    MAX_TENSOR_PARALLEL,
    TOKENS,
)
from pagesim.simulator.core.numbers import Range, column_numbers, short_repr
from pagesim.simulator.execution.profile_file import MAX_PROFILE_SECONDS

MS = 1e-3  # Vidur's files are in milliseconds
# QKV, output projection, MLP gate+up, MLP down
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# RMSNorm x 2, rotary embedding, SiLU-and-multiply, the residual add (vLLM fuses the other add
# into the second norm): Vidur's per-layer model counts each once
# (vidur/entities/execution_time.py).
SMALL_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
# The model's shape as an mlp.csv records it -> the ModelSpec field it must equal.
MLP_SHAPES = {
    "n_head": "num_heads",
    "n_kv_head": "num_kv_heads",
    "n_embd": "hidden_size",
    "n_expanded_embd": "intermediate_size",
    "use_gated_mlp": "is_gated_mlp",
}
ATTENTION_SHAPES = {"n_q_head": "num_heads", "n_kv_head": "num_kv_heads", "n_embd": "hidden_size"}

# The files of Vidur's data/profiling/ by git blob hash: where they are in microsoft/vidur and
# the last commit that changed them there (the date of the data as published; Vidur records no
# date of its own).
KNOWN_FILES = {
    "ee3dec76948e46c3f686a111198e9c5703908553": (
        "data/profiling/a100/attention.csv",
        "e2d00e9 2024-05-08",
    ),
    "6f53232adc5acdae0e06226720bcc948a466f954": (
        "data/profiling/compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv",
        "bee57da 2024-05-14",
    ),
    "479ed2f6ed22049ac444bca9fa44578532cbf28a": (
        "data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",
        "bee57da 2024-05-14",
    ),
    "6ddf5612f1704219b0bf3d41a15c2cf5ca3e8f1d": (
        "data/profiling/compute/a100/meta-llama/Meta-Llama-3-70B/mlp.csv",
        "2bb7a08 2024-07-24",
    ),
    "36db734a6943305b540bec7544002b12cc74639b": (
        "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
        "2bb7a08 2024-07-24",
    ),
    "04b7d23492b232d3f826abaec10b2ff4277696a7": (
        "data/profiling/compute/a40/meta-llama/Llama-2-70b-hf/mlp.csv",
        "e26eb8f 2024-05-14",
    ),
    "bd8dbc6cbca472e9e82078b2e4f417b9849fe216": (
        "data/profiling/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv",
        "e26eb8f 2024-05-14",
    ),
    "7f469cdea36cca4e571f50854a4e9b61654b91e0": (
        "data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv",
        "e26eb8f 2024-05-14",
    ),
    "661ea954e9508d67f37d3b24f0e07eb96f83ca46": (
        "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv",
        "e26eb8f 2024-05-14",
    ),
    "730776436cbd9e3e40aae50768e2b64921dd0379": (
        "data/profiling/network/a100_dgx/all_reduce.csv",
        "e26eb8f 2024-05-14",
    ),
    "cc3e55024a77899f5510355c766c56f8b4efe301": (
        "data/profiling/network/a100_pairwise_nvlink/all_reduce.csv",
        "60277c0 2024-07-28",
    ),
    "a7a2470393d9ad8786e2423f081d01f8997b4bdb": (
        "data/profiling/network/h100_dgx/all_reduce.csv",
        "e26eb8f 2024-05-14",
    ),
    "8d1b79e094a2c0134c929a42e376e585a552231e": (
        "data/profiling/network/h100_pairwise_nvlink/all_reduce.csv",
        "60277c0 2024-07-28",
    ),
}


def op_sum(columns: dict[str, np.ndarray], ops: tuple[str, ...], power: int = 1) -> np.ndarray:
    """The sum over `ops` of each row's value (raised to `power`)."""
    return np.asarray(np.sum([columns[op] ** power for op in ops], axis=0))


def file_provenance(path: Path) -> dict[str, str]:
    """The file's git blob hash and, when it is a known Vidur file, its place and date there."""
    data = path.read_bytes()
    blob = hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()
    found = KNOWN_FILES.get(blob)
    info = {"file": path.name, "git_blob": blob}
    if found is None:
        return info | {"vidur_path": "not a file pagesim knows", "vidur_commit": "not recorded"}
    commit, date = found[1].split()
    return info | {"vidur_path": found[0], "vidur_commit": commit, "vidur_date": date}


@dataclass(frozen=True)
class OperatorTable:
    """An mlp.csv: per-layer operator medians (s) over (num_tokens, tensor_parallel), a row each."""

    path: Path
    tokens: np.ndarray  # [rows] int
    tensor_parallel: np.ndarray  # [rows] int
    median_s: dict[str, np.ndarray]  # operator -> [rows]
    std_s: dict[str, np.ndarray]
    shapes: dict[str, int]

    def at_tp(self, tensor_parallel: int) -> OperatorTable:
        keep = self.tensor_parallel == tensor_parallel
        return OperatorTable(
            self.path,
            self.tokens[keep],
            self.tensor_parallel[keep],
            {k: v[keep] for k, v in self.median_s.items()},
            {k: v[keep] for k, v in self.std_s.items()},
            self.shapes,
        )


@dataclass(frozen=True)
class CollectiveTable:
    """An all_reduce.csv: medians (s) over message size (bytes) and workers."""

    path: Path
    num_workers: np.ndarray
    devices_per_node: np.ndarray
    size_bytes: np.ndarray
    median_s: np.ndarray
    std_s: np.ndarray

    def single_node(self, num_workers: int) -> tuple[np.ndarray, np.ndarray]:
        """(sizes, medians) of `num_workers` GPUs all in one node (what tensor parallelism uses,
        as Vidur's predictor selects them), sorted by size."""
        keep = (self.num_workers == num_workers) & (self.devices_per_node == num_workers)
        order = np.argsort(self.size_bytes[keep], kind="stable")
        return self.size_bytes[keep][order], self.median_s[keep][order]


@dataclass(frozen=True)
class AttentionTable:
    """An attention csv: decode over (batch, KV length per sequence); prefill over (chunk, cached
    KV before it), batch 1. Times (s) are the kernel plus its input/output reshapes."""

    path: Path
    block_size: int
    tensor_parallel: int
    decode_batch: np.ndarray
    decode_kv: np.ndarray
    decode_s: np.ndarray
    decode_std_s: np.ndarray
    prefill_chunk: np.ndarray
    prefill_kv: np.ndarray
    prefill_s: np.ndarray
    prefill_std_s: np.ndarray


def _read(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, index_col=False)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"{path}: not a readable CSV: {exc}".splitlines()[0]) from None
    if frame.empty:
        raise InputError(f"{path}: no data rows")
    return frame


# What each column may hold. A kernel's median was measured, so it is never 0 (a 0 would reach
# divisions and logarithms in the fit); a spread, or a reshape below the timer's resolution, may
# be. Times stop where a profile's do (execution/profile_file.py: a minute per piece of a step).
KERNEL_MS = Range(0, MAX_PROFILE_SECONDS / MS, lo_open=True, unit="ms")
SPREAD_MS = Range(0, MAX_PROFILE_SECONDS / MS, unit="ms")
TENSOR_PARALLEL = Range(1, MAX_TENSOR_PARALLEL, whole=True, unit="GPUs")
MESSAGE_BYTES = Range(1, MAX_GIB * 2**30, whole=True, unit="bytes")
BLOCK_TOKENS = Range(1, MAX_BLOCK_SIZE, whole=True, unit="tokens")
SEQUENCES = Range(1, MAX_COUNT, whole=True, unit="sequences")
CACHED_TOKENS = Range(0, MAX_COUNT, whole=True, unit="tokens")


def _numbers(
    frame: pd.DataFrame,
    path: Path,
    column: str,
    allowed: Range,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Column `column` as floats over `rows` (all by default): present, and every cell a number
    `allowed` holds (simulator/core/numbers.py: the grammar every data file is read with)."""
    if column not in frame.columns:
        raise InputError(f"{path}: column {column!r} is missing")
    raw = frame[column] if rows is None else frame[column][rows]
    values = column_numbers(raw.to_numpy())
    bad = allowed.outside(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        line = int(raw.index[i]) + 2  # the header is line 1
        shown = raw.iloc[i]
        what = "empty" if pd.isna(shown) else f"{short_repr(shown)} is not {allowed.describe()}"
        raise InputError(f"{path}: column {column!r}, line {line}: {what}")
    return values


def _check_shapes(
    frame: pd.DataFrame, path: Path, model: ModelSpec, columns: dict[str, str]
) -> dict[str, int]:
    shapes: dict[str, int] = {}
    for column, field in columns.items():
        if column not in frame.columns:
            raise InputError(f"{path}: column {column!r} is missing (the model's shape)")
        values = frame[column].unique()
        if len(values) != 1:
            raise InputError(f"{path}: column {column!r} holds several models' shapes")
        value = values[0]
        expected = getattr(model, field)
        if isinstance(expected, bool):
            got: object = str(value).strip().lower() == "true" if isinstance(value, str) else value
        else:
            got = pd.to_numeric(value, errors="coerce")
        if got != expected:
            raise InputError(
                f"{path}: column {column!r} is {short_repr(value)} but {model.name} has {field} "
                f"{expected!r}: these measurements are of another model"
            )
        shapes[column] = int(expected)
    return shapes


def _by_key(keys: list[np.ndarray], values: list[np.ndarray]) -> list[np.ndarray]:
    """Rows with equal keys merged: the median of each value column (keys first, then values)."""
    frame = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)})
    for i, v in enumerate(values):
        frame[f"v{i}"] = v
    merged = frame.groupby([f"k{i}" for i in range(len(keys))], as_index=False).median()
    return [merged[c].to_numpy() for c in merged.columns]


def read_operators(path: Path, model: ModelSpec) -> OperatorTable:
    """An mlp.csv measured for `model`'s shapes (InputError naming the column otherwise)."""
    frame = _read(path)
    shapes = _check_shapes(frame, path, model, MLP_SHAPES)
    tokens = _numbers(frame, path, "num_tokens", TOKENS)
    tp = _numbers(frame, path, "num_tensor_parallel_workers", TENSOR_PARALLEL)
    ops = (*LINEAR_OPS, *SMALL_OPS)
    medians = [_numbers(frame, path, f"time_stats.{op}.median", KERNEL_MS) * MS for op in ops]
    stds = [_numbers(frame, path, f"time_stats.{op}.std", SPREAD_MS) * MS for op in ops]
    merged = _by_key([tokens.astype(int), tp.astype(int)], medians + stds)
    return OperatorTable(
        path,
        merged[0].astype(int),
        merged[1].astype(int),
        dict(zip(ops, merged[2 : 2 + len(ops)], strict=True)),
        dict(zip(ops, merged[2 + len(ops) :], strict=True)),
        shapes,
    )


def read_all_reduce(path: Path) -> CollectiveTable:
    frame = _read(path)
    workers = _numbers(frame, path, "num_workers", TENSOR_PARALLEL)
    per_node = _numbers(frame, path, "devices_per_node", TENSOR_PARALLEL)
    size = _numbers(frame, path, "size", MESSAGE_BYTES)
    median = _numbers(frame, path, "time_stats.all_reduce.median", KERNEL_MS) * MS
    std = _numbers(frame, path, "time_stats.all_reduce.std", SPREAD_MS) * MS
    return CollectiveTable(path, workers.astype(int), per_node.astype(int), size, median, std)


def read_attention(path: Path, model: ModelSpec, tensor_parallel: int) -> AttentionTable:
    """An attention csv for `model` at `tensor_parallel` (decode and prefill rows)."""
    frame = _read(path)
    _check_shapes(frame, path, model, ATTENTION_SHAPES)
    tp_values = _numbers(frame, path, "num_tensor_parallel_workers", TENSOR_PARALLEL)
    if set(tp_values.astype(int)) != {tensor_parallel}:
        raise InputError(
            f"{path}: column 'num_tensor_parallel_workers' is {sorted(set(tp_values.astype(int)))}"
            f", not the tensor parallelism asked for ({tensor_parallel})"
        )
    block = _numbers(frame, path, "block_size", BLOCK_TOKENS)
    if "is_prefill" not in frame.columns:
        raise InputError(f"{path}: column 'is_prefill' is missing")
    flags = frame["is_prefill"].astype(str).str.strip().str.lower()
    if not flags.isin(("true", "false")).all():
        line = int(np.flatnonzero(~flags.isin(("true", "false")).to_numpy())[0]) + 2
        raise InputError(f"{path}: column 'is_prefill', line {line}: not True or False")
    is_prefill = (flags == "true").to_numpy()
    dec, pre = np.flatnonzero(~is_prefill), np.flatnonzero(is_prefill)
    if not len(dec) or not len(pre):
        raise InputError(f"{path}: column 'is_prefill': needs both decode and prefill rows")

    def timed(rows: np.ndarray, kernel: str) -> np.ndarray:
        total = _numbers(frame, path, f"time_stats.{kernel}.median", KERNEL_MS, rows)
        for part in ("attn_input_reshape", "attn_output_reshape"):
            if f"time_stats.{part}.median" in frame.columns:
                total = total + _numbers(frame, path, f"time_stats.{part}.median", SPREAD_MS, rows)
        return total * MS

    batch = _numbers(frame, path, "batch_size", SEQUENCES, dec)
    kv = _numbers(frame, path, "kv_cache_size", CACHED_TOKENS, dec)
    decode = _by_key(
        [batch.astype(int), kv.astype(int)],
        [
            timed(dec, "attn_decode"),
            _numbers(frame, path, "time_stats.attn_decode.std", SPREAD_MS, dec) * MS,
        ],
    )
    chunk = _numbers(frame, path, "prefill_chunk_size", TOKENS, pre)
    cached = _numbers(frame, path, "kv_cache_size", CACHED_TOKENS, pre)
    prefill = _by_key(
        [chunk.astype(int), cached.astype(int)],
        [
            timed(pre, "attn_prefill"),
            _numbers(frame, path, "time_stats.attn_prefill.std", SPREAD_MS, pre) * MS,
        ],
    )
    return AttentionTable(
        path,
        int(block[0]),
        tensor_parallel,
        decode[0],
        decode[1],
        decode[2],
        decode[3],
        prefill[0],
        prefill[1],
        prefill[2],
        prefill[3],
    )
