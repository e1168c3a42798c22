"""The `pagesim` commands that measure a GPU (or the CPU stand-in): calibrate, bench kernel,
validate-fidelity. Each parses its options, calls the calibration library, prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pagesim import console
from pagesim.app import app, bench_app


@app.command()
def calibrate(
    model: Annotated[str, typer.Option(help="Preset name or path to a config.json.")],
    out: Annotated[Path, typer.Option(help="Profile JSON to write (a CSV of samples beside it).")],
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
    """Measure step costs (kernel, GEMMs, prefill, overhead) and write a profile.

    Example: pagesim calibrate --model llama-2-7b --backend cupy --quick --out h200.json
    """
    from pagesim.calibration.run import calibrate as run_calibration
    from pagesim.simulator.core.catalog import resolve_model

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
    from pagesim.calibration.bench import KV_DTYPES, bench_models, format_row
    from pagesim.calibration.harness import FLUSH_MODES
    from pagesim.simulator.core.catalog import resolve_model

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
    from pagesim.reports.fidelity import write_fidelity_report

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
