"""pagesim against what a real vLLM server measured: vLLM's own CI benchmarks on real GPUs.

`calibration/published/measured.csv` holds the published figures (provenance: README.md there),
one row per CI test, statistic and GPU; the scenario files beside it reproduce each benchmark as
it ran (benchmark_latency.py: one offline batch; benchmark_serving.py: the OpenAI API server
under Poisson load; benchmark_throughput.py: one offline batch of 200 prompts). `check` runs
each (test, GPU) once, reads the row's statistic from the run as the benchmark computes it, and
gives measured | pagesim | error | source per row; `judged` rows (judge = yes) are the training
set the step-cost terms were fitted to (calibration/published_fit.py), `info` rows are printed
only. `held_out.csv` holds further published runs of the same benchmarks, checked the same way
and printed as a second table: never fitted, never a criterion.

    batch_latency_ms   the batch's wall time: the last request's end-to-end latency (all start
                       at 0; benchmark_latency.py times LLM.generate() of the whole batch)
    ttft_median_ms     median / mean time to first token as the client saw it (serving runs:
    ttft_mean_ms       the front end included, simulator/execution/frontend.py)
    itl_mean_ms        mean gap between streamed tokens over every request's tokens (what
                       benchmark_serving.py averages): sum(E2E - TTFT) / sum(output - 1)
    throughput_req_s   requests / the time the last one ends (benchmark_throughput.py)

The ShareGPT runs draw their 200 requests from the ShareGPT length pairs of the model's
tokenizer (sharegpt_llama3.csv, sharegpt_mistral.csv; README.md there), as vLLM's scripts draw
200 conversations at random. A throughput figure is set by the one longest request of the draw,
which the CI's unpublished draw fixes and pagesim cannot know: for those rows pagesim's figure is
the median over `draws` draws (seeds 0, 1, ...), printed with their 10th-90th percentiles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibration.published_rows import (
    HELD_OUT_CSV,
    MEASURED_CSV,
    PUBLISHED_DIR,
    MeasuredRow,
    Role,
    read_rows,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario

__all__ = ["HELD_OUT_CSV", "MEASURED_CSV", "PUBLISHED_DIR", "MeasuredRow", "Role"]

JUDGED_LIMIT = 0.10  # every judged row within 10% (issue 28's acceptance)
JUDGED_MEDIAN_LIMIT = 0.05  # and their median |error| at most 5%
DRAWS = 8  # draws of the ShareGPT sample a throughput row's figure is the median of


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One CI test as it ran: its scenario file and the model it served (dummy weights)."""

    template: str  # scenario file in calibration/published/
    model: str  # pagesim's preset of the checkpoint
    checkpoint: str  # the Hugging Face model the CI ran
    tensor_parallel: int
    # ShareGPT length pairs of the checkpoint's tokenizer (calibration/published/), where the
    # benchmark samples ShareGPT; None for forced lengths
    sharegpt: str | None = None
    is_drawn: bool = False  # its figure is set by the draw's longest request: median of draws


# The CI tests of .buildkite/nightly-benchmarks/tests/{latency,serving,throughput}-tests.json
# (vLLM main, October-November 2024; the build pages name "llama-3.1 8B, llama-3 70B, mixtral
# 8x7B"). Llama-3.1-8B and Llama-3-8B share every shape pagesim prices; they differ in context
# length (128K and 8K), which decides chunked prefill (benchmark_latency.toml says why it does
# not change these runs). Llama-3 and 3.1 share one tokenizer; Mixtral has Mistral's own.
_LATENCY, _SERVING, _THROUGHPUT = (
    "benchmark_latency.toml",
    "benchmark_serving.toml",
    "benchmark_throughput.toml",
)
_LLAMA3_LENGTHS, _MISTRAL_LENGTHS = "sharegpt_llama3.csv", "sharegpt_mistral.csv"
_8B = ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B-Instruct", 1)
_70B = ("llama-3-70b", "meta-llama/Meta-Llama-3-70B-Instruct", 4)
_MIXTRAL = ("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", 2)
BENCHMARKS: dict[str, Benchmark] = {
    "latency_llama8B_tp1": Benchmark(_LATENCY, *_8B),
    "latency_llama70B_tp4": Benchmark(_LATENCY, *_70B),
    "latency_mixtral8x7B_tp2": Benchmark(_LATENCY, *_MIXTRAL),
    "serving_llama70B_tp4_qps_1": Benchmark(_SERVING, *_70B, _LLAMA3_LENGTHS),
    "throughput_llama8B_tp1": Benchmark(_THROUGHPUT, *_8B, _LLAMA3_LENGTHS, True),
    "throughput_llama70B_tp4": Benchmark(_THROUGHPUT, *_70B, _LLAMA3_LENGTHS, True),
    "throughput_mixtral8x7B_tp2": Benchmark(_THROUGHPUT, *_MIXTRAL, _MISTRAL_LENGTHS, True),
}
# The CI's GPU names (measured.csv `gpu`) -> pagesim's GPU presets.
GPUS = {"8xH100": "h100-sxm", "A100-SXM4-80GB": "a100-80gb", "H200": "h200-sxm"}


def _finished(result: RunResult) -> pd.DataFrame:
    requests = result.requests
    return requests[requests["status"] == "finished"]


def _itl_mean_s(result: RunResult) -> float:
    done = _finished(result)
    gaps = done["output_len"] - 1
    return float((done["e2e_s"] - done["ttft_s"]).sum() / gaps.sum())


# metric -> (its value in a run, in the CSV's unit)
METRICS: dict[str, Callable[[RunResult], float]] = {
    "batch_latency_ms": lambda r: 1e3 * float(_finished(r)["e2e_s"].max()),
    "ttft_median_ms": lambda r: 1e3 * float(_finished(r)["ttft_s"].median()),
    "ttft_mean_ms": lambda r: 1e3 * float(_finished(r)["ttft_s"].mean()),
    "itl_mean_ms": lambda r: 1e3 * _itl_mean_s(r),
    "throughput_req_s": lambda r: len(_finished(r)) / float(_finished(r)["e2e_s"].max()),
}


@dataclass(frozen=True, slots=True)
class CheckedRow:
    row: MeasuredRow
    predicted: float  # the run's figure; for a drawn test, the median over the draws
    gpu_preset: str
    spread: tuple[float, float] | None = None  # a drawn test's 10th and 90th percentiles

    @property
    def error(self) -> float:
        """(pagesim - measured) / measured: positive when pagesim predicts more."""
        return self.predicted / self.row.measured - 1


def read_measured(path: Path = MEASURED_CSV) -> list[MeasuredRow]:
    """The training set's rows (judge = yes or info), checked."""
    return read_rows(path, BENCHMARKS, METRICS, GPUS)


def read_held_out(path: Path = HELD_OUT_CSV) -> list[MeasuredRow]:
    """The held-out rows, checked: the same columns less `judge`."""
    return read_rows(path, BENCHMARKS, METRICS, GPUS)


def overrides_of(test: str, gpu: str, seed: int | None = None) -> list[str]:
    """The `--set` overrides that turn the test's scenario file into the run of `gpu` (and of
    draw `seed` of the ShareGPT sample, if given)."""
    b = BENCHMARKS[test]
    sets = [
        f"model.preset={b.model}",
        f"model.tensor_parallel={b.tensor_parallel}",
        f"gpu.preset={GPUS[gpu]}",
    ]
    if b.sharegpt is not None:
        lengths = PUBLISHED_DIR / b.sharegpt
        sets += [f"workload.prompt.path={lengths}", f"workload.output.path={lengths}"]
    if seed is not None:
        sets.append(f"seed={seed}")
    return sets


def run_benchmark(test: str, gpu: str, seed: int | None = None) -> RunResult:
    """The CI test `test` on the CI's `gpu`, simulated (the scenario's seed unless given)."""
    path = PUBLISHED_DIR / BENCHMARKS[test].template
    return simulate(load_scenario(path, overrides_of(test, gpu, seed)))


def check(rows: Iterable[MeasuredRow], draws: int = DRAWS) -> list[CheckedRow]:
    """pagesim's figure for each row: each (test, GPU) simulated once, a drawn test (module
    docstring) once per draw, seeds 0 to draws - 1."""
    if draws < 1:
        raise InputError(f"draws must be at least 1, got {draws}")
    runs: dict[tuple[str, str], list[RunResult]] = {}
    checked = []
    for row in rows:
        key = (row.test, row.gpu)
        if key not in runs:
            is_drawn = BENCHMARKS[row.test].is_drawn
            seeds = range(draws) if is_drawn else [None]
            runs[key] = [run_benchmark(*key, seed) for seed in seeds]
        values = np.array([METRICS[row.metric](run) for run in runs[key]])
        spread = None
        if len(values) > 1:
            spread = (float(np.percentile(values, 10)), float(np.percentile(values, 90)))
        checked.append(CheckedRow(row, float(np.median(values)), GPUS[row.gpu], spread))
    return checked


@dataclass(frozen=True, slots=True)
class Errors:
    """How a set of checked rows fell: their median |error| and the worst one."""

    num_rows: int
    median_abs_error: float
    worst: CheckedRow

    def describe(self) -> dict[str, object]:
        return {
            "num_rows": self.num_rows,
            "median_abs_error": self.median_abs_error,
            "worst_error": self.worst.error,
            "worst_row": self.worst.row.id,
            "worst_gpu": self.worst.gpu_preset,
        }


def errors_of(checked: list[CheckedRow]) -> Errors:
    errors = np.abs([c.error for c in checked])
    return Errors(len(checked), float(np.median(errors)), checked[int(np.argmax(errors))])


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judged rows' errors against the acceptance limits."""

    num_judged: int
    median_abs_error: float
    worst: CheckedRow

    @property
    def is_met(self) -> bool:
        return (
            abs(self.worst.error) <= JUDGED_LIMIT and self.median_abs_error <= JUDGED_MEDIAN_LIMIT
        )


def verdict(checked: Iterable[CheckedRow]) -> Verdict:
    judged = [c for c in checked if c.row.is_judged]
    if not judged:
        raise InputError("no judged rows (judge = yes) to check")
    e = errors_of(judged)
    return Verdict(e.num_rows, e.median_abs_error, e.worst)


def _row_lines(checked: list[CheckedRow]) -> list[str]:
    lines = [
        f"{'row':<42} {'gpu':<10} {'measured':>10} {'pagesim':>10} {'error':>7}  {'judge':<8} "
        "source",
    ]
    for c in checked:
        r = c.row
        source = r.source
        if c.spread is not None:  # a drawn test: where the draws fell
            source += f" [draws p10-p90: {c.spread[0]:.4g}-{c.spread[1]:.4g}]"
        lines.append(
            f"{r.id:<42} {c.gpu_preset:<10} {r.measured:>10.4g} {c.predicted:>10.4g} "
            f"{100 * c.error:>+6.1f}%  {r.role.value:<8} {source}"
        )
    return lines


def table_text(checked: list[CheckedRow]) -> str:
    """measured | pagesim | error | source per row, then the judged rows' verdict."""
    v = verdict(checked)
    return "\n".join(
        [
            *_row_lines(checked),
            f"judged rows: {v.num_judged}, median |error| {100 * v.median_abs_error:.1f}% "
            f"(limit {100 * JUDGED_MEDIAN_LIMIT:.0f}%), worst {100 * v.worst.error:+.1f}% "
            f"({v.worst.row.id}, {v.worst.gpu_preset}; limit {100 * JUDGED_LIMIT:.0f}%): "
            f"{'met' if v.is_met else 'NOT met'}",
        ]
    )


def held_out_text(checked: list[CheckedRow]) -> str:
    """The held-out table: the same columns, then its errors as they fall (no limit)."""
    if not checked:
        return "held out: no rows"
    e = errors_of(checked)
    return "\n".join(
        [
            "held out (never fitted, not a pass/fail criterion; calibration/published/README.md):",
            *_row_lines(checked),
            f"held-out rows: {e.num_rows}, median |error| {100 * e.median_abs_error:.1f}%, "
            f"worst {100 * e.worst.error:+.1f}% ({e.worst.row.id}, {e.worst.gpu_preset})",
        ]
    )


def _record(c: CheckedRow) -> dict[str, object]:
    low, high = c.spread if c.spread is not None else (None, None)
    return asdict(c.row) | {
        "role": c.row.role.value,
        "gpu_preset": c.gpu_preset,
        "pagesim": c.predicted,
        "error": c.error,
        "pagesim_p10": low,
        "pagesim_p90": high,
    }


def write_outputs(
    checked: list[CheckedRow], folder: Path, held_out: list[CheckedRow] | None = None
) -> tuple[Path, Path]:
    """published_check.csv (a row per measured and held-out row) and .json (the rows, the
    judged rows' verdict and the held-out rows' errors)."""
    folder.mkdir(parents=True, exist_ok=True)
    held = held_out or []
    records = [_record(c) for c in checked + held]
    csv_path = folder / "published_check.csv"
    pd.DataFrame.from_records(records).to_csv(csv_path, index=False)
    v = verdict(checked)
    payload = {
        "rows": records,
        "judged": errors_of([c for c in checked if c.row.is_judged]).describe()
        | {"is_met": v.is_met},
        "held_out": errors_of(held).describe() if held else None,
    }
    json_path = folder / "published_check.json"
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return csv_path, json_path
