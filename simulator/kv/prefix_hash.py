"""Chained content hashes of full KV blocks, the keys of the prefix cache.

Block i's hash is hash((hash of block i-1, content of block i)), so equal hashes at index i mean
equal content for the whole prefix of i + 1 blocks, not just for block i (vLLM's scheme). Only
full blocks are hashed: a partly filled block's content is still changing. A block's content is
written in one canonical form (`SequenceHasher`), so equal content always hashes alike.

Hashes must be the same in every process (golden outputs, parallel sweeps). Python randomizes the
hash of `str` and `bytes` per process, but not of `int` or of tuples of ints, so everything hashed
here is built from ints only.
"""

from __future__ import annotations

from pagesim.simulator.core.errors import KVCacheError

# Block 0's parent is hash((ROOT_HASH, block size)) (`root_hash`): any fixed int works as the
# root, it only has to be the same everywhere; the block size in it keeps hashers of different
# block sizes apart, as a one-piece block's content leaves its end (start + block size) implied.
ROOT_HASH = 0x5A6E_51A1


def root_hash(block_size: int) -> int:
    """The parent hash of block 0 for blocks of `block_size` tokens."""
    return hash((ROOT_HASH, block_size))


SegmentKey = tuple[int, ...]


def _check_block_size(block_size: int) -> None:
    if block_size < 1:
        raise KVCacheError(f"block_size must be >= 1 token, got {block_size}")


class SequenceHasher:
    """Block hashes of a sequence described by segments instead of token ids.

    The simulator never materializes token ids. A sequence is a run of segments, each a content
    key (a tuple of ints naming where the tokens come from) and a length: for example a shared
    system prompt (1, group_id), the request's own prompt (2, request_id), a sequence's generated
    tokens (3, seq_id). A block's content is the tuple of (key, start, end) pieces that cover it,
    offsets counted within each segment; a block inside one segment (nearly every block) is
    written (key, start) instead, its end implied, and hashed flat with its parent:
    hash((parent, key, start)) against hash((parent, pieces)), one tuple built a block instead
    of three. Two sequences hashed at one block size therefore get equal hashes for block i iff
    their first (i + 1) * block_size tokens come from the same segments at the same offsets;
    at different block sizes, never (the chain's root holds the block size).

    Hashing is lazy and incremental: `block_hashes` hashes only the blocks filled since the last
    call, so the total work over a sequence's life is linear in its tokens.
    """

    __slots__ = ("_block_size", "_hashes", "_num_tokens", "_seg_index", "_seg_offset", "_segments")

    def __init__(self, block_size: int) -> None:
        _check_block_size(block_size)
        self._block_size = block_size
        self._segments: list[tuple[SegmentKey, int]] = []  # (key, num_tokens), in order
        self._num_tokens = 0
        self._hashes: list[int] = []
        # Where the first block not yet hashed starts: a segment index and an offset within it.
        # The offset may equal that segment's length: the last segment can still grow.
        self._seg_index = 0
        self._seg_offset = 0

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def extend(self, key: SegmentKey, num_tokens: int) -> None:
        """Append `num_tokens` tokens from segment `key` (merged into the last one if equal)."""
        if num_tokens < 0:
            raise KVCacheError(f"cannot extend a sequence by {num_tokens} tokens")
        if num_tokens == 0:
            return
        key = tuple(key)
        if self._segments and self._segments[-1][0] == key:
            last_key, last_len = self._segments[-1]
            self._segments[-1] = (last_key, last_len + num_tokens)
        else:
            self._segments.append((key, num_tokens))
        self._num_tokens += num_tokens

    def block_hashes(self) -> list[int]:
        """Hashes of every full block so far.

        Returns the hasher's own list (no copy, so that calling this every step stays cheap):
        read it, never mutate it. It only grows; entries already there never change.
        """
        num_full = self._num_tokens // self._block_size
        if len(self._hashes) < num_full:
            self._hash_blocks_up_to(num_full)
        return self._hashes

    def fork(self) -> SequenceHasher:
        """An independent copy that keeps the hashes already computed."""
        child = SequenceHasher(self._block_size)
        child._segments = list(self._segments)
        child._num_tokens = self._num_tokens
        child._hashes = list(self._hashes)
        child._seg_index = self._seg_index
        child._seg_offset = self._seg_offset
        return child

    def _hash_blocks_up_to(self, num_full: int) -> None:
        segments = self._segments
        seg_index, seg_offset = self._seg_index, self._seg_offset
        hashes, bs = self._hashes, self._block_size
        parent = hashes[-1] if hashes else root_hash(bs)
        while len(hashes) < num_full:
            key, seg_len = segments[seg_index]
            if seg_len - seg_offset >= bs:
                # Whole blocks inside one segment (nearly every block of a long prompt): the
                # one-piece form, as the general loop below writes it, without its piece list.
                num_inside = min(num_full - len(hashes), (seg_len - seg_offset) // bs)
                for start in range(seg_offset, seg_offset + num_inside * bs, bs):
                    parent = hash((parent, key, start))
                    hashes.append(parent)
                seg_offset += num_inside * bs
                continue
            pieces: list[tuple[SegmentKey, int, int]] = []
            num_missing = self._block_size
            while num_missing:
                key, seg_len = segments[seg_index]
                if seg_offset == seg_len:  # this segment is used up: move on only when needed
                    seg_index += 1
                    seg_offset = 0
                    continue
                take = min(num_missing, seg_len - seg_offset)
                pieces.append((key, seg_offset, seg_offset + take))
                seg_offset += take
                num_missing -= take
            if len(pieces) == 1:  # inside one segment after all: the one-piece form
                only_key, start, _ = pieces[0]
                parent = hash((parent, only_key, start))
            else:
                parent = hash((parent, tuple(pieces)))
            hashes.append(parent)
        self._seg_index, self._seg_offset = seg_index, seg_offset
