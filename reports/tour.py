"""The folder `pagesim explain` writes: the tour's index and one block map page per system of
each stop (simulator/studies/tour.py), each opening on its moment with its sentences above.

    index.html                      the stops in order, their sentences, links to the pages
    NN_stop/<system>.html, .png     the block map page and its PNG strip
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pagesim.reports.block_map_page import write_block_map_page
from pagesim.reports.block_map_strip import draw_strip
from pagesim.reports.frames import unique_slugs
from pagesim.reports.html import CSS, esc
from pagesim.simulator.studies.tour import Visited

TITLE = "pagesim explain: a guided tour of the paged KV cache"
INTRO = (
    "Each stop is a small run of a built-in scenario (scenarios/tour/), every KV block recorded "
    "step by step. Its page opens on the moment that matters; move the slider or press play to "
    "see what led there and what follows. The sentences are built from the events the run "
    "recorded."
)


def write_tour(visited: Sequence[Visited], out: Path) -> Path:
    """Write the pages and the index into `out`; returns index.html."""
    sections = []
    for n, stop in enumerate(visited):
        slugs = unique_slugs([m.about.system for m, _ in stop.maps], reserved=frozenset())
        items = []
        nav = [("the tour", "../index.html")]
        if n + 1 < len(visited):
            following = visited[n + 1]
            first = unique_slugs([following.maps[0][0].about.system], reserved=frozenset())[0]
            nav.append((f"next: {following.title}", f"../{following.name}/{first}.html"))
        for (block_map, moment), slug in zip(stop.maps, slugs, strict=True):
            folder = out / stop.name
            draw_strip(block_map, folder / f"{slug}.png", [moment.index])
            write_block_map_page(
                block_map,
                folder / f"{slug}.html",
                title=f"{stop.number}. {stop.title}: {block_map.about.system}",
                intro=moment.sentences,
                open_at=moment.index,
                links=[*nav, ("this step as a PNG", f"{slug}.png")],
            )
            step = block_map.steps[moment.index].step
            sentences = " ".join(esc(s) for s in moment.sentences)
            items.append(
                f"<li><b>{esc(block_map.about.system)}</b> ({esc(block_map.about.policy)}): "
                f'{sentences} <a href="{esc(stop.name)}/{esc(slug)}.html">Open the block map at '
                f"step {step}</a>.</li>"
            )
        sections.append(
            f'<section id="{esc(stop.name)}"><h2>{stop.number}. {esc(stop.title)}</h2>'
            f'<ul>{"".join(items)}</ul><p class="note">Scenario: '
            f"<code>{esc(stop.path.name)}</code> (run it yourself with <code>pagesim run "
            f"{esc(stop.path)} --block-map all</code>).</p></section>"
        )
    index = out / "index.html"
    index.write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(TITLE)}</title><style>{CSS}</style></head><body><main>"
        f'<header><h1>{esc(TITLE)}</h1><p class="sub">{esc(INTRO)}</p></header>'
        f"{''.join(sections)}</main></body></html>\n",
        encoding="utf-8",
    )
    return index
