"""The block map page: one self-contained HTML file (CSS, script and data inline; nothing is
fetched, so it opens from a file and offline) that replays a recorded block map step by step.

    GPU blocks    a grid coloured by owner: free (white), cached and free (hatched), held
                  (the owner's colour; outlined when shared, a dot when cached); the blocks the
                  step's events name are ringed. Contiguous caches (static, Orca): one cell per
                  block_size token slots, each region shaded computed / reserved /
                  over-reserved / allocator rounding
    CPU blocks    the swap space, when the window swaps
    tables        each sequence's block table, GPU (or CPU while swapped), with its fill
    this step     the step's events in words (simulator/metrics/block_events.py)

A step slider with play/pause walks the window; the page opens on `open_at`. The data is the
map's own (the state before the window, then per step what changed), rebuilt in the browser as
`BlockMap.states()` rebuilds it (reports/block_map.js).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from pagesim.reports.html import esc
from pagesim.simulator.metrics.block_frames import Owner, RegionState, SeqState
from pagesim.simulator.metrics.block_map import BlockMap, StepRecord


def _asset(name: str) -> str:
    return resources.files("pagesim.reports").joinpath(name).read_text(encoding="utf-8")


class _Owners:
    """Owners numbered in first-seen order, for the page's compact rows."""

    def __init__(self) -> None:
        self.index: dict[Owner, int] = {}

    def __call__(self, owner: Owner) -> int:
        return self.index.setdefault(owner, len(self.index))

    def rows(self) -> list[list[object]]:
        return [[o.request_id, o.sample, o.label] for o in self.index]


def _seq_row(seq: SeqState, owners: _Owners) -> list[object]:
    return [
        seq.seq_id,
        owners(seq.owner),
        int(seq.is_swapped),
        seq.num_tokens,
        seq.num_computed_tokens,
        list(seq.table),
    ]


def _region_row(region: RegionState, owners: _Owners) -> list[int]:
    return [
        region.seq_id,
        owners(region.owner),
        region.offset,
        region.num_held,
        region.num_asked,
        region.num_computed,
        region.final_len,
    ]


def _step_row(record: StepRecord, owners: _Owners) -> dict[str, object]:
    q = record.queues
    return {
        "n": record.step,
        "t": [record.start_s, record.end_s],
        "b": [list(x) for x in record.blocks],
        "c": [list(x) for x in record.cpu_blocks],
        "s": [_seq_row(s, owners) for s in record.seqs],
        "k": [list(x) for x in record.tokens],
        "g": list(record.gone),
        "r": [_region_row(r, owners) for r in record.regions],
        "q": [list(q.running), list(q.waiting), list(q.swapped), list(q.lengths)],
        "e": [[e.kind.value, e.text, list(e.blocks)] for e in record.events],
        "w": [record.num_prefill_tokens, record.num_decode_tokens],
    }


def page_data(block_map: BlockMap, open_at: int = 0) -> dict[str, object]:
    """What the page's script reads (see reports/block_map.js); `open_at` indexes the steps."""
    owners = _Owners()
    initial = block_map.initial
    data: dict[str, object] = {
        "about": {
            "kind": block_map.about.kind,
            "block_size": block_map.about.block_size,
            "num_blocks": block_map.about.num_blocks,
            "num_cpu_blocks": block_map.about.num_cpu_blocks,
            "num_slots": block_map.about.num_slots,
        },
        "initial": {
            "refs": initial.ref_counts,
            "contents": initial.contents,
            "cpu": initial.cpu_ref_counts,
            "seqs": [_seq_row(s, owners) for s in initial.seqs.values()],
            "regions": [_region_row(r, owners) for r in initial.regions.values()],
        },
        "steps": [_step_row(r, owners) for r in block_map.steps],
        "contents": {str(k): v for k, v in block_map.contents.items()},
        "open_at": open_at,
        "shows_cpu": any(initial.cpu_ref_counts) or any(r.cpu_blocks for r in block_map.steps),
    }
    data["owners"] = owners.rows()
    return data


def _cell_px(num_cells: int) -> int:
    for limit, px in ((128, 30), (512, 22), (2048, 14)):
        if num_cells <= limit:
            return px
    return 8


def _legend(kind: str) -> str:
    if kind == "contiguous":
        return (
            '<p class="seg-note">One cell per block_size token slots. In a region, darkest: '
            "computed; then reserved for tokens still to come; then over-reserved (never "
            "filled); palest: the allocator's rounding. White: a hole.</p>"
        )
    swatches = [
        ("b", "free"),
        ("b cached-free", "free, still cached (a prefix hit revives it)"),
        ("b used", "held (colour: its request)"),
        ("b used shared", "shared (reference count above 1)"),
        ("b used cached", "held and cached (full, hashed)"),
        ("b hot", "named by this step's events"),
    ]
    style = ' style="background:hsl(210,62%,40%)"'
    return (
        '<p class="legend">'
        + "".join(
            f'<span><i class="{c}"{style if "used" in c else ""}></i>{esc(t)}</span>'
            for c, t in swatches
        )
        + "</p>"
    )


def block_map_html(
    block_map: BlockMap,
    *,
    title: str,
    intro: Sequence[str] = (),
    open_at: int = 0,
    links: Sequence[tuple[str, str]] = (),
) -> str:
    """The page (see the module docstring); `intro`: paragraphs above the map; `links`: (text,
    relative href) shown under them (the run's report, the PNG strip)."""
    about, window = block_map.about, block_map.window
    first, last = block_map.steps[0].step, block_map.steps[-1].step
    pools = f"{about.num_blocks:,} GPU blocks of {about.block_size} tokens"
    if about.kind == "contiguous":
        pools = f"{about.num_slots:,} token slots, reserved contiguously per request"
    elif about.num_cpu_blocks:
        pools += f" · {about.num_cpu_blocks:,} CPU swap blocks"
    sub = (
        f"Scenario {about.scenario} · system {about.system} ({about.policy}) · {pools} · "
        f"steps {first}–{last} of the run's {block_map.num_steps_run:,} "
        f"(--block-map {window.spec})"
    )
    num_cells = (
        about.num_blocks if about.kind == "paged" else -(-about.num_slots // about.block_size)
    )
    px = _cell_px(num_cells)  # small cells drop their ids and borders (.dense)
    found = page_data(block_map, open_at)
    data = json.dumps(found, separators=(",", ":")).replace("<", "\\u003c")
    paragraphs = "".join(f"<p>{esc(p)}</p>" for p in intro)
    anchors = " · ".join(f'<a href="{esc(href)}">{esc(text)}</a>' for text, href in links)
    cpu = (
        '<h2>CPU blocks (swap space)</h2><div id="cpu-grid" class="grid" style="--cell:18px"></div>'
        if found["shows_cpu"]
        else '<div id="cpu-grid"></div>'
    )
    grid_title = "GPU blocks" if about.kind == "paged" else "GPU token slots"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_asset('block_map.css')}</style></head><body><main>"
        f'<header><h1>{esc(title)}</h1><p class="sub">{esc(sub)}</p>'
        f'<div class="intro">{paragraphs}</div>{f"<p>{anchors}</p>" if anchors else ""}</header>'
        '<div class="controls"><button id="prev" title="previous step (←)">◀</button>'
        '<button id="play">▶ play</button><button id="next" title="next step (→)">▶</button>'
        '<input id="slider" type="range" min="0" max="0" value="0" aria-label="step">'
        '<select id="speed" aria-label="speed"><option value="700">slow</option>'
        '<option value="250" selected>medium</option><option value="60">fast</option></select>'
        '<span id="step-label"></span></div>'
        f'<div class="cols"><div class="col"><h2>{grid_title}</h2>{_legend(about.kind)}'
        f'<div id="gpu-grid" class="grid{" dense" if px < 14 else ""}" style="--cell:{px}px">'
        f"</div>{cpu}</div>"
        '<div class="col"><h2>This step</h2><ol id="events" class="events"></ol>'
        f"<h2>{'Block tables' if about.kind == 'paged' else 'Regions'}</h2>"
        '<div id="tables" class="tables"></div>'
        '<h2>Queues after the step</h2><div id="queues" class="queues"></div></div></div>'
        f'<script type="application/json" id="block-map-data">{data}</script>'
        f"<script>{_asset('block_map.js')}</script></main></body></html>\n"
    )


def write_block_map_page(
    block_map: BlockMap,
    path: Path,
    *,
    title: str,
    intro: Sequence[str] = (),
    open_at: int = 0,
    links: Sequence[tuple[str, str]] = (),
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        block_map_html(block_map, title=title, intro=intro, open_at=open_at, links=links),
        encoding="utf-8",
    )
    return path
