"""The `pagesim` command: each command parses its options, calls the library, prints.

The work is in the library (simulator.studies.runs, reports.folders, ...); how results look on
a terminal is in pagesim.console; `capacity` is in pagesim.cli_capacity, `bench sim` and
`bench report` in pagesim.cli_bench, the GPU-side commands (calibrate, bench kernel,
validate-fidelity) in pagesim.cli_calibration.
Errors map to exit codes in one place (`main`): bad input 2, a failed run 1, never a traceback
for input a person gave. Library imports stay inside the commands, so `pagesim --help` loads
typer only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pagesim import console, interrupts
from pagesim.app import (
    AddressOption,
    ExecutorOption,
    JobsOption,
    NoCacheOption,
    SetOption,
    app,
    scenarios_app,
)
from pagesim.cli_output import commit as _commit
from pagesim.cli_output import output as _output
from pagesim.simulator.core.errors import PagesimError


@app.command()
def run(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    out: Annotated[Path, typer.Option(help="Folder for the report and data.")] = Path("runs/last"),
    seed: Annotated[int | None, typer.Option(help="Override the scenario's seed.")] = None,
    set_: SetOption = None,
    report: Annotated[bool, typer.Option(help="Write the HTML/PNG report.")] = True,
    block_map: Annotated[
        str | None,
        typer.Option(
            "--block-map",
            help="Also record every KV block, step by step, into block_maps/ (an interactive "
            "page and a PNG strip per system): all (a run of at most 2,000 steps), N (the "
            "first N steps) or START:END (steps START..END-1, at most 2,000).",
        ),
    ] = None,
) -> None:
    """Run every system of a scenario side by side and write a report.

    Example: pagesim run swap_vs_recompute --out runs/swap --set workload.num_requests=100
    """
    from pagesim.reports.folders import write_run
    from pagesim.simulator.metrics.block_map_window import BlockMapWindow
    from pagesim.simulator.studies.runs import load_run, simulate_run

    window = None if block_map is None else BlockMapWindow.parse(block_map)
    overrides = list(set_ or []) + ([f"seed={seed}"] if seed is not None else [])
    loaded = load_run(scenario, overrides)
    with _output(out, "run", scenario=loaded.scenario.name) as folder:
        done = simulate_run(loaded, progress=console.progress_bar, block_map=window)
        console.echo_summaries(done.results)
        failed = console.echo_warnings(done.results)
        write_run(done, folder.staging, report=report)
        _commit(folder, done.scenario.name)
    typer.echo(f"report: {out / 'report.html'}" if report else f"data: {out}")
    if failed:
        raise PagesimError(f"every system rejected every request; see {out}")


@app.command()
def sweep(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    param: Annotated[
        list[str] | None,
        typer.Option(help="An axis: path=v1,v2,... (one or two); default: the file's \\[sweep]."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for the sweep table and report.")] = Path(
        "runs/sweep"
    ),
    set_: SetOption = None,
    jobs: JobsOption = None,
    executor: ExecutorOption = "local",
    address: AddressOption = None,
    no_cache: NoCacheOption = False,
    detail: Annotated[
        str | None,
        typer.Option(
            help="Also plot every system at one point, as a run report would: first, last, or "
            "path=value (e.g. workload.arrival.rate_per_s=2)."
        ),
    ] = None,
) -> None:
    """Run a scenario over one or two parameter axes, in parallel, and plot the curves.

    The report leads with the sweep's findings, curves and table; --detail adds one point's
    per-system plots. Each point is cached under OUT/cache by a hash of its resolved scenario:
    rerunning an interrupted sweep simulates only the missing points.

    Example: pagesim sweep latency_vs_rate_sharegpt --param workload.arrival.rate_per_s=1,2,4
    """
    from pagesim.reports.folders import write_sweep
    from pagesim.simulator.scenario.load import resolve_scenario
    from pagesim.simulator.studies.executors import check_executor
    from pagesim.simulator.studies.runs import sweep_scenario
    from pagesim.simulator.studies.sweep import plan_sweep, select_detail

    points = plan_sweep(resolve_scenario(scenario), list(set_ or []), list(param or []))
    select_detail(points, detail)  # a --detail naming no point fails before any work
    check_executor(executor, jobs, address)
    with _output(out, "sweep", keep=["cache"], scenario=points[0].scenario.name) as folder:
        done = sweep_scenario(
            points,
            out,
            executor=executor,
            jobs=jobs,
            address=address,
            use_cache=not no_cache,
            progress=console.progress_bar,
            detail=detail,
        )
        console.echo_sweep(done)
        write_sweep(done, folder.staging, list(set_ or []))
        _commit(folder, points[0].scenario.name)
    typer.echo(f"sweep table: {out / 'sweep.csv'}\nreport: {out / 'report.html'}")
    if (out / "frontier.csv").exists():
        typer.echo(f"Pareto frontier: {out / 'frontier.csv'}")


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A folder written by `pagesim run` or sweep.")],
) -> None:
    """Re-render the report of an earlier run from its saved data (after editing plots, say)."""
    from pagesim.reports.output_folder import ALL
    from pagesim.reports.render import render_saved
    from pagesim.reports.saved import read_saved

    saved = read_saved(run_dir)
    with _output(run_dir, saved.kind, keep=ALL, scenario=saved.scenario) as folder:
        render_saved(saved, folder.staging)
        _commit(folder, saved.scenario)
    typer.echo(f"report: {run_dir / 'report.html'}")


def _kv_help() -> str:
    """`pagesim kv --help`: what it does, then the catalog's models and GPUs (the README and
    the --gpu option point here)."""
    from pagesim.simulator.core.catalog import GPUS, MODELS

    return (
        "KV-cache arithmetic: bytes per token, sequence and block; what fits; paging vs "
        "max-length.\n\n"
        f"Models (--model, or a path to a Hugging Face config.json): {', '.join(MODELS)}.\n\n"
        f"GPUs (--gpu): {', '.join(GPUS)}.\n\n"
        "Example: pagesim kv --model llama-2-13b --seq-len 4096 --gpu a100-80gb --batch-size 10 "
        "--weights-gib 26"
    )


@app.command(help=_kv_help())
def kv(
    model: Annotated[
        str, typer.Option(help="A catalog model (listed above) or a path to a config.json.")
    ],
    seq_len: Annotated[list[int], typer.Option(help="Sequence length(s) in tokens.")],
    kv_dtype: Annotated[str, typer.Option(help="fp16, bf16 or fp8.")] = "fp16",
    weight_dtype: Annotated[
        str | None,
        typer.Option(help="bf16, fp16, fp8, int4, mxfp4 or nvfp4 (default: the model's own)."),
    ] = None,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block.")] = 16,
    gpu: Annotated[str | None, typer.Option(help="A GPU preset (listed above).")] = None,
    memory_utilization: Annotated[float, typer.Option(help="Share of GPU memory used.")] = 1.0,
    batch_size: Annotated[int, typer.Option(help="Sequences in the batch.")] = 1,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    weights_gib: Annotated[
        float | None,
        typer.Option(help="Weight memory per GPU in GiB (default: from params and dtype)."),
    ] = None,
    activation_reserve_gib: Annotated[
        float, typer.Option(help="Non-KV memory kept for activations, GiB (a run's default: 1).")
    ] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    from dataclasses import replace

    from pagesim.simulator.core.catalog import (
        get_gpu,
        parse_kv_dtype,
        parse_weight_dtype,
        resolve_model,
    )
    from pagesim.simulator.kv.sizing import format_report, gib_to_bytes, kv_report

    weight_bytes = None if weights_gib is None else gib_to_bytes(weights_gib, "--weights-gib")
    reserve_bytes = gib_to_bytes(activation_reserve_gib, "--activation-reserve-gib")
    spec = resolve_model(model)
    if weight_dtype is not None:
        spec = replace(spec, weight_dtype=parse_weight_dtype(weight_dtype, "--weight-dtype"))
    result = kv_report(
        spec,
        seq_len,
        kv_dtype=parse_kv_dtype(kv_dtype, "--kv-dtype"),
        block_size=block_size,
        gpu=get_gpu(gpu) if gpu else None,
        memory_utilization=memory_utilization,
        batch_size=batch_size,
        tensor_parallel=tp,
        weight_bytes=weight_bytes,
        activation_reserve_bytes=reserve_bytes,
    )
    typer.echo(json.dumps(result.to_dict(), indent=2) if as_json else format_report(result))


@app.command()
def validate(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    set_: SetOption = None,
) -> None:
    """Check a scenario file without running it."""
    from pagesim.simulator.studies.resolved import check_scenario

    console.echo_checked(check_scenario(scenario, list(set_ or [])))


@scenarios_app.command("list")
def scenarios_list() -> None:
    """The built-in scenarios, one line each, with the commands each is made for: run; sweep
    (it has a \\[sweep] table); capacity (a \\[capacity] table: a fleet search)."""
    from pagesim.simulator.scenario.load import builtin_commands, list_builtin

    typer.echo(f"{'NAME':40s} {'MADE FOR':22s} DESCRIPTION")
    for name, line in list_builtin():
        typer.echo(f"{name:40s} {', '.join(builtin_commands(name)):22s} {line}")
    typer.echo(
        "\nrun: pagesim run NAME; sweep: pagesim sweep NAME runs its [sweep] axes; capacity: "
        "pagesim capacity NAME runs its [capacity] fleet search. Any scenario also takes "
        "pagesim sweep NAME --param path=v1,v2 and pagesim capacity NAME (a rate search)."
    )


@scenarios_app.command("show")
def scenarios_show(
    name: Annotated[str, typer.Argument(help="Built-in name or path.")],
    resolved: Annotated[
        bool,
        typer.Option(
            "--resolved",
            help="Instead of the file: every system's knobs in force after the era defaults, "
            "each with its source, and the KV capacity it gets.",
        ),
    ] = False,
    set_: SetOption = None,
) -> None:
    """Print a scenario file, or (--resolved) the values a run would use and where they come
    from."""
    if not resolved:
        from pagesim.simulator.scenario.files import scenario_text

        text = scenario_text(name)  # a file that is not text is refused (reproducer 06)
        typer.echo(text, nl=not text.endswith("\n"))
        return
    from pagesim.simulator.studies.resolved import resolve_scenario_systems

    console.echo_resolved(*resolve_scenario_systems(name, list(set_ or [])))


@scenarios_app.command("golden")
def scenarios_golden(
    update: Annotated[
        bool, typer.Option(help="Rewrite the golden files (review the diff).")
    ] = False,
) -> None:
    """Rerun every built-in scenario and compare with (or --update) its golden summary."""
    from pagesim.simulator.studies.golden import check_builtins, update_builtins

    if update:
        update_builtins(on_written=lambda path: typer.echo(f"wrote {path}"))
    else:
        check_builtins(on_checked=console.echo_golden)


@scenarios_app.command("reference")
def scenarios_reference() -> None:
    """Print the scenario file reference: every table and key, every model, GPU and other
    preset (docs/scenario-reference.md is this output: pagesim scenarios reference >
    docs/scenario-reference.md)."""
    from pagesim.simulator.scenario.reference import render_reference

    typer.echo(render_reference(), nl=False)


# The benchmark and the GPU-side commands register on the same apps.
from pagesim import (  # noqa: E402, F401
    cli_bench,
    cli_calibration,
    cli_capacity,
    cli_deploy,
    cli_explain,
)


def main() -> None:
    """Entry point: typer reports usage errors itself (exit 2); pagesim's errors map here, and
    so do Ctrl-C and SIGTERM (one line saying what was kept; exit 128 + the signal)."""
    with interrupts.raising_on_signals():
        try:
            app()
        except PagesimError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None
        except interrupts.Interrupted as exc:
            typer.echo(interrupts.message(exc), err=True)
            raise SystemExit(exc.exit_code) from None
