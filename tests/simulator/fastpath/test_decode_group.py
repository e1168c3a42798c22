"""The decode group's calendars, step by step, against the KV cache advanced one token at a time.

Block size 4; three lone sequences join holding 4, 5 and 7 tokens. A member crosses into a new
block at step K when its tokens before the step, n0 + K, fill its blocks:

    seq 0 (n0 = 4)   K = 0, 4, 8
    seq 1 (n0 = 5)   K = 3, 7
    seq 2 (n0 = 7)   K = 1, 5, 9
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.core.request import Request
from pagesim.simulator.fastpath.decode_group import DecodeGroup
from pagesim.simulator.fastpath.decode_window import _steps_before_change, steps_that_fit
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.seq_group import SeqGroup

BLOCK_SIZE = 4
PROMPTS = {0: 4, 1: 5, 2: 7}  # seq id -> KV tokens when it joins
OUTPUT_LEN = 20
CROSSINGS = {0: [0], 1: [2], 3: [1], 4: [0], 5: [2], 7: [1], 8: [0], 9: [2]}


def _cache_with_seqs(output_len: int = OUTPUT_LEN) -> PagedKVCache:
    kv = PagedKVCache(32, BLOCK_SIZE)
    for seq_id, num_tokens in PROMPTS.items():
        kv.add_seq(seq_id, final_len=num_tokens + output_len - 1)
        assert kv.allocate_slots([seq_id], num_tokens) == ()
        kv.commit(seq_id, num_tokens)
    return kv


def _member(seq_id: int, output_len: int = OUTPUT_LEN) -> SeqGroup:
    request = Request(seq_id, 0.0, PROMPTS[seq_id], output_len)
    request.num_generated = 1  # the prompt's step produced the first token
    return SeqGroup(request, [seq_id], target=PROMPTS[seq_id], num_computed=PROMPTS[seq_id])


def test_crossings_follow_the_block_boundaries_and_release_all_matches_one_by_one() -> None:
    grouped, reference = _cache_with_seqs(), _cache_with_seqs()
    group_ = DecodeGroup(grouped)
    members = [_member(seq_id) for seq_id in PROMPTS]
    for member in members:
        group_.join(member)  # its final length: prompt + output - 1
    num_steps = 10
    for step in range(num_steps):
        crossing = group_.crossing()
        assert crossing == CROSSINGS.get(step, []), step
        group_.grow(crossing)
        assert group_.advance() == []
        for seq_id in PROMPTS:
            assert reference.allocate_slots([seq_id], 1) is not None
            reference.commit_one(seq_id)
        group_.check_invariants()
    assert grouped.num_free_blocks == reference.num_free_blocks

    group_.release_all()

    grouped.check_invariants()
    for member in members:
        seq_id = member.seq_ids[0]
        assert member.num_computed == PROMPTS[seq_id] + num_steps
        assert member.request.num_generated == 1 + num_steps
        assert grouped.num_tokens(seq_id) == reference.num_tokens(seq_id)
        assert grouped.num_computed_tokens(seq_id) == reference.num_computed_tokens(seq_id)
        assert len(grouped.block_table(seq_id)) == len(reference.block_table(seq_id))
    assert grouped.memory_breakdown() == reference.memory_breakdown()
    # Nothing of the members is left in the calendars: a later member starts clean.
    assert len(group_) == 0
    assert group_.num_context_tokens == group_.num_reserved_slots == 0
    for _ in range(BLOCK_SIZE):
        assert group_.crossing() == [] and group_.advance() == []


def test_a_member_that_finishes_leaves_its_crossing_bucket() -> None:
    kv = _cache_with_seqs()
    group_ = DecodeGroup(kv)
    member = _member(0)
    member.request.output_len = 3  # two more tokens: it finishes after steps 0 and 1
    group_.join(member)
    assert group_.crossing() == [0]
    group_.grow([0])
    assert group_.advance() == []
    assert group_.crossing() == []
    assert group_.advance() == [member]
    for _ in range(2 * BLOCK_SIZE):  # its residue comes round again: nobody is due
        assert group_.crossing() == [] and group_.advance() == []
    assert kv.num_tokens(0) == PROMPTS[0] + 2 == member.num_computed


@pytest.mark.parametrize("output_len", [OUTPUT_LEN, 12])
def test_grow_ahead_takes_the_blocks_steps_of_grow_would(output_len: int) -> None:
    """Ten steps' crossings (seq 0 crosses at 0, 4, 8: three times) in one allocation: the
    same blocks for each member, the same caps, and each step's gain and blocks taken. With
    12 tokens of output, seqs 0 and 2 take their last blocks at steps 8 and 9 (final lengths
    15 and 18): their caps stop there."""
    ahead_kv, stepwise_kv = _cache_with_seqs(output_len), _cache_with_seqs(output_len)
    ahead, stepwise = DecodeGroup(ahead_kv), DecodeGroup(stepwise_kv)
    for group_ in (ahead, stepwise):
        for seq_id in PROMPTS:
            group_.join(_member(seq_id, output_len))
    num_steps = 10
    gains, takes = ahead.grow_ahead(num_steps)
    ahead.step += num_steps
    for step in range(num_steps):
        free = stepwise_kv.num_free_blocks
        assert stepwise.grow(stepwise.crossing()) == gains[step], step
        assert free - stepwise_kv.num_free_blocks == takes[step] == len(CROSSINGS.get(step, []))
        stepwise.step += 1
    # Each crossing member's cap grows by a block (with 20 tokens of output none nears its
    # final length; with 12, the last blocks' 3 and 2 slots at steps 8 and 9): seq 0's
    # from 4 to 8 at step 0; nobody crosses at steps 2 and 6.
    last_two = [4, 4] if output_len == OUTPUT_LEN else [3, 2]
    assert gains == [4, 4, 0, 4, 4, 4, 0, 4, *last_two]
    for seq_id in PROMPTS:
        assert ahead_kv.block_table(seq_id) == stepwise_kv.block_table(seq_id)
        assert ahead_kv.num_tokens(seq_id) == stepwise_kv.num_tokens(seq_id)
        assert ahead.members[seq_id].cap == stepwise.members[seq_id].cap
    ahead.check_invariants()
    assert ahead.num_reserved_slots == stepwise.num_reserved_slots


def _steps_that_fit_walked(due: list[int], free: int, limit: int) -> int:
    """decode_window.steps_that_fit's definition, step by step."""
    for i in range(limit):
        free -= due[i % len(due)]
        if free < 0:
            return i
    return limit


@settings(max_examples=300, deadline=None)
@given(
    due=st.lists(st.integers(0, 5), min_size=1, max_size=32),
    free=st.integers(0, 400),
    limit=st.integers(0, 200),
)
def test_steps_that_fit_skips_whole_periods_as_walking_would(
    due: list[int], free: int, limit: int
) -> None:
    walked = _steps_that_fit_walked(due, free, limit)
    for first in (0, 3):  # the pattern read from its start, or from its step 3 on
        rotated = [*due[first % len(due) :], *due[: first % len(due)]]
        expected = walked if not first else _steps_that_fit_walked(rotated, free, limit)
        sets = [range(n) for n in due]  # what a calendar's entries give: their sizes
        assert steps_that_fit(sets, first, sum(due), free, limit) == expected


@settings(max_examples=200, deadline=None)
@given(free=st.integers(0, 27), limit=st.integers(0, 80), step=st.integers(0, 7))
def test_steps_before_change_are_the_walked_steps_that_fit(
    free: int, limit: int, step: int
) -> None:
    """`_steps_before_change` answers from the free blocks alone where whole periods reach the
    limit (each member crosses once a period), else walks the calendar: either way the walked
    answer, for any free count, limit and phase (nobody finishes within 80 steps)."""
    kv = _cache_with_seqs(200)
    group_ = DecodeGroup(kv)
    for seq_id in PROMPTS:
        group_.join(_member(seq_id, 200))
    kv.add_seq(99)
    assert kv.allocate_slots([99], (kv.num_free_blocks - free) * BLOCK_SIZE) == ()
    group_.step = step
    due = [len(group_.crossing_calendar[(step + i) % BLOCK_SIZE]) for i in range(BLOCK_SIZE)]
    assert _steps_before_change(group_, limit) == _steps_that_fit_walked(due, free, limit)


def test_steps_that_fit_narrated() -> None:
    # Two members crossing at step 1 of every 4, one at step 3: 3 blocks a period.
    due = [range(0), range(2), range(0), range(1)]
    assert steps_that_fit(due, 0, 3, 7, 64) == 9  # 2 periods take 6; step 9 needs 2 more
    assert steps_that_fit(due, 0, 3, 7, 8) == 8  # the limit comes first
    assert steps_that_fit(due, 1, 3, 7, 64) == 8  # from step 1 of the pattern: step 8 needs 2
    assert steps_that_fit([range(0)] * 4, 0, 0, 0, 64) == 64  # nobody crosses: nothing to take
