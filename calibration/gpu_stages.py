"""The Python side of each stage of the GPU scripts (gpu_check.sh, fidelity_check.sh).

Each stage is one `python3 -c "from pagesim.calibration.gpu_stages import X; X(...)"` that the
script runs under a timeout. A stage writes its files into the folder it is given and prints its
key figures on lines starting with "## ", which the script copies into $OUT/summary.txt as they
come, so a stage cut short still leaves what it had measured. A stage that fails prints one
"## <stage>: FAILED: ..." line and exits 1 (the traceback goes to the log, not the summary).
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any


def say(line: str) -> None:
    print(f"## {line}", flush=True)


def _run(stage: str, work: Callable[[], None]) -> None:
    try:
        work()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        say(f"{stage}: FAILED: {type(exc).__name__}: {first}")
        raise SystemExit(1) from None


def preflight(need_simpy: bool, min_free_gib: float) -> None:
    """The preflight checks (calibration/preflight.py); exit 3 with one line if any fails."""
    from pagesim.calibration.preflight import PreflightError, run_preflight

    try:
        run_preflight(need_simpy=need_simpy, min_free_gib=min_free_gib, say=say)
    except PreflightError as exc:
        say(f"PREFLIGHT FAILED: {exc}")
        raise SystemExit(3) from None
    except Exception as exc:  # a bug in the checks themselves: still one line
        traceback.print_exc(file=sys.stderr)
        say(f"PREFLIGHT FAILED: {type(exc).__name__}: {exc}")
        raise SystemExit(3) from None


def bench(out_dir: str, repeats: int = 15) -> None:
    """The kernel benchmark: Llama-2-7B (MHA) and Llama-3-8B (GQA-4) on every default shape in
    fp16 and bf16, Llama-2-70B (GQA-8) on the fidelity shapes in fp16; bench.csv rewritten after
    each model (a stage cut short keeps what finished), one summary line per row."""

    def work() -> None:
        from pagesim.calibration.kernel_bench import (
            DEFAULT_SHAPES,
            FIDELITY_SHAPES,
            bench_kernel,
            write_rows_csv,
        )
        from pagesim.simulator.core.catalog import resolve_model

        plan = (
            ("llama-2-7b", DEFAULT_SHAPES, ("fp16", "bf16")),
            ("llama-3-8b", DEFAULT_SHAPES, ("fp16", "bf16")),
            ("llama-2-70b", FIDELITY_SHAPES, ("fp16",)),
        )
        rows: list[dict[str, object]] = []
        for name, shapes, dtypes in plan:
            model_rows = bench_kernel(
                resolve_model(name),
                shapes=shapes,
                kv_dtypes=dtypes,
                repeats=repeats,
                progress=lambda line: say(f"bench {line}"),  # each row as it is measured
            )
            rows += model_rows
            write_rows_csv(rows, Path(out_dir) / "bench.csv")

    _run("bench", work)


def calibrate(model: str, out_json: str) -> None:
    """A quick cupy calibration of `model`: the profile JSON + CSV at `out_json`."""

    def work() -> None:
        from pagesim.calibration.run import calibrate as run_calibration
        from pagesim.simulator.core.catalog import resolve_model

        path = run_calibration(
            resolve_model(model), "cupy", True, Path(out_json), progress=lambda x: say(x)
        )
        data = json.loads(path.read_text())
        overhead, decode = data["overhead"], data["decode_attention"]
        say(
            f"calibrate: floor eager {overhead['eager_step_s'] * 1e3:.3f} ms, graph "
            f"{_ms(overhead['graph_step_s'])}, graph error {overhead['graph_error']}; decode "
            f"held-out mean |err| {decode['held_out']['mean_abs_rel_err']}, max share of copy "
            f"bandwidth {decode['bandwidth']['max_share_of_copy']:.2f}"
        )

    _run("calibrate", work)


def _ms(value: Any) -> str:
    return "n/a" if value is None else f"{float(value) * 1e3:.3f} ms"


def fidelity(
    name: str, scenario_toml: str, profile_json: str, out_dir: str, cuda_graphs: bool
) -> None:
    """One fidelity run (Llama-2-7B, every layer executed): figures as it goes and at the end."""

    def work() -> None:
        from pagesim.calibration.fidelity import run_fidelity
        from pagesim.calibration.profile import with_floor_mode
        from pagesim.reports.fidelity import write_fidelity_report
        from pagesim.simulator.execution.profile import ProfileExtrapolationWarning
        from pagesim.simulator.scenario.load import load_scenario

        out = Path(out_dir)
        mode = "cuda-graph" if cuda_graphs else "eager"
        profile = with_floor_mode(Path(profile_json), mode, out / f"profile-{mode}.json")
        warnings.simplefilter("ignore", ProfileExtrapolationWarning)
        result = run_fidelity(
            load_scenario(scenario_toml),
            profile=profile,
            backend="cupy",
            out=out,
            cuda_graphs=cuda_graphs,
            progress=lambda line: say(f"{name}: {line}"),
        )
        print("report:", write_fidelity_report(result, out))
        e = result.step_error
        say(
            f"{name}: {result.scenario} on {result.device} ({result.layer_subset}, {mode}), "
            f"{result.wall_s} s: step time over {e.num_steps} steps: median |err| "
            f"{e.median_abs_pct:.2f}%, p90 |err| {e.p90_abs_pct:.2f}%, bias {e.bias_pct:+.2f}%"
        )
        for r in result.request_errors:
            say(
                f"{name}: {r.metric.upper()} {r.quantile}: simulated {r.simulated_s:.4f} s, "
                f"measured {r.measured_s:.4f} s, error {r.pct_error:+.2f}%"
            )
        for step_mode, figures in result.host_timing.items():
            say(f"{name}: host timing ({step_mode}): {figures}")
        graph_error = result.executor.get("graph_error")
        if graph_error:
            say(f"{name}: CUDA graphs turned off: {graph_error}")
        h = result.held_out
        say(f"{name}: inside the profile's range {h.fraction_inside_range}; {h.calibration}")

    _run(name, work)
