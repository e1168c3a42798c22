"""pagesim against what a real vLLM server measured: vLLM's own CI benchmarks on real GPUs.

`calibration/published/measured.csv` holds the published figures (provenance: README.md there),
one row per CI test, statistic and GPU; the scenario files beside it reproduce each benchmark as
it ran (benchmark_latency.py: one offline batch; benchmark_serving.py: the OpenAI API server
under Poisson load; benchmark_throughput.py: one offline batch of 200 prompts). `check` runs
each (test, GPU) once, reads the row's statistic from the run as the benchmark computes it, and
gives measured | pagesim | error | source per row; `judged` rows (judge = yes) are the training
set the step-cost terms were fitted to (calibration/published_fit.py), `info` rows are printed
only.

    batch_latency_ms   the batch's wall time: the last request's end-to-end latency (all start
                       at 0; benchmark_latency.py times LLM.generate() of the whole batch)
    ttft_median_ms     median / mean time to first token as the client saw it (serving runs:
    ttft_mean_ms       the front end included, simulator/execution/frontend.py)
    itl_mean_ms        mean gap between streamed tokens over every request's tokens (what
                       benchmark_serving.py averages): sum(E2E - TTFT) / sum(output - 1)
    throughput_req_s   requests / the time the last one ends (benchmark_throughput.py)
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.engine import simulate
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.scenario.load import load_scenario

PUBLISHED_DIR = Path(__file__).parent / "published"
MEASURED_CSV = PUBLISHED_DIR / "measured.csv"
JUDGED_LIMIT = 0.10  # every judged row within 10% (issue 28's acceptance)
JUDGED_MEDIAN_LIMIT = 0.05  # and their median |error| at most 5%


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One CI test as it ran: its scenario file and the model it served (dummy weights)."""

    template: str  # scenario file in calibration/published/
    model: str  # pagesim's preset of the checkpoint
    checkpoint: str  # the Hugging Face model the CI ran
    tensor_parallel: int


# The CI tests of .buildkite/nightly-benchmarks/tests/{latency,serving,throughput}-tests.json
# (vLLM main, October-November 2024; the build pages name "llama-3.1 8B, llama-3 70B, mixtral
# 8x7B"). Llama-3.1-8B and Llama-3-8B share every shape pagesim prices; they differ in context
# length (128K and 8K), which decides chunked prefill (benchmark_latency.toml says why it does
# not change these runs).
_LATENCY, _SERVING, _THROUGHPUT = (
    "benchmark_latency.toml",
    "benchmark_serving.toml",
    "benchmark_throughput.toml",
)
_8B = ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B-Instruct", 1)
_70B = ("llama-3-70b", "meta-llama/Meta-Llama-3-70B-Instruct", 4)
_MIXTRAL = ("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", 2)
BENCHMARKS: dict[str, Benchmark] = {
    "latency_llama8B_tp1": Benchmark(_LATENCY, *_8B),
    "latency_llama70B_tp4": Benchmark(_LATENCY, *_70B),
    "latency_mixtral8x7B_tp2": Benchmark(_LATENCY, *_MIXTRAL),
    "serving_llama70B_tp4_qps_1": Benchmark(_SERVING, *_70B),
    "throughput_llama8B_tp1": Benchmark(_THROUGHPUT, *_8B),
    "throughput_llama70B_tp4": Benchmark(_THROUGHPUT, *_70B),
    "throughput_mixtral8x7B_tp2": Benchmark(_THROUGHPUT, *_MIXTRAL),
}
# The CI's GPU names (measured.csv `gpu`) -> pagesim's GPU presets.
GPUS = {"8xH100": "h100-sxm", "A100-SXM4-80GB": "a100-80gb", "8xH200": "h200-sxm"}


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
class MeasuredRow:
    """A row of measured.csv."""

    id: str  # the CI test and statistic, e.g. "latency_llama70B_tp4 median"
    test: str
    metric: str
    measured: float
    unit: str
    gpu: str  # the CI's GPU name
    is_judged: bool
    source: str


@dataclass(frozen=True, slots=True)
class CheckedRow:
    row: MeasuredRow
    predicted: float
    gpu_preset: str

    @property
    def error(self) -> float:
        """(pagesim - measured) / measured: positive when pagesim predicts more."""
        return self.predicted / self.row.measured - 1


_COLUMNS = ("id", "metric", "measured", "unit", "gpu", "judge", "source")


def read_measured(path: Path = MEASURED_CSV) -> list[MeasuredRow]:
    """The rows of a measured.csv (lines starting with # are comments), checked."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it: {exc}") from None
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; need {_COLUMNS}")
    rows = []
    for number, raw in enumerate(reader, start=2):
        where = f"{path}: row {number}"
        test = raw["id"].split()[0] if raw["id"] else ""
        if test not in BENCHMARKS:
            raise InputError(f"{where}: unknown test {test!r}; known: {choices_text(BENCHMARKS)}")
        if raw["metric"] not in METRICS:
            raise InputError(f"{where}: metric {raw['metric']!r}; valid: {choices_text(METRICS)}")
        if raw["gpu"] not in GPUS:
            raise InputError(f"{where}: gpu {raw['gpu']!r}; valid: {choices_text(GPUS)}")
        if raw["judge"] not in ("yes", "info"):
            raise InputError(f"{where}: judge {raw['judge']!r}; valid: yes, info")
        try:
            measured = float(raw["measured"])
        except ValueError:
            measured = math.nan
        if not (math.isfinite(measured) and measured > 0):
            raise InputError(f"{where}: measured {raw['measured']!r} is not a positive number")
        rows.append(
            MeasuredRow(
                raw["id"],
                test,
                raw["metric"],
                measured,
                raw["unit"],
                raw["gpu"],
                raw["judge"] == "yes",
                raw["source"],
            )
        )
    if not rows:
        raise InputError(f"{path}: no rows")
    return rows


def overrides_of(test: str, gpu: str) -> list[str]:
    """The `--set` overrides that turn the test's scenario file into the run of `gpu`."""
    b = BENCHMARKS[test]
    return [
        f"model.preset={b.model}",
        f"model.tensor_parallel={b.tensor_parallel}",
        f"gpu.preset={GPUS[gpu]}",
    ]


def run_benchmark(test: str, gpu: str) -> RunResult:
    """The CI test `test` on the CI's `gpu`, simulated."""
    scenario = load_scenario(PUBLISHED_DIR / BENCHMARKS[test].template, overrides_of(test, gpu))
    return simulate(scenario)


def check(rows: Iterable[MeasuredRow]) -> list[CheckedRow]:
    """pagesim's figure for each row (each (test, GPU) simulated once)."""
    runs: dict[tuple[str, str], RunResult] = {}
    checked = []
    for row in rows:
        key = (row.test, row.gpu)
        if key not in runs:
            runs[key] = run_benchmark(*key)
        checked.append(CheckedRow(row, METRICS[row.metric](runs[key]), GPUS[row.gpu]))
    return checked


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
    errors = np.abs([c.error for c in judged])
    worst = judged[int(np.argmax(errors))]
    return Verdict(len(judged), float(np.median(errors)), worst)


def table_text(checked: list[CheckedRow]) -> str:
    """measured | pagesim | error | source per row, then the judged rows' verdict."""
    lines = [
        f"{'row':<42} {'gpu':<10} {'measured':>10} {'pagesim':>10} {'error':>7}  judge  source",
    ]
    for c in checked:
        r = c.row
        lines.append(
            f"{r.id:<42} {c.gpu_preset:<10} {r.measured:>10.4g} {c.predicted:>10.4g} "
            f"{100 * c.error:>+6.1f}%  {'yes' if r.is_judged else 'info':<5}  {r.source}"
        )
    v = verdict(checked)
    lines.append(
        f"judged rows: {v.num_judged}, median |error| {100 * v.median_abs_error:.1f}% "
        f"(limit {100 * JUDGED_MEDIAN_LIMIT:.0f}%), worst {100 * v.worst.error:+.1f}% "
        f"({v.worst.row.id}, {v.worst.gpu_preset}; limit {100 * JUDGED_LIMIT:.0f}%): "
        f"{'met' if v.is_met else 'NOT met'}"
    )
    return "\n".join(lines)


def _record(c: CheckedRow) -> dict[str, object]:
    return asdict(c.row) | {"gpu_preset": c.gpu_preset, "pagesim": c.predicted, "error": c.error}


def write_outputs(checked: list[CheckedRow], folder: Path) -> tuple[Path, Path]:
    """published_check.csv (a row per measured row) and .json (the rows and the verdict)."""
    folder.mkdir(parents=True, exist_ok=True)
    records = [_record(c) for c in checked]
    csv_path = folder / "published_check.csv"
    pd.DataFrame.from_records(records).to_csv(csv_path, index=False)
    v = verdict(checked)
    payload = {
        "rows": records,
        "judged": {
            "num_rows": v.num_judged,
            "median_abs_error": v.median_abs_error,
            "worst_error": v.worst.error,
            "worst_row": v.worst.row.id,
            "worst_gpu": v.worst.gpu_preset,
            "is_met": v.is_met,
        },
    }
    json_path = folder / "published_check.json"
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return csv_path, json_path
