"""The `pagesim` commands that measure a GPU (or the CPU stand-in): calibrate, bench kernel,
validate-fidelity. Each parses its options, calls the calibration library, prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pagesim import console
from pagesim.app import app, bench_app

calibrate_app = typer.Typer()  # its help: the callback's docstring
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.callback(invoke_without_command=True)
def calibrate(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(help="Preset name or path to a config.json (needed without a command)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Profile JSON to write, a CSV of samples beside it (needed without a command)."
        ),
    ] = None,
    backend: Annotated[str, typer.Option(help="cupy (GPU) or numpy (CPU).")] = "numpy",
    quick: Annotated[bool, typer.Option(help="A small grid (minutes on a GPU).")] = False,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block (8, 16 or 32).")] = 16,
    tensor_parallel: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    floor_mode: Annotated[
        str,
        typer.Option(
            help="eager or cuda-graph: which executor minimal step prices a step's fixed cost "
            "(a GPU measures both)."
        ),
    ] = "eager",
    flush: Annotated[str, typer.Option(help="The GPU timer's L2 flush: read or memset.")] = "read",
) -> None:
    """Measure step costs and write a profile; or import, fit and check public measurements.

    Without a command: time the kernel, GEMMs, prefill and overhead on --backend and write the
    profile to --out. Commands: import-vidur (Vidur's public measurements as a profile),
    fit-roofline (the roofline's per-GPU factors, fitted to them), error-table (its errors),
    check-published (pagesim against vLLM's published runs on real GPUs).

    Example: pagesim calibrate --model llama-2-7b --backend cupy --quick --out h200.json
    """
    from pagesim.simulator.core.errors import InputError

    if ctx.invoked_subcommand is not None:
        if model is not None or out is not None:
            raise InputError(
                f"calibrate {ctx.invoked_subcommand}: --model and --out go after the command"
            )
        return
    if model is None or out is None:
        missing = " and ".join(n for n, v in (("--model", model), ("--out", out)) if v is None)
        raise InputError(
            f"calibrate needs {missing} (or a command: import-vidur, fit-roofline, error-table; "
            "see pagesim calibrate --help)"
        )
    from pagesim.calibration.outputs import check_out_file
    from pagesim.calibration.profile import profile_paths
    from pagesim.calibration.run import calibrate as run_calibration
    from pagesim.simulator.core.catalog import resolve_model

    for path in profile_paths(out):  # the profile JSON and its samples CSV beside it
        check_out_file(path)
    path = run_calibration(
        resolve_model(model),
        backend=backend,
        quick=quick,
        out=out,
        block_size=block_size,
        tensor_parallel=tensor_parallel,
        floor_mode=floor_mode,
        flush=flush,
        progress=lambda line: typer.echo(line, err=True),
    )
    typer.echo(f"profile: {path}")


VidurDir = Annotated[
    Path, typer.Argument(help="A copy of Vidur's data/profiling (e.g. vidur/data/profiling).")
]


@calibrate_app.command("import-vidur")
def import_vidur(
    directory: VidurDir,
    model: Annotated[
        str | None, typer.Option(help="llama-2-7b, llama-2-70b, llama-3-8b or llama-3-70b.")
    ] = None,
    gpu: Annotated[str | None, typer.Option(help="a100-80gb, h100-sxm or a40.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree (1, 2, 4, 8).")] = 1,
    out: Annotated[
        Path | None,
        typer.Option(help="Profile JSON to write; with --all, the folder for every profile."),
    ] = None,
    attention_profile: Annotated[
        Path | None,
        typer.Option(
            help="A profile of pagesim's own kernel (`pagesim calibrate`) for the attention, "
            "where Vidur did not measure it (default there: the roofline's)."
        ),
    ] = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Import every (model, GPU, TP) the data covers into --out, by name."
        ),
    ] = False,
) -> None:
    """Turn Vidur's per-operator GPU measurements into a pagesim profile (provenance included).

    Example: pagesim calibrate import-vidur vidur/data/profiling --model llama-2-70b
    --gpu a100-80gb --tp 2 --out a100-70b-tp2.json
    """
    from pagesim.calibration.outputs import check_out_file
    from pagesim.calibration.vidur_import import import_every, import_vidur, write_imported
    from pagesim.simulator.core.catalog import get_model
    from pagesim.simulator.core.errors import InputError

    if out is None:
        raise InputError("import-vidur needs --out (a .json file; with --all, a folder)")
    if every:
        for path in import_every(directory, out):
            typer.echo(f"profile: {path}")
        return
    if model is None or gpu is None:
        raise InputError("import-vidur needs --model and --gpu (or --all)")
    check_out_file(out, ".json")
    profile = import_vidur(directory, get_model(model), gpu, tp, attention_profile)
    path = write_imported(profile, out)
    for term, source in profile["sources"].items():
        typer.echo(f"{term}: {source}")
    typer.echo(f"profile: {path}")


@calibrate_app.command("fit-roofline")
def fit_roofline(
    directory: VidurDir,
    out: Annotated[Path | None, typer.Option(help="Also write the factors as JSON.")] = None,
) -> None:
    """Fit the roofline's per-GPU factors and interconnects to Vidur's measurements; print them
    as the preset files write them (simulator/core/presets/roofline_factors.toml and
    interconnects.toml hold this command's output).

    Example: pagesim calibrate fit-roofline vidur/data/profiling
    """
    from pagesim.calibration.outputs import check_out_file
    from pagesim.calibration.roofline_fit import constants_text, fit_all, write_fitted

    if out is not None:
        check_out_file(out)
    fitted = fit_all(directory)
    for found in fitted:
        typer.echo(constants_text(found))
    if out is not None:
        typer.echo(f"factors: {write_fitted(fitted, out)}")


@calibrate_app.command("error-table")
def error_table(
    directory: VidurDir,
    out: Annotated[Path, typer.Option(help="Markdown page to write.")] = Path(
        "calibration/profiles/ERRORS.md"
    ),
) -> None:
    """Tabulate the roofline's error against Vidur's measurements (before and after the fit, per
    operator and step shape) and the imported profiles' held-out error.

    Example: pagesim calibrate error-table vidur/data/profiling
    """
    from pagesim.calibration.outputs import check_out_file, write_out
    from pagesim.calibration.step_errors import error_page

    check_out_file(out)
    write_out(out, error_page(directory) + "\n")
    typer.echo(f"error table: {out}")


@calibrate_app.command("check-published")
def check_published(
    measured: Annotated[
        Path | None,
        typer.Option(help="A measured.csv to check (default: calibration/published/measured.csv)."),
    ] = None,
    held_out: Annotated[
        Path | None,
        typer.Option(help="A held_out.csv (default: calibration/published/held_out.csv)."),
    ] = None,
    draws: Annotated[
        int,
        typer.Option(min=1, help="Draws of the ShareGPT sample a throughput row is the median of."),
    ] = 8,
    out: Annotated[
        Path | None, typer.Option(help="Folder to write published_check.csv and .json into.")
    ] = None,
) -> None:
    """Run vLLM's published CI benchmarks in pagesim and print measured | pagesim | error |
    source per row, then the judged rows' median and worst error; exit 1 when they miss the
    limits (every judged row within 10%, median within 5%). A second table gives the held-out
    rows: printed, never a criterion.

    Example: pagesim calibrate check-published --out runs/published
    """
    from pagesim.calibration.published import (
        HELD_OUT_CSV,
        MEASURED_CSV,
        check,
        held_out_text,
        read_held_out,
        read_measured,
        table_text,
        verdict,
        write_outputs,
    )

    checked = check(read_measured(measured or MEASURED_CSV), draws)
    held = check(read_held_out(held_out or HELD_OUT_CSV), draws)
    typer.echo(table_text(checked))
    typer.echo("")
    typer.echo(held_out_text(held))
    if out is not None:
        for path in write_outputs(checked, out, held):
            typer.echo(f"wrote {path}")
    if not verdict(checked).is_met:
        raise typer.Exit(1)


@bench_app.command("kernel")
def bench_kernel(
    model: Annotated[
        list[str] | None, typer.Option(help="Preset name or config.json; repeat for more.")
    ] = None,
    shapes: Annotated[
        str,
        typer.Option(help="fidelity, long, all, or SEQSxCONTEXT pairs such as 2x200,8x600."),
    ] = "all",
    dtype: Annotated[
        list[str] | None, typer.Option(help="KV dtype fp16 or bf16; repeat for both (default).")
    ] = None,
    flush: Annotated[
        list[str] | None,
        typer.Option(
            help="L2 flush read or memset; repeat for both (default; the first times all)."
        ),
    ] = None,
    partition_sweep: Annotated[
        str, typer.Option(help="Forced split-K partition sizes, tokens (multiples of 128).")
    ] = "128,256,512,1024,2048",
    warmup: Annotated[int, typer.Option(help="Untimed runs per measurement.")] = 5,
    repeats: Annotated[int, typer.Option(help="Timed samples per measurement.")] = 30,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block.")] = 16,
    out: Annotated[Path | None, typer.Option(help="CSV of the rows.")] = None,
) -> None:
    """Time the paged-attention kernel per shape (GPU): GB/s, % of copy bandwidth, ratios.

    Example: pagesim bench kernel --model llama-3-8b --shapes fidelity --dtype bf16
    """
    from pagesim.calibration.harness import FLUSH_MODES
    from pagesim.calibration.kernel_bench import KV_DTYPES, bench_models, format_row
    from pagesim.calibration.outputs import check_out_file
    from pagesim.simulator.core.catalog import resolve_model

    if out is not None:
        check_out_file(out)

    rows = bench_models(
        [resolve_model(name) for name in model or ["llama-2-7b"]],
        shapes=shapes,
        partition_sweep=partition_sweep,
        out=out,
        kv_dtypes=tuple(dtype or KV_DTYPES),
        flushes=tuple(flush or FLUSH_MODES),
        warmup=warmup,
        repeats=repeats,
        block_size=block_size,
    )
    for row in rows:
        typer.echo(format_row(row))


@app.command("validate-fidelity")
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
        typer.Option("--set", help="Override a scenario key: --set systems[0].num_kv_blocks=512"),
    ] = None,
    cuda_graphs: Annotated[
        bool,
        typer.Option(help="Replay decode steps from CUDA graphs, as vLLM V1 runs them (GPU)."),
    ] = False,
) -> None:
    """Simulate a scenario and execute the same schedule for real; report step and request error.

    Example: pagesim validate-fidelity my_small_model.toml --calibrate-quick --requests 200
    """
    from pagesim.calibration.fidelity import check_fidelity
    from pagesim.calibration.outputs import check_out_folder
    from pagesim.reports.fidelity import write_fidelity_report

    check_out_folder(out)

    result = check_fidelity(
        scenario,
        list(set_ or []),
        out=out,
        profile=profile,
        calibrate_quick=calibrate_quick,
        backend=backend,
        num_layers=layers,
        num_requests=requests,
        system_name=system,
        cuda_graphs=cuda_graphs,
        progress=lambda line: typer.echo(line, err=True),
    )
    console.echo_fidelity(result, write_fidelity_report(result, out))
