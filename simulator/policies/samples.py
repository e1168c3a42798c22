"""A request of several sequences on the paged state: V1's n > 1 as child requests (`fan_out`),
V0's forks after the prompt (`fork`) and beam search's re-forks (`refork_beam`)."""

from __future__ import annotations

from dataclasses import replace

from pagesim.simulator.core.request import GENERATED_SEGMENT, Request, SamplingKind
from pagesim.simulator.policies.group_hashes import prompt_hasher
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.seq_group import FanOut, SeqGroup


def fan_out(state: PagedState, request: Request) -> list[SeqGroup]:
    """vLLM V1's n > 1 (v1/engine/parallel_sampling.py): one group per sample, each a child
    request of the parent's prompt and of its own output length (`FanOut`): the parent's, or
    each sample's when they differ (`Request.sample_output_lens`). Children's ids are counted
    from paged_state.CHILD_ID_BASE, far above any workload's request ids."""
    children = []
    lengths = request.sample_output_lens or (request.output_len,) * request.num_seqs
    for output_len in lengths:
        children.append(
            replace(
                request,
                request_id=state.new_child_id(),
                output_len=output_len,
                sample_output_lens=(),
                sampling=SamplingKind.SINGLE,
                num_seqs=1,
                history=[],
                prompt_of=request.request_id,
            )
        )
    shared = FanOut(request, children)
    return [state.new_group(child, shared) for child in children]


def fork(state: PagedState, group: SeqGroup) -> None:
    """Prompt done: fork the remaining sequences, sharing its blocks copy-on-write."""
    request = group.request
    parent = group.seq_ids[0]
    for _ in range(group.num_seqs, request.num_seqs):
        child = state.new_seq_id()
        state.kv.fork(parent, child)
        group.seq_ids.append(child)
        if group.hashers is not None:
            hasher = prompt_hasher(request, state.block_size)
            hasher.extend((GENERATED_SEGMENT, child), request.num_generated)
            group.hashers.append(hasher)
    state.num_running_seqs += request.num_seqs - 1


def refork_beam(state: PagedState, group: SeqGroup) -> None:
    """Beam search: each step one beam gives way to a copy of the leading beam (a fixed rotation
    stands in for the scores), so beams share generated blocks copy-on-write and the next write
    into a shared partial block copies it, as in vLLM's beam search."""
    request = group.request
    index = 1 + request.num_generated % (group.num_seqs - 1)
    state.kv.free(group.seq_ids[index])
    new = state.new_seq_id()
    state.kv.fork(group.seq_ids[0], new)
    group.seq_ids[index] = new
    if group.hashers is not None:
        group.hashers[index] = group.hashers[0].fork()
