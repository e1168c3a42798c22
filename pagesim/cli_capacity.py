"""`pagesim capacity`: the highest sustainable rate of each configuration, or, for a scenario
with a [capacity] section, the cheapest fleet that meets its SLO. Parses options, calls the
library (simulator.studies.runs.study_capacity, simulator.studies.fleet_study.study_fleets),
prints; the output folder is opened and committed as the other commands' are (pagesim.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pagesim import console
from pagesim.app import (
    AddressOption,
    ExecutorOption,
    JobsOption,
    NoCacheOption,
    SetOption,
    app,
)
from pagesim.cli_output import commit, output


@app.command()
def capacity(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    param: Annotated[
        list[str] | None,
        typer.Option(help="A configuration axis: path=v1,v2,... (one or two); default: none."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for the ranking and report.")] = Path(
        "runs/capacity"
    ),
    set_: SetOption = None,
    slo_share: Annotated[
        float, typer.Option(help="Share of offered requests that must meet the \\[slo].")
    ] = 0.9,
    max_queue_delay_s: Annotated[
        float, typer.Option(help="Bound on the p99 wait from arrival to admission (s).")
    ] = 5.0,
    rel_tol: Annotated[
        float | None,
        typer.Option(
            help="Rate search: stop when the failed rate is within this share of the max "
            "\\[default: 0.02]."
        ),
    ] = None,
    window_s: Annotated[
        float | None,
        typer.Option(
            help="Rate search: offer requests for at least this long at each rate (s): more "
            "requests than the scenario's when the rate needs them \\[default: 60]."
        ),
    ] = None,
    min_rate: Annotated[
        float | None, typer.Option(help="Rate search: lowest rate tried (req/s) \\[default: 0.01].")
    ] = None,
    max_rate: Annotated[
        float | None, typer.Option(help="Rate search: highest rate tried (req/s) \\[default: 1e4].")
    ] = None,
    jobs: JobsOption = None,
    executor: ExecutorOption = "local",
    address: AddressOption = None,
    no_cache: NoCacheOption = False,
    objective: Annotated[
        str | None,
        typer.Option(
            help="Rank by: in a rate search goodput per GPU (the default) or energy per "
            "output token; in a fleet search gpus (the default), cost or energy."
        ),
    ] = None,
) -> None:
    """Find each configuration's highest sustainable request rate, or, for a scenario with a
    \\[capacity] section, the fleet with the fewest GPUs that meets the SLO.

    Rate search: sustainable means at least --slo-share of the requests
    meet the scenario's \\[slo] and the p99 queueing delay stays under
    --max-queue-delay-s (simulator/studies/capacity_search.py). Each system,
    at each value of the --param axes, is one configuration, ranked by
    goodput per GPU.

    Fleet search, for a scenario with \\[capacity] (gpus, tensor_parallel,
    routers, replicas, prices): the same criteria on the scenario's own
    traffic (a trace replays at its own times); for each GPU x degree x
    router, the fewest replicas that meet them, ranked by GPUs and by cost
    (simulator/studies/fleet_search.py). On a disaggregated scenario:
    every prefill x decode count x degree per phase up to max_gpus, and
    its colocated twin on the same GPUs (simulator/studies/disagg_search.py).

    Examples: pagesim capacity latency_vs_rate_alpaca --set slo.ttft_s=1
    --set slo.tpot_s=0.1 --param systems.max_num_seqs=16,64,256;
    pagesim capacity fleet_capacity; pagesim capacity disaggregated_vs_colocated
    """
    from pagesim.simulator.core.errors import InputError
    from pagesim.simulator.scenario.load import load_scenario, resolve_scenario
    from pagesim.simulator.studies.objective import check_objective

    path = resolve_scenario(scenario)
    is_fleet = load_scenario(path, list(set_ or [])).capacity is not None
    objective = check_objective(objective, fleet=is_fleet)  # refused before any work
    if is_fleet:
        given = {"--rel-tol": rel_tol, "--window-s": window_s, "--min-rate": min_rate}
        given["--max-rate"] = max_rate
        for option, value in given.items():
            if value is not None:
                raise InputError(
                    f"{option}: applies to a rate search; {path.name} has a [capacity] section, "
                    "so this is a fleet search over its traffic as given (drop the option, or "
                    "the section for a rate search)"
                )
        fleet = (slo_share, max_queue_delay_s, jobs, executor, address, no_cache, objective)
        _capacity_fleets(path, param, out, set_, *fleet)
        return
    from pagesim.reports.folders import write_capacity
    from pagesim.simulator.studies.capacity_search import configurations
    from pagesim.simulator.studies.executors import check_executor
    from pagesim.simulator.studies.runs import study_capacity

    configs = configurations(path, list(set_ or []), list(param or []))
    check_executor(executor, jobs, address)
    with output(out, "capacity", keep=["cache"], scenario=configs[0].scenario.name) as folder:
        done = study_capacity(
            configs,
            out,
            slo_share=slo_share,
            max_queue_delay_s=max_queue_delay_s,
            rel_tol=0.02 if rel_tol is None else rel_tol,
            window_s=60.0 if window_s is None else window_s,
            min_rate=0.01 if min_rate is None else min_rate,
            max_rate=1e4 if max_rate is None else max_rate,
            executor=executor,
            jobs=jobs,
            address=address,
            use_cache=not no_cache,
            on_round=lambda n, size: typer.echo(f"round {n}: {size} rate(s)", err=True),
            objective=objective,
        )
        console.echo_capacity(done)
        write_capacity(done, folder.staging, list(set_ or []))
        commit(folder, configs[0].scenario.name)
    typer.echo(f"ranking: {out / 'capacity.csv'}\ncapacity page: {out / 'capacity.html'}")
    _echo_frontier(out)


def _capacity_fleets(
    path: Path,
    param: list[str] | None,
    out: Path,
    set_: list[str] | None,
    slo_share: float,
    max_queue_delay_s: float,
    jobs: int | None,
    executor: str,
    address: str | None,
    no_cache: bool,
    objective: str,
) -> None:
    """`pagesim capacity` on a scenario with [capacity]: the cheapest-fleet search."""
    from pagesim.reports.fleet_capacity import write_fleet_capacity
    from pagesim.simulator.studies.executors import check_executor
    from pagesim.simulator.studies.fleet_search import plan_fleets
    from pagesim.simulator.studies.fleet_study import study_fleets

    plan = plan_fleets(path, list(set_ or []), list(param or []))
    check_executor(executor, jobs, address)
    with output(out, "capacity", keep=["cache"], scenario=plan.shapes[0].scenario.name) as folder:
        done = study_fleets(
            plan,
            out,
            slo_share=slo_share,
            max_queue_delay_s=max_queue_delay_s,
            executor=executor,
            jobs=jobs,
            address=address,
            use_cache=not no_cache,
            on_round=lambda n, size: typer.echo(f"round {n}: {size} fleet(s)", err=True),
            objective=objective,
        )
        console.echo_fleet_capacity(done)
        write_fleet_capacity(done, folder.staging, list(set_ or []))
        commit(folder, plan.shapes[0].scenario.name)
    typer.echo(
        f"ranking: {out / 'capacity.csv'} (and capacity.json)\n"
        f"capacity page: {out / 'capacity.html'}"
    )
    _echo_frontier(out)


def _echo_frontier(out: Path) -> None:
    """Where the Pareto frontier went, when the search had one (simulator/studies/frontier.py)."""
    if (out / "frontier.csv").exists():
        typer.echo(f"Pareto frontier: {out / 'frontier.csv'}")
