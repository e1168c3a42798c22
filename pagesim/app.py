"""The `pagesim` command's typer apps and the options several commands share.

Commands live in pagesim.cli (simulation) and pagesim.cli_calibration (measuring a GPU); both
register on these apps, and `pagesim.cli.main` runs them.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="pagesim",
    help=(
        "Simulate LLM serving with a paged KV cache: latency, throughput, utilization and KV "
        "memory waste of static, Orca and vLLM-style batching on your model and GPU.\n\n"
        "Example: pagesim run scenarios/textbook_static_vs_continuous.toml --out runs/textbook"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from pagesim import __version__

        typer.echo(f"pagesim {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    """Simulate LLM serving with a paged KV cache (see the commands below)."""


scenarios_app = typer.Typer(
    help="List and show the built-in scenarios; print the scenario file reference.",
    no_args_is_help=True,
)
bench_app = typer.Typer(
    help="Benchmarks: the simulator's speed, the kernel's.", no_args_is_help=True
)
app.add_typer(scenarios_app, name="scenarios")
app.add_typer(bench_app, name="bench")

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario key: --set workload.arrival.rate_per_s=4"),
]
JobsOption = Annotated[
    int | None,
    typer.Option(help="Worker processes (or Ray CPUs); default: this machine's CPU count."),
]
ExecutorOption = Annotated[
    str, typer.Option(help="local (a process pool) or ray (a Ray cluster; see --address).")
]
AddressOption = Annotated[
    str | None,
    typer.Option(help="With --executor ray: the cluster to join (default: start a local Ray)."),
]
NoCacheOption = Annotated[
    bool,
    typer.Option("--no-cache", help="Simulate every point again (the cache is rewritten)."),
]
