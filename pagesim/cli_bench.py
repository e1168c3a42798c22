"""The `pagesim bench` commands that time pagesim itself: `bench sim` (the simulator, alone or
against another git revision) and `bench report` (each report against its run). Each parses its
options, calls one library function and prints; `bench kernel` (a GPU) is in cli_calibration."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from pagesim import console
from pagesim.app import SetOption, bench_app
from pagesim.console import Column

if TYPE_CHECKING:
    from pagesim.reports.report_bench import ReportCost


@bench_app.command("sim")
def bench_sim(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="A scenario file, a shipped benchmark (vidur_case_c/vllm_v0, "
            "vidur_case_c/sarathi) or a built-in scenario, in place of the options that build "
            "one (--trace, --policy, ...)."
        ),
    ] = None,
    set_: SetOption = None,
    system: Annotated[
        str | None, typer.Option(help="With SCENARIO: its system to time (default: its only one).")
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="Trace rows to replay (default: the whole trace).")
    ] = None,
    trace: Annotated[
        str | None, typer.Option(help="Built-in trace name or CSV path (default: azure-conv).")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="static, orca, vllm-v0 or vllm-v1 (default: vllm-v1)."),
    ] = None,
    synthetic: Annotated[
        int | None,
        typer.Option(help="Instead of a trace: this many ShareGPT-like Poisson requests."),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Arrival rate for --synthetic (req/s) (default: 8).")
    ] = None,
    against: Annotated[
        str | None,
        typer.Option(
            help="A git revision to time beside this tree (before/after, alternating runs)."
        ),
    ] = None,
    repeat: Annotated[
        int | None,
        typer.Option(
            help="Runs per side, one process each (default 1; 2 with --against); the CPU times' "
            "best is kept and the wall times' range shown."
        ),
    ] = None,
    prefix_cache: Annotated[
        bool | None,
        typer.Option(
            "--prefix-cache/--no-prefix-cache",
            help="Set prefix caching on both sides (default: each revision's own default).",
        ),
    ] = None,
    replicas: Annotated[
        int | None, typer.Option(help="Replicas of a fleet, all on the benchmark's GPU.")
    ] = None,
    router: Annotated[
        str | None,
        typer.Option(help="The fleet's router (see \\[cluster.router]; default: round-robin)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="A catalog model in place of Llama-2-7B.")
    ] = None,
    tensor_parallel: Annotated[
        int | None, typer.Option(help="Tensor-parallel degree per replica (default: 1).")
    ] = None,
    instructions: Annotated[
        bool,
        typer.Option(
            "--instructions",
            help="Count the simulation's CPU instructions under valgrind instead of timing it "
            "(the same on every run; ~50x slower: use --requests); with --against, both sides.",
        ),
    ] = False,
) -> None:
    """Time the simulator: replay a trace (or --synthetic N requests) on Llama-2-7B / A100-80GB,
    or a scenario file's system.

    Leads with CPU time (steady on a busy machine) and, with --against REV, the CPU-time ratio
    of this tree to git revision REV from alternating runs; wall time only as its runs' range.
    Example: pagesim bench sim vidur_case_c/vllm_v0 --against main --repeat 3
    Synthetic: pagesim bench sim --synthetic 100000 --rate 8 --against HEAD~5
    A fleet: pagesim bench sim --replicas 8 --model llama-2-70b --tensor-parallel 2
    Instructions, not time: pagesim bench sim --requests 2000 --against HEAD~5 --instructions
    """
    from pagesim import console_bench
    from pagesim.simulator.core.errors import InputError
    from pagesim.simulator.studies.timing import BenchSpec

    built = {
        "--requests": requests, "--trace": trace, "--policy": policy, "--synthetic": synthetic,
        "--rate": rate, "--prefix-cache": prefix_cache, "--replicas": replicas,
        "--router": router, "--model": model, "--tensor-parallel": tensor_parallel,
    }  # fmt: skip
    if scenario is not None:
        given = [name for name, value in built.items() if value is not None]
        if given:
            raise InputError(
                f"{', '.join(given)}: not with a scenario file (set its keys with --set)"
            )
        from pagesim.simulator.studies.bench import file_spec

        spec = file_spec(scenario, list(set_ or []), system)
    else:
        if set_ or system is not None:
            raise InputError("--set and --system need a scenario file (SCENARIO)")
        spec = BenchSpec(
            policy or "vllm-v1",
            trace or "azure-conv",
            requests,
            synthetic,
            8.0 if rate is None else rate,
            prefix_cache=prefix_cache,
            replicas=1 if replicas is None else replicas,
            router=router or "round-robin",
            model=model,
            tensor_parallel=1 if tensor_parallel is None else tensor_parallel,
        )
    if instructions:
        from pagesim.simulator.studies.bench_count import count_instructions

        if repeat is not None:
            raise InputError("--repeat does not apply to --instructions: a count repeats itself")
        _echo(console_bench.instruction_lines(count_instructions(spec, against)))
    elif against is None:
        from pagesim.simulator.studies.bench_compare import time_this_tree

        _echo(console_bench.sitting_lines(time_this_tree(spec, 1 if repeat is None else repeat)))
    else:
        from pagesim.simulator.studies.bench_compare import compare_revisions

        comparison = compare_revisions(against, spec, 2 if repeat is None else repeat)
        _echo(console_bench.comparison_lines(comparison))


REPORT_COLUMNS: list[Column] = [
    ("scenario", "scenario", ""),
    ("kind", "kind", ""),
    ("run", "run CPU s", ".2f"),
    ("simulate", "(simulate)", ".2f"),
    ("data", "(data files)", ".2f"),
    ("report", "report CPU s", ".2f"),
    ("share", "report/run", ".2f"),
    ("budget", "budget s", ".2f"),
    ("within", "within", ""),
    ("run_wall", "run wall s", ".2f"),
    ("report_wall", "report wall s", ".2f"),
    ("plots", "plots", "d"),
]
BEFORE_COLUMNS: list[Column] = [
    ("before_run", "before: run CPU s", ".2f"),
    ("before", "before: report CPU s", ".2f"),
    ("ratio", "before/after", ".2f"),
    ("before_wall", "before: report wall s", ".2f"),
]


@bench_app.command("report")
def bench_report(
    scenarios: Annotated[
        list[str] | None,
        typer.Argument(help="Scenario TOML files or built-in names (default: every built-in)."),
    ] = None,
    set_: SetOption = None,
    kind: Annotated[
        str, typer.Option(help="run, sweep, or all: runs, and sweeps of files with \\[sweep].")
    ] = "all",
    repeat: Annotated[
        int, typer.Option(help="Rounds through every case; each figure is their median.")
    ] = 3,
    against: Annotated[
        str | None,
        typer.Option(help="A git revision timed beside this tree, alternating case by case."),
    ] = None,
) -> None:
    """Time each scenario's report beside its run, in CPU seconds (any plot-drawing workers
    included), each case in a fresh process: run = what `pagesim run --no-report` costs
    (interpreter, imports, simulation and data files; a sweep's points one after another);
    report = what writing the report adds beyond that (the plotting code's imports, the plots,
    the page). The budget is a third of the run, or 1 s, whichever is larger.

    Example: pagesim bench report textbook_static_vs_continuous --kind run --repeat 1
    """
    from pagesim.reports.report_bench import bench_cases, bench_reports

    def heard(side: str, cost: ReportCost) -> None:
        typer.echo(
            f"  {side}: {cost.scenario} {cost.kind}: run {cost.run_cpu_s:.2f} s, "
            f"report {cost.report_cpu_s:.2f} s CPU",
            err=True,
        )

    done = bench_reports(bench_cases(scenarios or [], kind), set_ or [], repeat, against, heard)
    rows = []
    for i, cost in enumerate(done.after):
        row: dict[str, object] = {
            "scenario": cost.scenario,
            "kind": cost.kind,
            "run": cost.run_cpu_s,
            "simulate": cost.simulate_cpu_s,
            "report": cost.report_cpu_s,
            "share": cost.report_share,
            "budget": cost.budget_s,
            "within": "yes" if cost.is_within_budget else "NO",
            "run_wall": cost.run_wall_s,
            "report_wall": cost.report_wall_s,
            "data": cost.data_cpu_s if cost.kind == "run" else None,
            "plots": cost.num_plots,
        }
        if done.before is not None:
            before = done.before[i]
            row |= {
                "before_run": before.run_cpu_s,
                "before": before.report_cpu_s,
                "ratio": before.report_cpu_s / cost.report_cpu_s,
                "before_wall": before.report_wall_s,
            }
        rows.append(row)
    low, high = done.load_1min
    typer.echo(
        f"median of {done.num_repeats} round(s), one process per case"
        + (f"; before = {done.revision}" if done.revision else "")
        + f"; 1-minute load average {low:.1f} to {high:.1f} on {os.cpu_count()} CPUs"
    )
    columns = REPORT_COLUMNS + (BEFORE_COLUMNS if done.before is not None else [])
    console.echo_table(rows, columns)
    within = sum(c.is_within_budget for c in done.after)
    typer.echo(f"{within} of {len(done.after)} reports within budget")


def _echo(lines: list[str]) -> None:
    for line in lines:
        typer.echo(line)
