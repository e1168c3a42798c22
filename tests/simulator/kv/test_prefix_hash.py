"""Chained block hashes: full blocks only, prefix-determined, deterministic across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kv_helpers import hash_token_blocks

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.kv.prefix_hash import SequenceHasher, root_hash


def test_hash_token_blocks_hashes_full_blocks_only() -> None:
    assert hash_token_blocks([], 4) == []
    assert hash_token_blocks([1, 2, 3], 4) == []
    assert len(hash_token_blocks(list(range(11)), 4)) == 2


def test_hash_token_blocks_is_chained() -> None:
    a = hash_token_blocks([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = hash_token_blocks([9, 9, 9, 9, 5, 6, 7, 8], 4)
    assert a[0] != b[0]
    assert a[1] != b[1]  # same tokens in block 1, different parent
    assert hash_token_blocks([1, 2, 3, 4, 0, 0, 0, 0], 4)[0] == a[0]


def _segments_hasher(block_size: int, segments: list[tuple[tuple[int, ...], int]]) -> list[int]:
    hasher = SequenceHasher(block_size)
    for key, length in segments:
        hasher.extend(key, length)
    return list(hasher.block_hashes())


def test_shared_prefix_segments_share_hashes_then_diverge() -> None:
    # 10 tokens of system prompt 7, then 6 tokens of each request's own prompt; block_size 4.
    a = _segments_hasher(4, [((1, 7), 10), ((2, 1), 6)])
    b = _segments_hasher(4, [((1, 7), 10), ((2, 2), 6)])
    assert len(a) == len(b) == 4
    assert a[:2] == b[:2]  # tokens 0..7 all come from the system prompt
    assert a[2] != b[2]  # tokens 8..11 mix the system prompt and the own prompt
    assert a[3] != b[3]


def test_same_segment_at_a_different_offset_is_different_content() -> None:
    a = _segments_hasher(4, [((1, 7), 4)])
    b = _segments_hasher(4, [((2, 0), 4), ((1, 7), 8)])
    assert a[0] != b[1]


def test_extend_merges_a_repeated_key() -> None:
    split = _segments_hasher(4, [((3, 5), 3), ((3, 5), 6)])
    whole = _segments_hasher(4, [((3, 5), 9)])
    assert split == whole


def test_hashing_is_incremental_and_fork_is_independent() -> None:
    hasher = SequenceHasher(4)
    hasher.extend((1, 0), 6)
    first = list(hasher.block_hashes())
    assert len(first) == 1 and hasher.num_tokens == 6
    hasher.extend((1, 0), 2)  # grows the last segment after a block ended inside it
    child = hasher.fork()
    hasher.extend((3, 1), 4)
    child.extend((3, 2), 4)
    parent_hashes, child_hashes = hasher.block_hashes(), child.block_hashes()
    assert parent_hashes[:1] == first
    assert parent_hashes[:2] == child_hashes[:2]
    assert parent_hashes[2] != child_hashes[2]
    assert parent_hashes == _segments_hasher(4, [((1, 0), 8), ((3, 1), 4)])
    assert child.num_tokens == hasher.num_tokens == 12


def test_misuse_raises() -> None:
    with pytest.raises(KVCacheError):
        SequenceHasher(0)
    with pytest.raises(KVCacheError):
        SequenceHasher(4).extend((1,), -1)


segment_lists = st.lists(
    st.tuples(st.sampled_from([(1, 0), (1, 1), (2, 0)]), st.integers(0, 7)), max_size=6
)


def _materialize(segments: list[tuple[tuple[int, ...], int]]) -> list[tuple[tuple[int, ...], int]]:
    """Token identities (key, offset within the merged segment): the slow reference."""
    tokens: list[tuple[tuple[int, ...], int]] = []
    offset = 0
    for i, (key, length) in enumerate(segments):
        if i == 0 or segments[i - 1][0] != key:
            offset = 0
        tokens.extend((key, offset + j) for j in range(length))
        offset += length
    return tokens


@settings(max_examples=150, deadline=None)
@given(a=segment_lists, b=segment_lists, block_size=st.integers(1, 5))
def test_hashes_equal_iff_prefixes_equal(
    a: list[tuple[tuple[int, ...], int]], b: list[tuple[tuple[int, ...], int]], block_size: int
) -> None:
    # Zero-length extends are no-ops, so drop them before materializing the merge of equal keys.
    a = [s for s in a if s[1]]
    b = [s for s in b if s[1]]
    hashes_a, hashes_b = _segments_hasher(block_size, a), _segments_hasher(block_size, b)
    tokens_a, tokens_b = _materialize(a), _materialize(b)
    for i in range(min(len(hashes_a), len(hashes_b))):
        end = (i + 1) * block_size
        assert (hashes_a[i] == hashes_b[i]) == (tokens_a[:end] == tokens_b[:end])


@settings(max_examples=60, deadline=None)
@given(segments=segment_lists, block_size=st.integers(1, 5))
def test_hashing_after_every_extend_equals_hashing_once(
    segments: list[tuple[tuple[int, ...], int]], block_size: int
) -> None:
    step_by_step = SequenceHasher(block_size)
    for key, length in segments:
        for _ in range(length):
            step_by_step.extend(key, 1)
            step_by_step.block_hashes()
    assert step_by_step.block_hashes() == _segments_hasher(block_size, segments)


@settings(max_examples=100, deadline=None)
@given(segments=segment_lists, block_size=st.integers(1, 5))
def test_a_block_hashes_its_pieces_chained_to_its_parent(
    segments: list[tuple[tuple[int, ...], int]], block_size: int
) -> None:
    # The module docstring's scheme, from token identities: block i's content is its runs of
    # consecutive tokens of one segment as (key, start, end); its hash is
    # hash((block i-1's hash, content)), or hash((block i-1's hash, key, start)) for a block of
    # one run. Pins the values (whole-block fast path and one-run blocks met across a segment's
    # end included).
    tokens = _materialize([s for s in segments if s[1]])
    expected, parent = [], root_hash(block_size)
    for first in range(0, len(tokens) - block_size + 1, block_size):
        pieces: list[tuple[tuple[int, ...], int, int]] = []
        for key, offset in tokens[first : first + block_size]:
            if pieces and pieces[-1][0] == key and pieces[-1][2] == offset:
                pieces[-1] = (key, pieces[-1][1], offset + 1)
            else:
                pieces.append((key, offset, offset + 1))
        if len(pieces) == 1:
            parent = hash((parent, pieces[0][0], pieces[0][1]))
        else:
            parent = hash((parent, tuple(pieces)))
        expected.append(parent)
    assert _segments_hasher(block_size, segments) == expected


def test_hashes_do_not_depend_on_the_process_hash_seed() -> None:
    code = (
        "from kv_helpers import hash_token_blocks\n"
        "from pagesim.simulator.kv.prefix_hash import SequenceHasher\n"
        "h = SequenceHasher(4); h.extend((1, 3), 9); h.extend((3, 8), 3)\n"
        "print(hash_token_blocks(list(range(9)), 4), h.block_hashes())\n"
    )
    outputs = set()
    for seed in ("1", "2"):
        tests = str(Path(__file__).resolve().parents[2])  # kv_helpers
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": tests}
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1


def test_hashers_of_different_block_sizes_never_agree() -> None:
    # A one-piece block leaves its end implied: the chain's root holds the block size instead.
    small, large = SequenceHasher(16), SequenceHasher(32)
    for hasher in (small, large):
        hasher.extend((2, 7), 64)
    assert small.block_hashes()[0] != large.block_hashes()[0]
    assert root_hash(16) != root_hash(32)
