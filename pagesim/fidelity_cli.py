"""`pagesim validate-fidelity`: simulate a scenario, execute it for real, report the error.

Registered in pagesim/cli.py with `app.command("validate-fidelity")(validate_fidelity)`; errors
are simulator.core.errors.InputError, mapped to exit codes by the CLI's `main`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated

import typer

from pagesim.simulator.core.errors import InputError

BACKENDS = ("numpy", "cupy")


def validate_fidelity(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    out: Annotated[Path, typer.Option(help="Folder for the CSV, JSON, PNG and HTML.")] = Path(
        "runs/fidelity"
    ),
    profile: Annotated[
        Path | None, typer.Option(help="Profile JSON that predicts (default: the scenario's).")
    ] = None,
    calibrate_quick: Annotated[
        bool, typer.Option(help="Calibrate a quick profile on --backend first and predict with it.")
    ] = False,
    layers: Annotated[
        int | None, typer.Option(help="Layers to execute (time scaled by all/this; default all).")
    ] = None,
    requests: Annotated[int | None, typer.Option(help="Override the number of requests.")] = None,
    backend: Annotated[str, typer.Option(help="numpy (CPU) or cupy (GPU).")] = "numpy",
    system: Annotated[
        str | None, typer.Option(help="System to check (default: the first paged one).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a scenario key: --set systems.0.num_kv_blocks=512"),
    ] = None,
) -> None:
    """Simulate a scenario and execute the same schedule for real; report step and request error.

    Example: pagesim validate-fidelity my_small_model.toml --calibrate-quick --requests 200
    """
    from pagesim.calibration.fidelity import run_fidelity
    from pagesim.reports.fidelity import write_fidelity_report
    from pagesim.simulator.execution.profile import ProfileExtrapolationWarning
    from pagesim.simulator.scenario.load import load_scenario, resolve_scenario

    if backend not in BACKENDS:
        raise InputError(f"--backend: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if profile is not None and calibrate_quick:
        raise InputError("give either --profile or --calibrate-quick, not both")
    if profile is not None and not profile.is_file():
        raise InputError(f"--profile: no such file {profile}")
    loaded = load_scenario(resolve_scenario(scenario), list(set_ or []))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileExtrapolationWarning)  # the report counts them
        result = run_fidelity(
            loaded,
            system,
            profile=profile,
            calibrate_quick=calibrate_quick,
            backend=backend,
            num_layers=layers,
            num_requests=requests,
            out=out,
            progress=lambda line: typer.echo(line, err=True),
        )
    html = write_fidelity_report(result, out)
    e = result.step_error
    where = "CPU/NumPy" if result.backend == "numpy" else f"{result.device}"
    typer.echo(
        f"{result.scenario} / {result.system} on {where} ({result.layer_subset}), predicted by "
        f"{result.held_out.predictor}"
    )
    typer.echo(
        f"step time, {e.num_steps} steps: median |err| {e.median_abs_pct:.1f}%, "
        f"p90 |err| {e.p90_abs_pct:.1f}%, bias {e.bias_pct:+.1f}%"
    )
    for metric in ("ttft", "tpot", "e2e"):
        p50 = result.request_error(metric, "p50").pct_error
        p95 = result.request_error(metric, "p95").pct_error
        typer.echo(f"{metric.upper():5s} error: p50 {p50:+.1f}%  p95 {p95:+.1f}%")
    inside = result.held_out.fraction_inside_range
    if inside is not None:
        typer.echo(f"steps inside the profile's measured range: {inside:.1%}")
    typer.echo(f"steps: {result.files.get('steps_csv')}\nreport: {html}")
