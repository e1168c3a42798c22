"""The guided tour (`pagesim explain`): every stop runs, opens on its moment, and its sentences
say what the recorded events say: each cited event is in the map at the step cited, its words
are in the sentences with that step's number, and the figures the sentences add (reference
counts, blocks, slots) are read again here from the rebuilt states."""

from __future__ import annotations

import re

import pytest

from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.block_events import EventKind
from pagesim.simulator.studies.tour import STOPS, Visited, select_stops, visit


@pytest.fixture(scope="module")
def tour() -> list[Visited]:
    return [visit(i) for i in range(len(STOPS))]


def test_every_stop_opens_on_a_moment_its_events_tell(tour: list[Visited]) -> None:
    assert [v.name for v in tour] == [stem for stem, _, _ in STOPS]
    for stop in tour:
        for block_map, moment in stop.maps:
            assert 0 <= moment.index < len(block_map.steps)
            assert 2 <= len(moment.sentences) <= 4, moment.sentences
            text = " ".join(moment.sentences)
            assert moment.cited
            for index, event in moment.cited:
                assert event in block_map.steps[index].events, (stop.name, event)
                assert event.text in text, (stop.name, event.text)
                assert f"Step {block_map.steps[index].step}" in text or (
                    f"step {block_map.steps[index].step}" in text
                ), (stop.name, index)
            # The page opens on a step whose own events are cited.
            assert moment.index in {i for i, _ in moment.cited}, stop.name


def _moment(tour: list[Visited], stop: int, system: int = 0):  # type: ignore[no-untyped-def]
    return tour[stop - 1].maps[system]


def test_each_stop_shows_its_case(tour: list[Visited]) -> None:
    kinds = {
        1: [(0, EventKind.IDLE), (1, EventKind.ALLOCATE)],
        2: [(0, EventKind.ALLOCATE)],
        3: [(0, EventKind.HIT)],
        4: [(0, EventKind.COPY_ON_WRITE)],
        5: [(0, EventKind.SWAP_OUT)],
        6: [(0, EventKind.PREEMPT)],
        7: [(0, EventKind.RESERVE), (1, EventKind.ALLOCATE)],
    }
    for stop, wanted in kinds.items():
        for system, kind in wanted:
            block_map, moment = _moment(tour, stop, system)
            opened = block_map.steps[moment.index].events
            assert kind in {e.kind for e in opened}, (stop, system, opened)


def test_the_figures_the_sentences_add_are_the_maps(tour: list[Visited]) -> None:
    # Stop 3: the hit blocks' reference count after the hit.
    block_map, moment = _moment(tour, 3)
    state = list(block_map.states())[moment.index]
    (hit,) = [e for _, e in moment.cited if e.kind is EventKind.HIT]
    assert hit.is_shared_prefix
    refs = {state.ref_counts[b] for b in hit.blocks}
    assert refs == {2} and "reference count 2" in moment.sentences[-1]
    # Stop 4: the sample still holding the copied block writes in place.
    block_map, moment = _moment(tour, 4)
    state = list(block_map.states())[moment.index]
    copies = [e for _, e in moment.cited if e.kind is EventKind.COPY_ON_WRITE]
    source = copies[0].blocks[0]
    keepers = [s.owner.label for s in state.seqs.values() if source in s.table]
    assert len(copies) == 2 and keepers == ["request 0 sample 3"]
    assert f"{keepers[0]}, its last holder" in moment.sentences[-1]
    # Stop 7: Orca's reserved and never-filled slots, vLLM's blocks at step 0.
    orca, moment = _moment(tour, 7, 0)
    regions = next(iter(orca.states())).regions.values()
    held = sum(r.num_held for r in regions)
    empty = sum(r.num_held - min(r.final_len, r.num_asked) for r in regions)
    assert (
        f"{held} of the {orca.about.num_slots} token slots, {empty} of which" in moment.sentences[0]
    )
    waiting = orca.steps[0].queues.lengths[1]
    assert waiting == 1 and re.search(r"\b1 request waits\b", moment.sentences[2])
    paged, moment = _moment(tour, 7, 1)
    used = sum(1 for r in next(iter(paged.states())).ref_counts if r)
    assert f"{used} blocks ({used * paged.about.block_size} slots)" in moment.sentences[0]


def test_stops_are_chosen_by_number_or_name() -> None:
    assert select_stops(None) == list(range(len(STOPS)))
    assert select_stops("4") == select_stops("parallel_sampling") == [3]
    assert select_stops("04_parallel_sampling") == [3]
    with pytest.raises(
        InputError, match=r"explain: no stop 'nine'; stops: .*1 static_vs_continuous"
    ):
        select_stops("nine")
