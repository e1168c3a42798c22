"""A decode replica receiving a prompt's KV from a prefill replica, as vLLM V1 does it.

vLLM V1 (`vllm/v1/core/sched/scheduler.py`, `vllm/v1/request.py`, reference v0.11.0): a request
whose KV is remote is given blocks for its whole prompt (less what the local prefix cache
already holds) and parks in WAITING_FOR_REMOTE_KVS while the connector loads them; the blocks
are cached only once loaded (`allocate_slots(..., delay_cache_blocks=True)`). When the load
finishes (`_update_waiting_for_remote_kv`) it is WAITING again with every prompt token but the
last counted as computed ("on a full prompt hit, we need to re-compute the last token in order
to be able to sample the next token"), so its first step computes one token and produces the
first output token.

Here: `reserve_remote` allocates the blocks (or refuses: no room now), `land_remote` marks the KV
computed and queues the request; its admission (policies/admission.py) runs the last token.
The request's status stays WAITING throughout, as vLLM's WAITING_FOR_REMOTE_KVS is a kind of
waiting.

One departure from vLLM: a landed prompt is admitted even behind a waiting request that does not
fit (`admit_landed`). It needs no new block (they were allocated before the transfer), so it
takes nothing from that request; vLLM's waiting loop stops at the first request that does not
fit, and a decode replica whose running request was preempted for lack of blocks, with landed
prompts holding the rest behind it, would then wait forever (nothing running frees a block).
"""

from __future__ import annotations

from pagesim.simulator.core.request import Request, RequestStatus
from pagesim.simulator.policies.admission import admit
from pagesim.simulator.policies.group_hashes import prompt_hasher
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder


def release_held(scheduler: PagedScheduler, request_id: int) -> None:
    """The KV of a prefill replica's finished request has left: free its held blocks."""
    state = scheduler.state
    state.kv.free(state.held.pop(request_id))


def can_receive(scheduler: PagedScheduler) -> bool:
    """Whether remote prompts may take blocks now: not while a preempted request waits at the
    head of the queue (vLLM puts preempted requests first in `waiting` and allocates in queue
    order, stopping at the first request that does not fit)."""
    waiting = scheduler.state.waiting
    return not len(waiting) or waiting[0].request.status is not RequestStatus.PREEMPTED


def reserve_remote(scheduler: PagedScheduler, request: Request) -> int | None:
    """Allocate slots for `request`'s prompt before its KV is sent; returns the prompt tokens
    to receive (those the local prefix cache does not hold), or None when the blocks do not
    fit now (nothing is changed then)."""
    state = scheduler.state
    kv = state.kv
    group = SeqGroup(request, [state.new_seq_id()], target=request.prompt_len)
    hashes: list[int] = []
    if state.knobs.enable_prefix_cache:
        group.hashers = [prompt_hasher(request, state.block_size)]
        hashes = group.hashers[0].block_hashes()
    seq_id = group.seq_ids[0]
    num_hit = kv.add_seq(
        seq_id, hashes, num_prompt_tokens=request.prompt_len, final_len=group.final_len
    )
    num_remote = request.prompt_len - num_hit
    if kv.allocate_slots((seq_id,), num_remote, state.reserve()) is None:
        kv.free(seq_id)
        return None
    if group.hashers is not None:
        state.prefix_stats.record(request, request.prompt_len, num_hit)
    request.num_cached_tokens += num_hit
    group.num_computed = num_hit
    state.groups[request.request_id] = group
    state.receiving[request.request_id] = group
    return num_remote


def land_remote(scheduler: PagedScheduler, request_id: int) -> None:
    """The KV of `request_id`'s prompt has arrived: all but its last token count as computed
    (and enter the prefix cache), and it waits for admission."""
    state = scheduler.state
    group = state.receiving.pop(request_id)
    num_computed = group.target - 1
    hashes = group.hashers[0].block_hashes() if group.hashers is not None else ()
    if num_computed > group.num_computed:
        state.kv.commit(group.seq_ids[0], num_computed, hashes)
        group.num_computed = num_computed
    group.is_remote = True
    state.landed[request_id] = group
    state.waiting.push(group)


def admit_landed(
    state: PagedState, step: StepBuilder, budget: int, now_s: float, pad_to: int = 0
) -> int:
    """Admit landed remote prompts from anywhere in the queue (each its last prompt token, or
    `pad_to` tokens under speculative decoding's padding: policies/admission.py, in slots it
    holds and its lookahead) while the token budget, max_num_seqs and the blocks allow; returns
    the budget left. Called when the queue's head does not fit."""
    if not state.landed:
        return budget
    landed = list(state.landed.values())  # in the order they landed
    max_num_seqs = state.knobs.max_num_seqs
    for group in landed:
        if budget <= 0 or state.num_running_seqs + group.num_seqs > max_num_seqs:
            break
        scheduled = admit(state, group, budget, step, now_s, pad_to=pad_to)
        if not scheduled:
            break  # its padded tokens or lookahead blocks do not fit
        state.waiting.remove(group)
        budget -= scheduled
    return budget
