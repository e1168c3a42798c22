"""KV-cache mechanism: the block pool, paged block tables with copy-on-write, prefix hashing,
CPU swap space, contiguous (reserving) allocators, the memory breakdown, and KV sizing.

Mechanism only, no policy: it never decides who runs. Imports `core` alone.
"""
