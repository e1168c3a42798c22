"""vLLM's V0 scheduler (the engine of vLLM 0.4–0.6, `vllm/core/scheduler.py`), as pagesim
models it (FACTS.md):

FCFS; while nothing is swapped out, admit waiting prompts whole (a prefill-only iteration),
stopping at the first that does not fit above the watermark; otherwise a decode-only iteration
over the running requests, preempting the victim policy's choice when a block is missing, then
swapping requests back in if nothing was preempted.
"""

from __future__ import annotations

from collections import deque

from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder


class VllmV0:
    """The V0 step: prefill-only or decode-only."""

    groups_decodes = False  # no decode fast path for V0 (yet): every step visits each request

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
    system = state.system
    # V0 needs a whole prompt in one step: a cap below the model's length is refused at start
    # (core.defaults.v0_token_cap_reason), as vLLM V0 refuses it.
    budget = system.max_num_batched_tokens
    assert budget is not None and system.max_num_seqs is not None
    waiting = state.waiting
    while len(waiting):
        group = waiting.peek()
        if state.num_running_seqs + group.request.num_seqs > system.max_num_seqs:
            break
        if group.target > budget:  # charged in full, prefix hits included (conservative)
            break
        scheduled = state.admit(group, group.target, step, now_s)
        if not scheduled:
            break
        waiting.pop()
        budget -= scheduled


def grow_running(state: PagedState, step: StepBuilder, now_s: float) -> None:
    """Every running request decodes one token per sequence, making room (preempting from the
    tail) when its blocks do not fit."""
    remaining: deque[SeqGroup] = deque(state.running)
    kept: list[SeqGroup] = []
    allocate_slots = state.kv.allocate_slots
    while remaining:
        group = remaining.popleft()
        copies = allocate_slots(group.seq_ids, 1)
        if copies is not None:  # the usual decode: its slots fit
            if copies:
                step.copies.extend(copies)
            step.add(group, 1, False)
            kept.append(group)
        elif state.grow(group, 1, False, remaining, step, now_s):
            kept.append(group)
    state.running = kept
