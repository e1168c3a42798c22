"""Paged KV cache of a hybrid model (full-attention, sliding-window and state layer groups over
one block pool), as vLLM V1's hybrid KV-cache manager keeps it (v0.11:
vllm/v1/core/kv_cache_coordinator.py `HybridKVCacheCoordinator`,
vllm/v1/core/single_type_kv_cache_manager.py `FullAttentionManager`, `SlidingWindowManager`,
`MambaManager`; the layout in kv/hybrid_layout.py).

Each request holds one block table per group. pagesim stores them by kind: logical block i of
the request maps to one block per full group (`full[i]`) and one per sliding group
(`sliding[i]`, None once freed out of the window: vLLM's null block); each state group holds one
block for the request's whole life.

Sliding groups: before each allocation, blocks wholly before the window are freed
(`SlidingWindowManager.remove_skipped_blocks`, with the request's computed tokens so far):

    last_useful_token = num_computed_tokens - window + 1
    last_useful_block = last_useful_token // block_size        (blocks before it are freed)

    window W = 5, block size 4, 13 tokens computed: tokens 9..12 (+ the next) are attended
    sliding  [ null ][ null ][ b7 ][ b8 ]      last_useful_token = 13 - 5 + 1 = 9 -> block 2
               0..3    4..7   8..11  12..

They are freed even when the allocation that follows does not fit, as vLLM does. A running
request's chunk allocates every block it writes (`get_num_blocks_to_allocate` counts
cdiv(tokens, block_size) less the blocks held, nulls included: read at vllm-project/vllm
002f349 and in the 2026 form's running-request path; v0.11 was not checked line by line); the
blocks it leaves behind the window go at the next step. So a sliding group holds at most
cdiv(W - 1 + n, block_size) + 1 blocks after a step adding n tokens.

Prefix caching (`add_seq`), vLLM's `find_longest_cache_hit`: full groups hit the longest run of
leading prompt blocks cached in every full group; sliding groups need, within that run, only
the last cdiv(W - 1, block_size) contiguous blocks (searched right to left; the blocks before
them are null), or a leading run shorter than that; the hit is the shorter of the two, full
groups truncated to it. Every block, in every group, is cached under its (hash, group) key
when allocated, and a sliding block freed out of the window stays findable until reused. State
groups cache nothing: a model with state layers never hits (v0.11's `MambaManager` returns no
cached blocks; later versions' "align" mode is not modelled).

Not supported: forks (V1 fans n > 1 out into child requests) and swapping (V1 only
recomputes); `policies.factory.hybrid_refusal` refuses a system that would need them.

Memory accounting counts a block's token slots as `PagedSlots` does (computed / reserved /
internal fragmentation, shared blocks once); a state block counts as computed from its
allocation (it holds the request's state). Blocks freed out of the window are free memory,
counted in `num_window_freed_blocks`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.hybrid_audit import check_hybrid_invariants, walk_hybrid_breakdown
from pagesim.simulator.kv.hybrid_slots import HybridSlots
from pagesim.simulator.kv.hybrid_table import HybridSeq, find_longest_hit


class HybridKVCache(HybridSlots):
    """Per-group block tables of sequences (ids chosen by the caller) over one block pool."""

    @property
    def num_cpu_blocks(self) -> int:
        return 0

    @property
    def num_state_blocks(self) -> int:
        """Blocks holding requests' state now (one per state group per live request)."""
        return sum(len(seq.state) for seq in self._seqs.values())

    def tables(self, seq_id: int) -> tuple[list[list[int | None]], list[int]]:
        """Per attention group, the block ids of logical blocks 0.. (None: out of the window),
        full groups first; and the state blocks. Copies (tests)."""
        seq = self._seq(seq_id)
        groups: list[list[int | None]] = [[b[g] for b in seq.full] for g in range(self._num_full)]
        for g in range(self._num_sliding):
            groups.append([None if b is None else b[g] for b in seq.sliding])
        return groups, list(seq.state)

    def blocks_held(self, seq_id: int) -> int:
        seq = self._seq(seq_id)
        live = sum(b is not None for b in seq.sliding)
        return len(seq.full) * self._num_full + live * self._num_sliding + len(seq.state)

    def num_blocks_to_hold(self, seq_id: int, num_tokens: int, max_chunk: int) -> int:
        """More blocks the sequence needs to hold `num_tokens` tokens, grown in chunks of at
        most `max_chunk` (its sliding groups keep only the window and a chunk: `blocks_alone`).
        vLLM caps a window group's admission at the window plus the tokens in flight (v0.34.0
        kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request); pagesim's cap
        is its own model of a window group's peak, the window plus one chunk."""
        return max(0, self.layout.blocks_alone(num_tokens, max_chunk) - self.blocks_held(seq_id))

    def num_sliding_blocks_held(self, seq_id: int) -> int:
        """Live blocks of one sliding group of the sequence (all sliding groups hold as many)."""
        return sum(b is not None for b in self._seq(seq_id).sliding)

    def add_seq(
        self,
        seq_id: int,
        block_hashes: Sequence[int] = (),
        num_prompt_tokens: int = 0,
        *,
        final_len: int | None = None,
    ) -> int:
        """Register a sequence and map its longest cached prompt prefix (module docstring);
        returns the hit tokens, capped so the last prompt token is computed."""
        if seq_id in self._seqs:
            raise KVCacheError(f"seq {seq_id} already exists")
        if num_prompt_tokens < 0:
            raise KVCacheError(f"seq {seq_id}: num_prompt_tokens {num_prompt_tokens} < 0")
        seq = HybridSeq([], [], [], 0, 0, 0, final_len)
        self._seqs[seq_id] = seq
        if self._enable_prefix_cache and num_prompt_tokens > 0:
            self._num_prefix_query_tokens += num_prompt_tokens
            if self._can_hit:
                max_blocks = min(len(block_hashes), (num_prompt_tokens - 1) // self._block_size)
                self._take_hit(seq, block_hashes, max_blocks)
                self._num_prefix_hit_tokens += seq.num_tokens
        return seq.num_tokens

    def _take_hit(self, seq: HybridSeq, block_hashes: Sequence[int], max_blocks: int) -> None:
        full, sliding = find_longest_hit(self._gpu, self.layout, block_hashes, max_blocks)
        seq.full, seq.sliding = full, sliding
        num_hit = len(sliding) if self._num_sliding else len(full)
        seq.num_tokens = seq.num_computed_tokens = seq.num_last_new_tokens = (
            num_hit * self._block_size
        )
        seq.num_registered_blocks = num_hit
        bs = self._block_size
        for bundle in [*full, *(b for b in sliding if b is not None)]:
            for block in bundle:
                self._gpu.touch(block)
                self._note_computed(block, bs)

    def fork(
        self,
        parent_seq_id: int,
        child_seq_id: int,
        *,
        final_len: int | None = None,
        parent_done: bool = False,
    ) -> None:
        raise KVCacheError("a hybrid KV cache does not fork: vLLM V1 fans n > 1 out instead")

    def can_swap_out(self, seq_ids: Iterable[int]) -> bool:
        return False  # V1 recomputes; the scenario checks refuse swap for hybrid models

    def swap_out(self, seq_ids: Iterable[int]) -> int:
        raise KVCacheError("a hybrid KV cache does not swap: vLLM V1 preempts by recompute")

    def can_swap_in(self, seq_ids: Iterable[int], reserve_blocks: int = 0) -> bool:
        return False

    def swap_in(self, seq_ids: Iterable[int]) -> int:
        raise KVCacheError("a hybrid KV cache does not swap: vLLM V1 preempts by recompute")

    def block_table(self, seq_id: int) -> tuple[int, ...]:
        raise KVCacheError(f"seq {seq_id}: a hybrid model has one block table per group (tables)")

    def walk_memory_breakdown(
        self, num_computed_of: Mapping[int, int] | None = None
    ) -> MemoryBreakdown:
        """`memory_breakdown` recomputed block by block from the tables (O(blocks); checks)."""
        return walk_hybrid_breakdown(self._seqs, self._gpu, self._block_size, num_computed_of or {})

    def check_invariants(self) -> None:
        check_hybrid_invariants(
            self._seqs, self._gpu, self.layout, self._computed_slots, self._num_computed_slots
        )
