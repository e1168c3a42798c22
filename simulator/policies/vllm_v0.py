"""vLLM's V0 scheduler (the engine of vLLM 0.4–0.6, `vllm/core/scheduler.py`), as pagesim
models it (docs/facts.md, "vLLM behaviour by version"; read in the v0.6.4 wheel):

FCFS; while nothing is swapped out, admit waiting prompts whole (a prefill-only iteration),
stopping at the first that does not fit above the watermark; otherwise a decode-only iteration
over the running requests, preempting the victim policy's choice when a block is missing, then
swapping requests back in if nothing was preempted.
"""

from __future__ import annotations

from collections import deque

from pagesim.simulator.core.config import SystemConfig
from pagesim.simulator.policies.admission import admit
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.pieces import PagedPieces, paged_pieces
from pagesim.simulator.policies.remote_kv import admit_landed
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder, blocks_for


class VllmV0:
    """The V0 step: prefill-only or decode-only."""

    fans_out = False  # n > 1: forks sharing blocks copy-on-write
    groups_decodes = True  # lone decoders may advance as a decode group (the fast path)

    def pieces(self, system: SystemConfig) -> PagedPieces:
        return paged_pieces(system, is_v1=False)

    def schedule(self, state: PagedState, step: StepBuilder, now_s: float) -> None:
        if not state.swapped:
            admit_prompts(state, step, now_s)
            if step.work:
                return
        grow_running(state, step, now_s)
        if not step.preemptions:
            while state.swapped and state.swap_back_one(step, now_s):
                pass

    def pure_step_lookups(self, state: PagedState) -> int | None:
        """With every running request decoding alone and nothing swapped out: 0 if the next
        step decodes them and admits nothing, and so does each after it while nobody finishes
        and blocks are only taken (the decode fast path's runs: fastpath/decode_window.py),
        else None. Never a lookup to count: `head_stays_waiting` holds only where V0 makes
        none."""
        waiting = state.waiting
        return 0 if not len(waiting) or head_stays_waiting(state, waiting[0]) else None


def admit_prompts(state: PagedState, step: StepBuilder, now_s: float) -> None:
    """Whole prompts, FCFS, until one does not fit (its sequences, its tokens or its blocks)."""
    knobs = state.knobs
    # V0 needs a whole prompt in one step: a cap below the model's length is refused at start
    # (core.defaults.v0_token_cap_reason), as vLLM V0 refuses it.
    budget = knobs.max_num_batched_tokens
    waiting = state.waiting
    while len(waiting):
        group = waiting[0]
        if state.num_running_seqs + group.request.num_seqs > knobs.max_num_seqs:
            break
        if group.target > budget:  # charged in full, prefix hits included (conservative)
            break
        scheduled = admit(state, group, group.target, step, now_s)
        if not scheduled:
            break
        waiting.pop()
        budget -= scheduled
    if state.landed:  # a disaggregated decode replica's prompts whose KV arrived (remote_kv.py)
        admit_landed(state, step, budget, now_s)  # a head that did not fit blocks none of them


def head_stays_waiting(state: PagedState, head: SeqGroup) -> bool:
    """`admit_prompts` refuses `head` now, touching nothing, and will while the running requests
    hold on and the free blocks only fall (False where that is not sure: then every step is
    scheduled). Its refusals without side effects: the batch is full, the prompt exceeds the
    token cap, or its blocks do not fit above the watermark (`admit`: a prompt with cached
    blocks is checked before any lookup, one without through an allocation that fails;
    with the prefix cache on, a lookup of no hashes still counts its tokens as queried)."""
    knobs = state.knobs
    if state.num_running_seqs + head.request.num_seqs > knobs.max_num_seqs:
        return True
    if head.target > knobs.max_num_batched_tokens:
        return True
    if head.is_remote or len(head.seq_ids) != 1:
        return False
    if knobs.enable_prefix_cache:
        hashers = head.hashers
        if not state.pieces.admission_counts_cached_blocks or not hashers:
            return False
        if not hashers[0].block_hashes():
            return False
    needed = blocks_for(head.target, state.block_size)
    return state.kv.num_free_blocks - needed < state.reserve()


def grow_running(state: PagedState, step: StepBuilder, now_s: float) -> None:
    """Every running request decodes one token per sequence. As vLLM V0 decides it
    (core/scheduler.py _schedule_running, core/block_manager_v1.py can_append_slots), a group
    goes ahead only while at least one block per sequence is free, whether or not its token
    needs one; until then the tail of the running queue is preempted."""
    decode_group = state.decode_group
    if decode_group is not None:  # the fast path's members summed, if nobody is preempted
        left = decode_group.schedule_running(
            state.running, step, _UNBUDGETED, _decode, state.add_to_step
        )
        if left is not None:
            return
    remaining: deque[SeqGroup] = deque(state.running)
    kept: list[SeqGroup] = []
    kv = state.kv
    while remaining:
        group = remaining.popleft()
        is_kept = True
        while kv.num_free_blocks < len(group.seq_ids):
            if not state.preempt_for(group, remaining, step, now_s):
                is_kept = False
                break
        if not is_kept:
            continue
        copies = kv.allocate_slots(group.seq_ids, 1)
        assert copies is not None, "one free block per sequence covers a decode token"
        step.add(group, 1, False, copies)  # (V0 caches blocks when committed, not now)
        kept.append(group)
    state.running = kept


# V0's decode-only step takes every running request, whatever the token budget.
_UNBUDGETED = 1 << 62


def _decode(group: SeqGroup, available: int) -> tuple[int, int, bool]:
    """A running V0 request's demand: one token per sequence (its prompt ran whole)."""
    return 1, len(group.seq_ids), False
