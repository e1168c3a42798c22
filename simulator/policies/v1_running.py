"""vLLM V1's running phase: the running requests, in order, each its tokens of the step's budget,
preempting by recompute when its blocks do not fit (`v1/core/sched/scheduler.py`
`Scheduler.schedule`, the loop over `self.running`).

Whom a request short of blocks preempts:

    FCFS      the last running request not yet visited (pagesim: the victim policy's choice
              among them), else itself; a request that preempted itself is the last visited
    priority  the least urgent of ALL running requests, max (priority, arrival time), those
              scheduled earlier in this step and itself included (same in v0.11.0 and v0.34.0)

A victim scheduled earlier in the step leaves it: its entries go, its blocks are freed, and
(from v0.11.1) its tokens return to the budget (`token_budget += num_scheduled_tokens.pop(...)`,
with its new blocks, drafts and encoder budget; the loop index steps back so the next request is
still visited). v0.11.0 removed it from the scheduled list only: its tokens stayed counted, and
the request after the one that preempted it was skipped this step (the index was not stepped
back). pagesim follows both, but drops the victim's entries in v0.11.0 too (v0.11.0 still sent
its tokens to the worker, computing them for a request it had just preempted).

A priority request that preempted itself ends the running phase up to v0.32; from v0.33.0 the
requests after it are still visited ("the requests after it have higher priority and may still
fit (it just freed its blocks)"). The release's rules: core/vllm_eras.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from pagesim.simulator.core.config import AdmissionOrder
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.seq_group import Demand, SeqGroup, StepBuilder

# Slots a group's sequences must gain to compute `num_new` tokens (the lookahead included).
Slots = Callable[[SeqGroup, int], int]


def schedule_running_v1(
    state: PagedState,
    step: StepBuilder,
    budget: int,
    demand: Demand,
    slots: Slots,
    now_s: float,
) -> int:
    """The running phase; returns the budget left."""
    remaining: deque[SeqGroup] = deque(state.running)
    kept: list[SeqGroup] = []  # visited (scheduled, or sitting this step out), in order
    taken: dict[SeqGroup, int] = {}  # the budget each group scheduled in this step took
    rules = state.rules
    assert rules is not None, "a V1 policy's state"
    by_priority = state.system.admission is AdmissionOrder.PRIORITY
    allocate_slots = state.kv.allocate_slots
    num_to_skip = 0  # v0.11.0: requests passed over after a victim before them left the list
    while remaining and budget > 0:  # so a lone decode (1 token) always fits the budget
        group = remaining.popleft()
        if num_to_skip:
            num_to_skip -= 1
            kept.append(group)
            continue
        asked = demand(group, budget)
        if asked is None:
            kept.append(group)  # no room this step; it keeps its blocks
            continue
        num_new, tokens, is_prefill = asked
        while (copies := allocate_slots(group.seq_ids, slots(group, num_new))) is None:
            if not by_priority:
                if not state.preempt_for(group, remaining, step, now_s):
                    break  # it preempted itself
                continue
            key = state.victim_key
            victim = max((*kept, group, *remaining), key=lambda g: key(g.request))
            if victim is group:
                state.preempt(group, step, now_s)
                break
            scheduled = victim in taken
            if scheduled:
                step.remove(victim)
                returned = taken.pop(victim)
                if rules.returns_victim_budget:
                    budget += returned
            if victim in remaining:
                remaining.remove(victim)
            else:
                kept.remove(victim)
                if not rules.returns_victim_budget:
                    num_to_skip += 1  # the list shifted under v0.11.0's loop index
            # A scheduled victim holds slots for this step's tokens, never computed: swap
            # (pagesim's extension under V1) would carry them, so it is recomputed.
            state.preempt(victim, step, now_s, recompute=scheduled)
        if copies is None:  # it preempted itself
            if by_priority and not rules.continues_past_self_preemption:
                break
            continue
        state.add_to_step(step, group, num_new, is_prefill, copies)
        kept.append(group)
        taken[group] = tokens
        budget -= tokens
    state.running = kept + list(remaining)
    return budget
