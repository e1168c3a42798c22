"""What a block map says happened in a step: the kinds of events, the event record and the words
they share; and the events of a contiguous cache's step (static batching, Orca), read off its
regions before and after (a paged cache's: simulator/metrics/paged_events.py).

Nothing in the KV structures reports an event: each is read off what changed between the frames
before and after the step (simulator/metrics/block_frames.py). A region that appears was
reserved, one that disappears released; under static batching a request that has its last token
while its region stays is idle until its batch ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pagesim.simulator.metrics.block_frames import Owner, RegionFrame, RegionState


class EventKind(Enum):
    ARRIVE = "arrive"
    SWAP_OUT = "swap-out"  # a preemption by swap
    PREEMPT = "preempt"  # a preemption by recompute
    FINISH = "finish"
    FREE = "free"  # a sequence let go while its request lives on (a beam given way)
    SWAP_IN = "swap-in"
    HIT = "hit"
    ALLOCATE = "allocate"
    FORK = "fork"
    COPY_ON_WRITE = "copy-on-write"
    CACHE = "cache"
    EVICT = "evict"
    RESERVE = "reserve"  # a contiguous region (static batching, Orca)
    IDLE = "idle"  # static batching: a request done, its slots held until its batch ends


@dataclass(frozen=True, slots=True)
class BlockEvent:
    """One thing that happened to blocks in a step. `blocks`: the GPU blocks it concerns (for a
    copy-on-write, source then copy; for a region, its first and last slot); `cpu_blocks`: the
    CPU blocks of a swap; `owner`: whose (None for a block-level event)."""

    kind: EventKind
    owner: Owner | None
    blocks: tuple[int, ...]
    text: str
    cpu_blocks: tuple[int, ...] = ()
    is_shared_prefix: bool = False  # a hit on a shared system prompt's blocks


def ids_text(ids: Sequence[int], noun: str = "block") -> str:
    """'block 5', 'blocks 5, 4', 'blocks 0–3, 7': runs of consecutive ids as ranges."""
    if len(ids) == 1:
        return f"{noun} {ids[0]}"
    parts: list[str] = []
    start = prev = ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    return f"{noun}s {', '.join(parts)}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def region_events(prev: RegionFrame, new: RegionFrame) -> list[BlockEvent]:
    """The events of a step of a contiguous cache: regions reserved and released, and (static
    batching) requests done whose slots stay held until their batch ends."""
    events = []
    for seq_id in sorted(prev.regions.keys() | new.regions.keys()):
        before, after = prev.regions.get(seq_id), new.regions.get(seq_id)
        if after is None and before is not None:
            text = f"{before.owner.label} finishes: releases {_span(before)}"
            events.append(BlockEvent(EventKind.FINISH, before.owner, _ends(before), text))
        elif after is not None and before is None:
            events.append(_reserved(after))
        elif after is not None and before is not None:
            key = -1 if after.owner.request_id is None else after.owner.request_id
            request, was = new.requests.get(key), prev.requests.get(key)
            done = request is not None and request.num_generated >= request.output_len
            if done and was is not None and was.num_generated < was.output_len:
                text = (
                    f"{after.owner.label} has its last token; {_span(after)} stay reserved "
                    "until its batch ends"
                )
                events.append(BlockEvent(EventKind.IDLE, after.owner, _ends(after), text))
    order = list(EventKind)
    return sorted(events, key=lambda e: order.index(e.kind))


def _span(region: RegionState) -> str:
    return f"slots {region.offset}–{region.offset + region.num_held - 1}"


def _ends(region: RegionState) -> tuple[int, int]:
    return region.offset, region.offset + region.num_held - 1


def _reserved(region: RegionState) -> BlockEvent:
    held, asked, final = region.num_held, region.num_asked, region.final_len
    rounding = f", rounded up from the {asked} asked" if held > asked else ""
    over = asked - min(asked, final)
    text = (
        f"{region.owner.label} reserves {_span(region)} ({held} slots{rounding}); it will fill "
        f"{min(final, asked)}, so {plural(over + held - asked, 'slot')} will never hold a token"
    )
    return BlockEvent(EventKind.RESERVE, region.owner, _ends(region), text)
