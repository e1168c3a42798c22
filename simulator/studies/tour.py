"""`pagesim explain`: a guided tour of the paged KV cache, the textbook's cases in order.

Each stop is a small built-in scenario (scenarios/tour/NN_*.toml) run with a block map
(simulator/metrics/block_map.py). For each system a stop finds the moment that matters in the
recorded events (a hit, a fork, a copy-on-write, a preemption) and explains it in two or three
sentences built from those events: every block id, step and count in them is read off the
map, none is typed here, and tests/simulator/studies/test_tour.py checks them against it.

    1 static vs continuous batching      5 preemption by swap
    2 a block table filling              6 preemption by recompute
    3 two requests sharing a prefix      7 Orca's reservations beside paged blocks
    4 a parallel-sampling fork with copy-on-write

The same idea in the reports layer: reports/tour.py writes the tour's folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.metrics.block_events import BlockEvent, EventKind, ids_text, plural
from pagesim.simulator.metrics.block_map import BlockMap, MapState
from pagesim.simulator.metrics.block_map_window import BlockMapWindow
from pagesim.simulator.scenario.files import BUILTIN_DIR
from pagesim.simulator.studies.runs import load_run, simulate_run

TOUR_DIR = BUILTIN_DIR / "tour"


@dataclass(frozen=True)
class Moment:
    """Where a stop's page opens (an index into the map's steps) and what it says there; `cited`
    are the (step index, event) pairs its sentences rest on."""

    index: int
    sentences: list[str]
    cited: list[tuple[int, BlockEvent]]


@dataclass(frozen=True)
class Visited:
    """One stop run: its scenario file, and each system's block map with its moment."""

    number: int
    name: str
    title: str
    path: Path
    maps: list[tuple[BlockMap, Moment]]


class _Events:
    """A map's events by kind, in step order, with the state after each step."""

    def __init__(self, block_map: BlockMap) -> None:
        self.map = block_map
        self.states: list[MapState] = list(block_map.states())

    def all(self, kind: EventKind, text: str = "") -> list[tuple[int, BlockEvent]]:
        return [
            (i, e)
            for i, step in enumerate(self.map.steps)
            for e in step.events
            if e.kind is kind and text in e.text
        ]

    def first(self, kind: EventKind, text: str = "", after: int = -1) -> tuple[int, BlockEvent]:
        for i, event in self.all(kind, text):
            if i > after:
                return i, event
        raise RuntimeError(
            f"tour: {self.map.about.scenario} ({self.map.about.system}) recorded no "
            f"{kind.value} event{f' with {text!r}' if text else ''} after step {after}"
        )

    def step(self, index: int) -> int:
        return self.map.steps[index].step


def _static(ev: _Events) -> Moment:
    i, idle = ev.first(EventKind.IDLE)
    j, reserve = ev.first(EventKind.RESERVE, after=i)
    return Moment(
        i,
        [
            f"Static batching, step {ev.step(i)}: {idle.text}.",
            f"Step {ev.step(j)}: {reserve.text}.",
            f"The next batch waited for the whole batch to end: for "
            f"{plural(ev.step(j) - ev.step(i) - 1, 'step')} the finished request's memory and "
            "batch slot did no work.",
        ],
        [(i, idle), (j, reserve)],
    )


def _continuous(ev: _Events) -> Moment:
    i, finish = ev.first(EventKind.FINISH)
    j, admit = ev.first(EventKind.ALLOCATE, "is admitted", after=i - 1)
    return Moment(
        j,
        [
            f"Continuous batching, step {ev.step(i)}: {finish.text}.",
            f"Step {ev.step(j)}: {admit.text}. The scheduler fills the free slot at the next "
            "iteration instead of waiting for the batch to end.",
        ],
        [(i, finish), (j, admit)],
    )


def _block_table(ev: _Events) -> Moment:
    a, admit = ev.first(EventKind.ALLOCATE, "is admitted")
    g, grow = ev.first(EventKind.ALLOCATE, "takes", after=a)
    bs = ev.map.about.block_size
    (first,) = [s for s in ev.states[a].seqs.values()]
    (seq,) = [s for s in ev.states[g].seqs.values()]
    return Moment(
        g,
        [
            f"Step {ev.step(a)}: {admit.text}: {plural(first.num_tokens, 'prompt token')} in "
            f"blocks of {bs} fill {plural(len(first.table), 'block')}, the last one holding "
            f"{first.num_tokens - (len(first.table) - 1) * bs} of its {bs} slots.",
            f"Each decode step writes one token's KV into the last block; at step {ev.step(g)}, "
            f"that block full, {grow.text}.",
            f"The table now maps {plural(len(seq.table), 'logical block')} to physical "
            f"{ids_text(seq.table)}: memory is taken as tokens arrive, never reserved ahead.",
        ],
        [(a, admit), (g, grow)],
    )


def _shared_prefix(ev: _Events) -> Moment:
    a, admit = ev.first(EventKind.ALLOCATE, "is admitted")
    h, hit = ev.first(EventKind.HIT, "shared system prompt")
    refs = sorted({ev.states[h].ref_counts[b] for b in hit.blocks})
    return Moment(
        h,
        [
            f"Step {ev.step(a)}: {admit.text}. vLLM V1 registers each full block in its "
            "prefix cache under a hash of its tokens and of every token before them.",
            f"Step {ev.step(h)}: {hit.text}.",
            f"Those {plural(len(hit.blocks), 'block')} now have reference count "
            f"{', '.join(map(str, refs))}: the system prompt's KV is stored once for both.",
        ],
        [(a, admit), (h, hit)],
    )


def _fork(ev: _Events) -> Moment:
    f, fork = ev.first(EventKind.FORK)
    c, _ = ev.first(EventKind.COPY_ON_WRITE, after=f)
    copies = [e for i, e in ev.all(EventKind.COPY_ON_WRITE) if i == c]
    source = copies[0].blocks[0]
    keeper = [s.owner.label for s in ev.states[c].seqs.values() if source in s.table]
    return Moment(
        c,
        [
            f"Step {ev.step(f)}: the prompt is computed once; {fork.text}.",
            f"Step {ev.step(c)}: {'; '.join(e.text for e in copies)}.",
            f"Block {source} was shared and only partly filled: each sample but the last to "
            f"write copies it first; {' and '.join(keeper)}, its last holder, writes in place.",
        ],
        [(f, fork), *[(c, e) for e in copies]],
    )


def _swap(ev: _Events) -> Moment:
    o, out = ev.first(EventKind.SWAP_OUT)
    i, back = ev.first(EventKind.SWAP_IN, after=o)
    return Moment(
        o,
        [
            f"Step {ev.step(o)}: a decode step finds none of the {ev.map.about.num_blocks} GPU "
            f"blocks free; {out.text}.",
            f"Step {ev.step(i)}: {back.text}: new block ids, the same table; no token is "
            "computed again, at the price of two copies over the host link.",
        ],
        [(o, out), (i, back)],
    )


def _recompute(ev: _Events) -> Moment:
    p, preempt = ev.first(EventKind.PREEMPT)
    h, hit = ev.first(EventKind.HIT, after=p)
    lost = [(i, e) for i, e in ev.all(EventKind.EVICT) if p < i <= h]
    return Moment(
        p,
        [
            f"Step {ev.step(p)}: {preempt.text}.",
            *[f"Step {ev.step(i)}: {e.text}." for i, e in lost],
            f"Step {ev.step(h)}: {hit.text}; only the rest is computed again.",
        ],
        [(p, preempt), *lost, (h, hit)],
    )


def _orca(ev: _Events) -> Moment:
    reserved = [(i, e) for i, e in ev.all(EventKind.RESERVE) if i == 0]
    state = ev.states[0]
    held = sum(r.num_held for r in state.regions.values())
    empty = sum(r.num_held - min(r.final_len, r.num_asked) for r in state.regions.values())
    waiting = ev.map.steps[0].queues.lengths[1]
    later, first_later = ev.first(EventKind.RESERVE, after=0)
    largest = max((e for _, e in reserved), key=lambda e: e.blocks[1] - e.blocks[0])
    return Moment(
        0,
        [
            f"Step {ev.step(0)}: Orca reserves a contiguous region for each of "
            f"{plural(len(reserved), 'request')}: {held} of the {ev.map.about.num_slots} token "
            f"slots, {empty} of which will never hold a token (the output rounded up to a power "
            "of two, the region rounded up again by the buddy allocator).",
            f"The largest: {largest.text}.",
            f"{plural(waiting, 'request')} wait{'s' if waiting == 1 else ''} for a region; at "
            f"step {ev.step(later)} {first_later.text}.",
        ],
        [(0, largest), (later, first_later)],
    )


def _paged_admissions(ev: _Events) -> Moment:
    admitted = [(i, e) for i, e in ev.all(EventKind.ALLOCATE, "is admitted") if i == 0]
    state = ev.states[0]
    blocks = sum(1 for r in state.ref_counts if r)
    tokens = sum(s.num_tokens for s in state.seqs.values())
    return Moment(
        0,
        [
            f"Step {ev.step(0)}: vLLM admits {plural(len(admitted), 'request')} at once: "
            f"{plural(blocks, 'block')} ({blocks * ev.map.about.block_size} slots) for their "
            f"{tokens} prompt tokens.",
            f"For one: {admitted[0][1].text}.",
            "Each request takes one more block only when its last is full: nothing is reserved "
            "for tokens not yet generated, so no request waits for memory here.",
        ],
        admitted[:1],
    )


Finder = Callable[[_Events], Moment]
# (file stem, title, the moment finder of each system in the file's order)
STOPS: list[tuple[str, str, list[Finder]]] = [
    ("01_static_vs_continuous", "Static vs continuous batching", [_static, _continuous]),
    ("02_block_table", "A block table filling", [_block_table]),
    ("03_shared_prefix", "Two requests sharing a prefix", [_shared_prefix]),
    ("04_parallel_sampling", "A parallel-sampling fork with copy-on-write", [_fork]),
    ("05_preempt_swap", "Preemption by swap", [_swap]),
    ("06_preempt_recompute", "Preemption by recompute", [_recompute]),
    ("07_orca_vs_paged", "Orca's reservations beside paged blocks", [_orca, _paged_admissions]),
]


def select_stops(which: str | None) -> list[int]:
    """Indexes into STOPS: all, or the one named by number (1..7) or name (InputError)."""
    if which is None:
        return list(range(len(STOPS)))
    for i, (stem, _, _) in enumerate(STOPS):
        if which in (str(i + 1), stem, stem[3:]):
            return [i]
    names = [f"{i + 1} {stem[3:]}" for i, (stem, _, _) in enumerate(STOPS)]
    raise InputError(f"explain: no stop {which!r}; stops: {choices_text(names)}")


def visit(index: int) -> Visited:
    """Run stop `index` of STOPS with a block map of every step, and find its moments."""
    stem, title, finders = STOPS[index]
    path = TOUR_DIR / f"{stem}.toml"
    run = simulate_run(load_run(path), block_map=BlockMapWindow.parse("all"))
    maps = [(m, finder(_Events(m))) for m, finder in zip(run.block_maps, finders, strict=True)]
    return Visited(index + 1, stem, title, path, maps)
