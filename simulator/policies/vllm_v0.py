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
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder


class VllmV0:
    """The V0 step: prefill-only or decode-only."""

    fans_out = False  # n > 1: forks sharing blocks copy-on-write
    groups_decodes = False  # no decode fast path for V0 (yet): every step visits each request

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


def admit_prompts(state: PagedState, step: StepBuilder, now_s: float) -> None:
    """Whole prompts, FCFS, until one does not fit (its sequences, its tokens or its blocks)."""
    knobs = state.knobs
    # V0 needs a whole prompt in one step: a cap below the model's length is refused at start
    # (core.defaults.v0_token_cap_reason), as vLLM V0 refuses it.
    budget = knobs.max_num_batched_tokens
    waiting = state.waiting
    while len(waiting):
        group = waiting.peek()
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


def grow_running(state: PagedState, step: StepBuilder, now_s: float) -> None:
    """Every running request decodes one token per sequence. As vLLM V0 decides it
    (core/scheduler.py _schedule_running, core/block_manager_v1.py can_append_slots), a group
    goes ahead only while at least one block per sequence is free, whether or not its token
    needs one; until then the tail of the running queue is preempted."""
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
        state.add_to_step(step, group, 1, False, copies)
        kept.append(group)
    state.running = kept
