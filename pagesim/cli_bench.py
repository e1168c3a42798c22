"""The `pagesim bench` commands that time pagesim itself: `bench sim` (the simulator, alone or
against another git revision) and `bench report` (a report against its run). Each parses its
options, calls one library function and prints; `bench kernel` (a GPU) is in cli_calibration."""

from __future__ import annotations

from typing import Annotated

import typer

from pagesim import console
from pagesim.app import SetOption, bench_app


@bench_app.command("sim")
def bench_sim(
    requests: Annotated[
        int | None, typer.Option(help="Trace rows to replay (default: the whole trace).")
    ] = None,
    trace: Annotated[str, typer.Option(help="Built-in trace name or CSV path.")] = "azure-conv",
    policy: Annotated[str, typer.Option(help="static, orca, vllm-v0 or vllm-v1.")] = "vllm-v1",
    synthetic: Annotated[
        int | None,
        typer.Option(help="Instead of a trace: this many ShareGPT-like Poisson requests."),
    ] = None,
    rate: Annotated[float, typer.Option(help="Arrival rate for --synthetic (req/s).")] = 8.0,
    against: Annotated[
        str | None,
        typer.Option(
            help="A git revision to time beside this tree (before/after, alternating runs)."
        ),
    ] = None,
    repeat: Annotated[
        int | None, typer.Option(help="Runs per side with --against (default 2); best kept.")
    ] = None,
    prefix_cache: Annotated[
        bool | None,
        typer.Option(
            "--prefix-cache/--no-prefix-cache",
            help="Set prefix caching on both sides (default: each revision's own default).",
        ),
    ] = None,
    replicas: Annotated[
        int, typer.Option(help="Replicas of a fleet, all on the benchmark's GPU.")
    ] = 1,
    router: Annotated[str, typer.Option(help="The fleet's router (see \\[cluster.router]).")] = (
        "round-robin"
    ),
    model: Annotated[
        str | None, typer.Option(help="A catalog model in place of Llama-2-7B.")
    ] = None,
    tensor_parallel: Annotated[int, typer.Option(help="Tensor-parallel degree per replica.")] = 1,
    instructions: Annotated[
        bool,
        typer.Option(
            "--instructions",
            help="Count the simulation's CPU instructions under valgrind instead of timing it "
            "(the same on every run; ~50x slower: use --requests); with --against, both sides.",
        ),
    ] = False,
) -> None:
    """Time the simulator: replay a trace (or --synthetic N requests) on Llama-2-7B / A100-80GB.

    Prints wall time, simulated requests, tokens and steps per wall second, and peak RSS; with
    --against REV, the same for git revision REV and this tree, and their ratio.
    Example: pagesim bench sim --synthetic 100000 --rate 8 --against HEAD~5
    A fleet: pagesim bench sim --replicas 8 --model llama-2-70b --tensor-parallel 2
    Instructions, not time: pagesim bench sim --requests 2000 --against HEAD~5 --instructions
    """
    from pagesim.simulator.studies.timing import BenchSpec

    spec = BenchSpec(
        policy,
        trace,
        requests,
        synthetic,
        rate,
        prefix_cache=prefix_cache,
        replicas=replicas,
        router=router,
        model=model,
        tensor_parallel=tensor_parallel,
    )
    if instructions:
        from pagesim.simulator.core.errors import InputError
        from pagesim.simulator.studies.bench_count import count_instructions

        if repeat is not None:
            raise InputError("--repeat does not apply to --instructions: a count repeats itself")
        console.echo_instructions(count_instructions(spec, against))
    elif against is None:
        from pagesim.simulator.studies.bench import bench_sim

        console.echo_speed(spec, bench_sim(spec))
    else:
        from pagesim.simulator.studies.bench_compare import compare_revisions

        console.echo_comparison(compare_revisions(against, spec, 2 if repeat is None else repeat))


@bench_app.command("report")
def bench_report(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    set_: SetOption = None,
    repeat: Annotated[int, typer.Option(min=1, max=20, help="Reports per kind; best kept.")] = 1,
) -> None:
    """Time a run's report beside its simulation: simulate every system, then write the report
    with the plots drawn in parallel (as `pagesim run` does) and by one process.

    Example: pagesim bench report latency_vs_rate_sharegpt --set workload.num_requests=1000
    """
    from pagesim.reports.report_bench import bench_report as measure

    t = measure(scenario, list(set_ or []), repeat)
    typer.echo(
        f"{t.scenario}: simulation {t.simulate_s:.2f} s ({t.num_requests} requests); "
        f"report {t.report_s:.2f} s = {t.ratio:.2f}x the simulation ({t.num_plots} plots, "
        f"{t.num_workers} processes); drawn by one process {t.serial_report_s:.2f} s"
    )
