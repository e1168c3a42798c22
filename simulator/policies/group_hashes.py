"""A paged request's block hashes (the prefix cache's keys): how its prompt is hashed, and which
requests vLLM V1's state hashes only when they are preempted.

V1 caches every full block as it is allocated (v1/core/kv_cache_manager.py allocate_slots ->
cache_blocks). A *private* request, one whose blocks no other request can ever hit, is hashed
instead when it is preempted (`hash_private`): the one time its blocks can be found again, by
its own re-admission. Nothing observable changes (tests/simulator/policies/
test_private_hashes.py holds it to hashing every block, step by step and over random runs):
V1's free queue orders blocks whatever their hashes (kv/lru_queue.py), and a lookup of a private
hash misses until the request is preempted. It saves the hashing, caching and un-caching of
nearly every block of a trace whose prompts share nothing (the Azure traces).
"""

from __future__ import annotations

from pagesim.simulator.core.request import GENERATED_SEGMENT, Request, prompt_segments
from pagesim.simulator.kv.hybrid_cache import HybridKVCache
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.kv.prefix_hash import SequenceHasher
from pagesim.simulator.policies.seq_group import SeqGroup


def prompt_hasher(request: Request, block_size: int) -> SequenceHasher:
    """Block hashes of the request's prompt, as its content keys say (`prompt_segments`)."""
    hasher = SequenceHasher(block_size)
    for key, length in prompt_segments(request):
        hasher.extend(key, length)
    return hasher


def has_private_blocks(request: Request, block_size: int) -> bool:
    """Whether no block of `request` can be another request's hit: one sequence whose first
    block already holds its own prompt (a shared prefix shorter than a block, or none), which
    is no turn of a session (the next turn repeats its prompt), whose workload gave no content
    keys (a trace's block ids are shared on purpose) and which is no sample of another's
    prompt (V1's n > 1 children share their parent's)."""
    return (
        request.content is None
        and request.session_id is None
        and request.prompt_of is None
        and request.num_seqs == 1
        and (request.prefix_group is None or request.prefix_len < block_size)
    )


def hash_private(kv: PagedKVCache | HybridKVCache, group: SeqGroup) -> None:
    """A private group about to lose its blocks (preemption) hashes them now and registers
    those V1 would have cached as they filled (PagedState.add_to_step): its full allocated
    blocks, prompt and generated tokens. It keeps its hasher from then on."""
    request = group.request
    (seq_id,) = group.seq_ids
    hasher = prompt_hasher(request, kv.block_size)
    hasher.extend((GENERATED_SEGMENT, seq_id), request.num_generated)
    kv.cache_blocks(seq_id, kv.num_tokens(seq_id), hasher.block_hashes())
    group.hashers = [hasher]
