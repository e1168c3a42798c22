"""`pagesim explain`: the guided tour of the paged KV cache (simulator/studies/tour.py), written
as block map pages (reports/tour.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pagesim import console
from pagesim.app import app
from pagesim.cli_output import commit as _commit
from pagesim.cli_output import output as _output


@app.command()
def explain(
    stop: Annotated[
        str | None,
        typer.Argument(
            help="One stop only, by number or name (e.g. 4 or parallel_sampling); default: all."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for the tour's pages.")] = Path("runs/explain"),
) -> None:
    """A guided tour of the paged KV cache, block by block: static vs continuous batching, a
    block table filling, a shared prefix, a fork with copy-on-write, preemption by swap and by
    recompute, Orca's reservations beside paged blocks. Each stop is a small run whose block
    map page opens on the moment that matters, explained in words.

    Example: pagesim explain --out runs/explain   (then open runs/explain/index.html)
    """
    from pagesim.reports.tour import write_tour
    from pagesim.simulator.studies.tour import STOPS, select_stops, visit

    chosen = select_stops(stop)
    with _output(out, "explain") as folder:
        visited = []
        with console.progress_bar(len(chosen), "touring") as advance:
            for index in chosen:
                visited.append(visit(index))
                advance(1)
        for done in visited:
            typer.echo(f"{done.number}. {done.title}")
            for block_map, moment in done.maps:
                typer.echo(f"   {block_map.about.system}: {moment.sentences[0]}")
        write_tour(visited, folder.staging)
        _commit(folder, "tour" if len(chosen) == len(STOPS) else visited[0].name)
    typer.echo(f"tour: {out / 'index.html'}")
