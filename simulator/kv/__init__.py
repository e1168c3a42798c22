"""KV-cache mechanism: the block pool, paged block tables with copy-on-write, prefix hashing,
CPU swap space, contiguous (reserving) allocators, the memory breakdown, and KV sizing (the
blocks a system gets on its GPU: `block_budget`).

The paged cache is `paged_cache.PagedKVCache`, built from `block_pool`, `block_table`,
`cache_slots` (what it shares with the hybrid cache, `hybrid_cache.HybridKVCache`), `paged_slots`
(the per-step operations), `swap_space` and `paged_audit` (its module docstring draws the map).

Mechanism only, no policy: it never decides who runs.

Imports: core alone.
"""
