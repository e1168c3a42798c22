"""The block_maps/ folder of a run recorded with --block-map, and the report section linking it.

    block_maps/<system-slug>.html   the interactive page (reports/block_map_page.py)
    block_maps/<system-slug>.png    a strip of its most telling steps (reports/block_map_strip.py)

report.json keeps the links (`BlockMapLink` rows) so that `pagesim report` draws the section
again; the files themselves are kept as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pagesim.reports.folder_names import BLOCK_MAPS_DIR
from pagesim.reports.frames import unique_slugs
from pagesim.reports.html import esc
from pagesim.simulator.core.errors import InputError

if TYPE_CHECKING:  # the recorder and the pages drawing it are imported only to draw them
    from pagesim.simulator.metrics.block_map import BlockMap

BlockMapLink = tuple[str, str, str, str]  # system, page, strip (relative hrefs), steps shown


def write_block_maps(maps: Sequence[BlockMap], out: Path) -> list[BlockMapLink]:
    """Each map's page and strip under out/block_maps/; returns the links for the report."""
    from pagesim.reports.block_map_page import write_block_map_page
    from pagesim.reports.block_map_strip import draw_strip

    links: list[BlockMapLink] = []
    slugs = unique_slugs([m.about.system for m in maps], reserved=frozenset())
    for block_map, slug in zip(maps, slugs, strict=True):
        about = block_map.about
        folder = out / BLOCK_MAPS_DIR
        draw_strip(block_map, folder / f"{slug}.png")
        first, last = block_map.steps[0].step, block_map.steps[-1].step
        steps = f"steps {first}–{last} of {block_map.num_steps_run:,}"
        write_block_map_page(
            block_map,
            folder / f"{slug}.html",
            title=f"Block map: {about.system}",
            intro=[
                f"Every KV block of system {about.system} ({about.policy}) in scenario "
                f"{about.scenario}, {steps}: move the slider, or press play. Hover a block "
                "for its owners, reference count and cached content."
            ],
            links=[("the run's report", "../report.html"), ("PNG strip", f"{slug}.png")],
        )
        page, strip = f"{BLOCK_MAPS_DIR}/{slug}.html", f"{BLOCK_MAPS_DIR}/{slug}.png"
        links.append((about.system, page, strip, steps))
    return links


def parse_links(value: object, where: str) -> list[BlockMapLink]:
    """report.json's "block_maps" (absent: none), each row checked (InputError naming `where`)."""
    if value is None:
        return []
    rows = value if isinstance(value, list) else [value]
    links: list[BlockMapLink] = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 4 and all(isinstance(x, str) for x in row)):
            raise InputError(
                f"{where}: 'block_maps' holds {row!r}, not [system, page, strip, steps]"
            )
        links.append((row[0], row[1], row[2], row[3]))
    return links


def block_maps_html(links: Sequence[BlockMapLink]) -> str:
    """The report's section: a link per system to its page and strip."""
    items = "".join(
        f'<li>{esc(system)}: <a href="{esc(page)}">block map</a> ({esc(steps)}) · '
        f'<a href="{esc(strip)}">PNG strip</a></li>'
        for system, page, strip, steps in links
    )
    return (
        "<p>Step by step, which request holds which KV block: block tables, reference counts, "
        "prefix-cache hits, copy-on-write, preemption and swapping, each step's events in "
        "words. Each page is one self-contained file.</p>"
        f"<ul>{items}</ul>"
    )
