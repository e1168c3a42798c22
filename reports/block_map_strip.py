"""A block map's chosen steps as one PNG strip, for papers and slides: one panel per step, the
GPU blocks coloured as the page colours them (reports/block_map_page.py), the step's first
events below it.

Paged: one square per block, in the owner's colour (samples of a request in lighter shades),
white when free, grey when free and still cached; shared blocks are outlined. Contiguous: one
pixel column per token slot, rows of block_size slots, each region darkest where computed,
paler where reserved, over-reserved and rounded up.
"""

from __future__ import annotations

import colorsys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pagesim.reports.style import figure, label, save
from pagesim.simulator.metrics.block_events import EventKind
from pagesim.simulator.metrics.block_frames import Owner
from pagesim.simulator.metrics.block_map import BlockMap, MapState

MAX_PANELS = 6
# Events worth a panel, most telling first.
_NOTABLE = (
    EventKind.COPY_ON_WRITE,
    EventKind.FORK,
    EventKind.HIT,
    EventKind.SWAP_OUT,
    EventKind.SWAP_IN,
    EventKind.PREEMPT,
    EventKind.EVICT,
    EventKind.IDLE,
    EventKind.RESERVE,
)
FREE = (1.0, 1.0, 1.0)
CACHED_FREE = (0.82, 0.85, 0.89)
# A region's parts (contiguous caches): the owner's colour's strength.
_STRENGTH = {"computed": 1.0, "reserved": 0.55, "over": 0.25, "rounding": 0.1}


def owner_rgb(owner: Owner) -> tuple[float, float, float]:
    """The page's colour of an owner: hue from the request id, lightness from the sample."""
    request = 7 if owner.request_id is None else owner.request_id
    light = 0.40 + 0.12 * (((owner.sample or 1) - 1) % 3)
    return colorsys.hls_to_rgb((request * 137.508) % 360 / 360, light, 0.62)


def chosen_steps(block_map: BlockMap, count: int = MAX_PANELS) -> list[int]:
    """Indexes of up to `count` steps: those with the most telling events, else spread evenly."""
    scored = []
    for i, record in enumerate(block_map.steps):
        kinds = {e.kind for e in record.events}
        score = sum(len(_NOTABLE) - _NOTABLE.index(k) for k in kinds if k in _NOTABLE)
        if score:
            scored.append((-score, i))
    picked = sorted(i for _, i in sorted(scored)[:count])
    if len(picked) < count:
        spread = np.linspace(0, len(block_map.steps) - 1, count).round().astype(int)
        picked = sorted({*picked, *map(int, spread)})[:count]
    return picked


def _paged_image(state: MapState, num_blocks: int, cols: int) -> np.ndarray:
    """[rows, cols, 3] RGB, one pixel per block."""
    rows = -(-num_blocks // cols)
    image = np.ones((rows, cols, 3))
    holder: dict[int, Owner] = {}
    for seq in sorted(state.seqs.values(), key=lambda s: s.seq_id):
        if not seq.is_swapped:
            for block in seq.table:
                holder.setdefault(block, seq.owner)
    for block in range(num_blocks):
        if state.ref_counts[block]:
            rgb = owner_rgb(holder[block]) if block in holder else (0.44, 0.5, 0.59)
        else:
            rgb = CACHED_FREE if state.contents[block] else FREE
        image[block // cols, block % cols] = rgb
    return image


def _region_image(state: MapState, num_slots: int, block_size: int) -> np.ndarray:
    """[rows, block_size, 3] RGB, one pixel per token slot, a row per block_size slots."""
    rows = -(-num_slots // block_size)
    flat = np.ones((rows * block_size, 3))
    for region in state.regions.values():
        rgb = np.array(owner_rgb(region.owner))
        off, fill = region.offset, min(region.final_len, region.num_asked)
        parts = (
            ("computed", off, off + region.num_computed),
            ("reserved", off + region.num_computed, off + fill),
            ("over", off + fill, off + region.num_asked),
            ("rounding", off + region.num_asked, off + region.num_held),
        )
        for name, start, end in parts:
            strength = _STRENGTH[name]
            flat[start:end] = strength * rgb + (1 - strength) * np.ones(3)
    return flat.reshape(rows, block_size, 3)


def draw_strip(block_map: BlockMap, path: Path, indexes: Sequence[int] | None = None) -> Path:
    """Draw the steps `indexes` (default: `chosen_steps`) of `block_map` into `path`."""
    chosen = list(indexes) if indexes is not None else chosen_steps(block_map)
    wanted = set(chosen)
    states = {i: s for i, s in enumerate(block_map.states()) if i in wanted}
    about = block_map.about
    paged = about.kind == "paged"
    cols = max(8, int(np.ceil(np.sqrt(about.num_blocks * 2)))) if paged else about.block_size
    height = 2.2 if paged and about.num_blocks <= 64 else 3.2
    with figure(1, len(chosen), height + 0.9) as (fig, axes):
        for ax, i in zip(axes[0], chosen, strict=True):
            state = states[i]
            if paged:
                image = _paged_image(state, about.num_blocks, cols)
            else:
                image = _region_image(state, about.num_slots, about.block_size)
            ax.imshow(image, interpolation="nearest", aspect="auto" if not paged else "equal")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            if paged and about.num_blocks <= 64:
                for block in range(about.num_blocks):
                    ax.text(
                        block % cols,
                        block // cols,
                        str(block),
                        ha="center",
                        va="center",
                        fontsize=6,
                    )
            record = block_map.steps[i]
            told = "; ".join(e.text for e in record.events[:2]) or "no block changes"
            ax.set_title(f"step {record.step}", fontsize=10)
            width = min(60, max(22, 160 // len(chosen)))  # characters a panel's width holds
            lines = [label(line, width + 2) for line in textwrap.wrap(told, width)[:5]]
            ax.set_xlabel("\n".join(lines), fontsize=6.5)
        fig.suptitle(label(f"{about.scenario}: {about.system} ({about.policy})", 80), fontsize=11)
        return save(fig, path)
