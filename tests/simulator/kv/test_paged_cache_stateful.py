"""Random programs against PagedKVCache: invariants after every rule, no leak at the end.

The machine mirrors how a scheduler drives the cache: sequences with shared system prompts
(prefix hits), chunked `allocate_slots` (all or nothing), commits with the sequence's block
hashes, forks, frees, evictions and group swaps. After every rule it checks the cache's own
invariants, its token counts against a model, the content of every cached block it maps, and
`memory_breakdown` against a slow reference that walks every block.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pagesim.simulator.core.errors import KVCacheError
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.kv.prefix_hash import SequenceHasher

BLOCK_SIZE = 4
NUM_BLOCKS = 10
NUM_CPU_BLOCKS = 8
MAX_SEQS = 8


def _sharing_pattern(tables: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Tables with block ids renamed in first-seen order: equal iff the same sharing."""
    names: dict[int, int] = {}
    return [tuple(names.setdefault(block, len(names)) for block in table) for table in tables]


class KVCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cache = PagedKVCache(
            NUM_BLOCKS, BLOCK_SIZE, num_cpu_blocks=NUM_CPU_BLOCKS, enable_prefix_cache=True
        )
        self.hashers: dict[int, SequenceHasher] = {}
        self.prompt_lens: dict[int, int] = {}
        self.final_lens: dict[int, int] = {}
        self.num_tokens: dict[int, int] = {}
        self.num_computed: dict[int, int] = {}
        self.next_seq_id = 0

    # -- helpers -------------------------------------------------------------------------------

    def _on_gpu(self) -> list[int]:
        return [s for s in self.hashers if not self.cache.is_swapped(s)]

    def _swapped(self) -> list[int]:
        return [s for s in self.hashers if self.cache.is_swapped(s)]

    def _new_seq_id(self) -> int:
        self.next_seq_id += 1
        return self.next_seq_id

    # -- rules ---------------------------------------------------------------------------------

    @precondition(lambda self: len(self.hashers) < MAX_SEQS)
    @rule(
        group=st.integers(0, 1),
        num_shared=st.integers(0, 12),
        num_own=st.integers(1, 8),
        num_output=st.integers(1, 12),
    )
    def add_seq(self, group: int, num_shared: int, num_own: int, num_output: int) -> None:
        seq_id = self._new_seq_id()
        hasher = SequenceHasher(BLOCK_SIZE)
        hasher.extend((1, group), num_shared)  # a system prompt shared by the group
        hasher.extend((2, seq_id), num_own)
        prompt_len = num_shared + num_own
        hashes = hasher.block_hashes()
        expected = self.cache.count_prefix_hit_tokens(hashes, prompt_len)
        num_hit = self.cache.add_seq(seq_id, hashes, prompt_len, final_len=prompt_len + num_output)
        assert num_hit == expected
        assert num_hit % BLOCK_SIZE == 0 and num_hit < prompt_len
        if num_hit:
            event("prefix hit")
        self.hashers[seq_id] = hasher
        self.prompt_lens[seq_id] = prompt_len
        self.final_lens[seq_id] = prompt_len + num_output
        self.num_tokens[seq_id] = self.num_computed[seq_id] = num_hit

    @precondition(lambda self: any(not self.cache.is_swapped(s) for s in self.hashers))
    @rule(data=st.data(), num_new=st.integers(1, 9))
    def append_slots(self, data: st.DataObject, num_new: int) -> None:
        self._append(data.draw(st.sampled_from(self._on_gpu())), num_new)

    def _append(self, seq_id: int, num_new: int) -> None:
        num_new = min(num_new, self.final_lens[seq_id] - self.num_tokens[seq_id])
        if num_new == 0:
            return
        table = self.cache.block_table(seq_id)
        needed = self.cache.num_blocks_needed(seq_id, num_new)
        num_free = self.cache.num_free_blocks
        copies = self.cache.allocate_slots([seq_id], num_new)
        if needed > num_free:
            assert copies is None
            assert self.cache.block_table(seq_id) == table  # all or nothing
            assert self.cache.num_tokens(seq_id) == self.num_tokens[seq_id]
            event("append refused")
            return
        assert copies is not None
        assert self.cache.num_free_blocks == num_free - needed
        assert len(copies) <= 1
        if copies:
            event("copy-on-write")
            assert copies[0].src_block == table[-1]
            assert self.cache.block_table(seq_id)[len(table) - 1] == copies[0].dst_block
        self.num_tokens[seq_id] += num_new
        # Tokens past the prompt are this sequence's own generated tokens.
        hasher = self.hashers[seq_id]
        hasher.extend((3, seq_id), max(0, self.num_tokens[seq_id] - hasher.num_tokens))

    @precondition(lambda self: any(not self.cache.is_swapped(s) for s in self.hashers))
    @rule(data=st.data(), num_new=st.integers(1, 9))
    def run_step(self, data: st.DataObject, num_new: int) -> None:
        """What the engine does most: append a chunk and commit all of it."""
        seq_id = data.draw(st.sampled_from(self._on_gpu()))
        self._append(seq_id, num_new)
        self.cache.commit(seq_id, self.num_tokens[seq_id], self.hashers[seq_id].block_hashes())
        self.num_computed[seq_id] = self.num_tokens[seq_id]

    @precondition(lambda self: any(not self.cache.is_swapped(s) for s in self.hashers))
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        seq_id = data.draw(st.sampled_from(self._on_gpu()))
        num_computed = data.draw(st.integers(self.num_computed[seq_id], self.num_tokens[seq_id]))
        self.cache.commit(seq_id, num_computed, self.hashers[seq_id].block_hashes())
        self.num_computed[seq_id] = num_computed

    @precondition(
        lambda self: (
            len(self.hashers) < MAX_SEQS and any(not self.cache.is_swapped(s) for s in self.hashers)
        )
    )
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from(self._on_gpu()))
        child = self._new_seq_id()
        if self.num_computed[parent] != self.num_tokens[parent]:
            with pytest.raises(KVCacheError, match="commit its step first"):
                self.cache.fork(parent, child)
            hashes = self.hashers[parent].block_hashes()
            self.cache.commit(parent, self.num_tokens[parent], hashes)
            self.num_computed[parent] = self.num_tokens[parent]
        self.cache.fork(parent, child)
        assert self.cache.block_table(child) == self.cache.block_table(parent)
        self.hashers[child] = self.hashers[parent].fork()
        for model in (self.prompt_lens, self.final_lens, self.num_tokens, self.num_computed):
            model[child] = model[parent]

    @precondition(lambda self: bool(self.hashers))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        seq_id = data.draw(st.sampled_from(sorted(self.hashers)))
        self.cache.free(seq_id)
        for model in (self.hashers, self.prompt_lens, self.final_lens):
            del model[seq_id]
        del self.num_tokens[seq_id], self.num_computed[seq_id]

    @rule()
    def evict(self) -> None:
        num_free = self.cache.num_free_blocks
        block = self.cache.evict_one()
        assert self.cache.num_free_blocks == num_free
        if block is not None:
            event("evicted")
            assert self.cache.block_hash(block) is None

    @precondition(lambda self: any(not self.cache.is_swapped(s) for s in self.hashers))
    @rule(data=st.data())
    def swap_out(self, data: st.DataObject) -> None:
        seq_ids = data.draw(st.lists(st.sampled_from(self._on_gpu()), min_size=1, unique=True))
        tables = [self.cache.block_table(s) for s in seq_ids]
        num_unique = len({block for table in tables for block in table})
        if not self.cache.can_swap_out(seq_ids):
            assert num_unique > self.cache.num_cpu_free_blocks
            with pytest.raises(KVCacheError):
                self.cache.swap_out(seq_ids)
            return
        assert self.cache.swap_out(seq_ids) == num_unique
        event("swapped out")
        after = [self.cache.block_table(s) for s in seq_ids]
        assert _sharing_pattern(after) == _sharing_pattern(tables)

    @precondition(lambda self: any(self.cache.is_swapped(s) for s in self.hashers))
    @rule(data=st.data())
    def swap_in(self, data: st.DataObject) -> None:
        seq_ids = data.draw(st.lists(st.sampled_from(self._swapped()), min_size=1, unique=True))
        tables = [self.cache.block_table(s) for s in seq_ids]
        if not self.cache.can_swap_in(seq_ids):
            with pytest.raises(KVCacheError):
                self.cache.swap_in(seq_ids)
            return
        assert self.cache.swap_in(seq_ids) == len({b for table in tables for b in table})
        event("swapped in")
        after = [self.cache.block_table(s) for s in seq_ids]
        assert _sharing_pattern(after) == _sharing_pattern(tables)

    # -- checks --------------------------------------------------------------------------------

    @invariant()
    def cache_is_consistent(self) -> None:
        self.cache.check_invariants()
        assert set(self.cache.seq_ids()) == set(self.hashers)
        for seq_id in self.hashers:
            assert self.cache.num_tokens(seq_id) == self.num_tokens[seq_id]
            assert self.cache.num_computed_tokens(seq_id) == self.num_computed[seq_id]

    @invariant()
    def cached_blocks_hold_the_content_their_hash_says(self) -> None:
        for seq_id in self._on_gpu():
            hashes = self.hashers[seq_id].block_hashes()
            table = self.cache.block_table(seq_id)
            for i in range(self.num_computed[seq_id] // BLOCK_SIZE):
                block_hash = self.cache.block_hash(table[i])
                assert block_hash is None or block_hash == hashes[i]

    @invariant()
    def memory_breakdown_matches_a_block_by_block_reference(self) -> None:
        final_lens = {s: self.final_lens[s] for s in self._on_gpu()}
        breakdown = self.cache.memory_breakdown()
        assert breakdown.total_slots == NUM_BLOCKS * BLOCK_SIZE
        computed: dict[int, int] = {}
        needed: dict[int, int] = {}
        for seq_id, final_len in final_lens.items():
            for i, block in enumerate(self.cache.block_table(seq_id)):
                start = i * BLOCK_SIZE
                fill = min(BLOCK_SIZE, max(0, self.num_computed[seq_id] - start))
                need = min(BLOCK_SIZE, max(0, final_len - start))
                computed[block] = max(computed.get(block, 0), fill)
                needed[block] = max(needed.get(block, 0), need)
        reserved = sum(max(0, needed[b] - computed[b]) for b in computed)
        token = sum(computed.values())
        assert breakdown == MemoryBreakdown(
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=len(computed) * BLOCK_SIZE - token - reserved,
            external_frag_slots=0,
            free_slots=(NUM_BLOCKS - len(computed)) * BLOCK_SIZE,
        )

    def teardown(self) -> None:
        for seq_id in list(self.hashers):
            self.cache.free(seq_id)
        self.cache.check_invariants()
        assert self.cache.num_free_blocks == NUM_BLOCKS
        assert self.cache.num_used_blocks == 0
        assert self.cache.num_cpu_free_blocks == NUM_CPU_BLOCKS


KVCacheMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestKVCacheStateful = KVCacheMachine.TestCase
