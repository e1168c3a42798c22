"""The two paged policies, as vLLM's V0 and V1 schedulers decide an iteration (FACTS.md).

V0: FCFS; while nothing is swapped out, admit waiting prompts whole (prefill-only iteration),
stopping at the first that does not fit above the watermark; otherwise a decode-only iteration
over the running requests, preempting the victim policy's choice when a block is missing, then
swapping requests back in if nothing was preempted.

V1: one token budget per step. Running requests first (decode = 1 token per sequence, an
unfinished prompt = its next chunk), preempting when blocks run out; then, unless this step
preempted, swapped-out requests come back and, once none is left swapped out, waiting requests are
admitted, each chunked into what is left of the budget (Sarathi-Serve's stall-free batching).
vLLM's V1 only recomputes; swap under V1 is pagesim's extension, with V0's rule for swapped
requests.
"""

from __future__ import annotations

from collections import deque

from pagesim.simulator.core.plan import BlockCopy, Preemption, StepPlan, seq_work_of
from pagesim.simulator.policies.decode_group import DecodeGroup
from pagesim.simulator.policies.paged_state import Group, PagedScheduler


class _StepState:
    """What one schedule() call accumulates."""

    __slots__ = ("copies", "preemptions", "swap_in", "swap_out")

    def __init__(self) -> None:
        self.preemptions: list[Preemption] = []
        self.copies: list[BlockCopy] = []
        self.swap_out = 0
        self.swap_in = 0


class VllmV0Scheduler(PagedScheduler):
    def schedule(self, now_s: float) -> StepPlan:
        step = _StepState()
        self._begin_step()
        if not self.swapped:
            self._admit_prompts(now_s)
            if self._scheduled:
                return self._build_plan([], 0, 0, [])
        self._grow_running(step, now_s)
        if not step.preemptions:
            self._swap_back(step, now_s)
        return self._build_plan(step.preemptions, step.swap_out, step.swap_in, step.copies)

    def _admit_prompts(self, now_s: float) -> None:
        # V0 needs a whole prompt in one step, so its token cap is at least the model length.
        budget = max(self.system.max_num_batched_tokens, self.max_seq_len)
        while len(self.waiting):
            group = self.waiting.peek()
            if self._num_running_seqs + group.request.num_seqs > self.system.max_num_seqs:
                break
            if group.target > budget:  # charged in full, prefix hits included (conservative)
                break
            scheduled = self._admit(group, group.target, now_s)
            if not scheduled:
                break
            self.waiting.pop()
            budget -= scheduled

    def _grow_running(self, step: _StepState, now_s: float) -> None:
        remaining = deque(self.running)
        kept: list[Group] = []
        kv = self.kv
        while remaining:
            group = remaining.popleft()
            if len(group.seq_ids) == 1 and kv.append_one_slot(group.seq_ids[0]):
                self._schedule(group, 1, False)  # grown in place: its slot fit
                kept.append(group)
                continue
            if not self._make_room(group, 1, remaining, step, now_s):
                continue
            self._grow(group, 1, False, step.copies)
            kept.append(group)
        self.running = kept

    def _make_room(
        self,
        group: Group,
        num_new: int,
        remaining: deque[Group],
        step: _StepState,
        now_s: float,
    ) -> bool:
        """Preempt victims among the not-yet-scheduled until `group` can grow by `num_new` per
        sequence; False if `group` itself had to go."""
        needed = self._blocks_to_grow(group, num_new)  # unchanged by preempting others
        while needed > self.kv.num_free_blocks:
            if remaining:
                victim = max(remaining, key=lambda g: self._victim_key(g.request))
                remaining.remove(victim)
            else:
                victim = group
            preemption, swapped_blocks = self._preempt(victim, now_s)
            step.preemptions.append(preemption)
            step.swap_out += swapped_blocks
            if victim is group:
                return False
        return True

    def _swap_back(self, step: _StepState, now_s: float) -> None:
        while self.swapped and self._swap_back_one(step, now_s):
            pass

    def _swap_back_one(self, step: _StepState, now_s: float) -> bool:
        """Bring the oldest swapped-out group back and schedule its decode; False if it can't."""
        group = self.swapped[0]
        if self._num_running_seqs + group.num_seqs > self.system.max_num_seqs:
            return False
        # Swapping in must leave room for this step's token of every sequence, and keeps at
        # least one block spare, as it always did for a lone sequence. (One block per sequence,
        # asked before, is more than a group sharing a partly filled block may ever find free:
        # it stayed swapped out and the scheduler stalled.)
        needed = max(1, self._blocks_to_resume(group))
        if not self.kv.can_swap_in(group.seq_ids, self._reserve() + needed):
            return False
        self.swapped.popleft()
        step.swap_in += self._swap_in(group, now_s)
        # One token per sequence: a decode, or the next prompt token of a group swapped out in
        # the middle of a chunked prefill (which must not produce an output token yet).
        self._grow(group, 1, group.is_prefilling, step.copies)
        return True

    def _blocks_to_resume(self, group: Group) -> int:
        """GPU blocks a swapped-out group's first step back takes (one token per sequence): a new
        block where the last is full, a copy-on-write copy for every sequence but one sharing a
        partly filled last block (swap-in keeps the group's sharing, and only its own)."""
        kv, bs = self.kv, self.block_size
        needed = 0
        partial_last: set[int] = set()
        for seq_id in group.seq_ids:
            if kv.num_tokens(seq_id) % bs == 0:
                needed += 1
                continue
            last = kv.block_table(seq_id)[-1]
            if last in partial_last:
                needed += 1
            partial_last.add(last)
        return needed


class VllmV1Scheduler(VllmV0Scheduler):
    def enable_decode_group(self) -> None:
        """Advance lone decoding sequences as one group (simulator.policies.decode_group): same
        results, no per-sequence work between their block boundaries. For runs nobody inspects step
        by step (no invariant checks, no per-step plan consumers); not with a prefix cache."""
        if not self.system.enable_prefix_cache:
            self._decode_group = DecodeGroup(self.kv)

    def schedule(self, now_s: float) -> StepPlan:
        step = _StepState()
        self._begin_step()
        budget = self.system.max_num_batched_tokens
        chunk_cap = self.system.max_prefill_chunk or budget
        left = self._schedule_with_group(step, budget, chunk_cap)
        budget = self._schedule_running(step, budget, chunk_cap, now_s) if left is None else left
        if not step.preemptions:
            if self.swapped:
                budget = self._resume_swapped(step, budget, now_s)
            # As in V0, swapped-out requests go first: admitting new ones past them would starve
            # them and fill the CPU swap space.
            if not self.swapped and len(self.waiting):
                self._admit_chunks(budget, chunk_cap, now_s)
        return self._build_plan(step.preemptions, step.swap_out, step.swap_in, step.copies)

    def _schedule_with_group(self, step: _StepState, budget: int, chunk_cap: int) -> int | None:
        """The running requests' part of the step with the decode group summed, if it is exactly
        what `_schedule_running` would do: every member decodes (the budget reaches them all) and
        nothing needs room made (the blocks asked for fit). Returns the budget left, or None
        (members released: the caller schedules sequence by sequence)."""
        group_ = self._decode_group
        if group_ is None:
            return None
        members = group_.bases
        if not members:
            return None
        crossing = group_.crossing()  # seq ids of members whose token needs a new block
        running = self.running
        # Replay the budget in visiting order: before the n-th other, i - n members took 1 each.
        visits: list[tuple[Group, int, bool]] = []
        spent, needed = 0, len(crossing)
        for n, i in enumerate(group_.others(running)):
            group = running[i]
            available = budget - (i - n) - spent
            if available <= 0:
                group_.release_all()
                return None
            if group.num_computed < group.target:
                num_new = min(group.target - group.num_computed, available, chunk_cap)
                tokens, is_prefill = num_new, True
            else:
                num_new, tokens, is_prefill = 1, len(group.seq_ids), False
                if tokens > available:
                    continue  # no room this step; it keeps its blocks
            needed += self._blocks_to_grow(group, num_new)
            spent += tokens
            visits.append((group, num_new, is_prefill))
        left = budget - spent - len(members)
        if left < 0 or needed > self.kv.num_free_blocks:
            group_.release_all()
            return None
        # Now exactly the per-sequence path's operations, in the same order but for block ids:
        # the crossing members take theirs first (with no prefix cache an id is never observed).
        group_.grow(crossing)
        kv = self.kv
        for group, num_new, is_prefill in visits:
            if not is_prefill and len(group.seq_ids) == 1 and kv.append_one_slot(group.seq_ids[0]):
                self._schedule(group, 1, False)
            else:
                self._grow(group, num_new, is_prefill, step.copies)
        self._num_decode_tokens += len(members)
        self._is_grouped_step = True
        self._running_at_plan = tuple(running)
        return left

    def _schedule_running(self, step: _StepState, budget: int, chunk_cap: int, now_s: float) -> int:
        """Running requests first, sequence by sequence; returns the budget left."""
        remaining = deque(self.running)
        kept: list[Group] = []
        kv = self.kv
        scheduled, work = self._scheduled, self._work
        num_lone_decodes = 0
        while remaining and budget > 0:  # so a lone decode (1 token) always fits the budget
            group = remaining.popleft()
            seq_ids = group.seq_ids
            is_prefill = group.num_computed < group.target
            if is_prefill:
                num_new = min(group.target - group.num_computed, budget, chunk_cap)
                tokens = num_new
            elif len(seq_ids) == 1 and kv.append_one_slot(seq_ids[0]):
                # The common case, a lone sequence decoding whose slot fits: grown in place and
                # scheduled inline (this is _schedule(group, 1, False) for every such group).
                scheduled.append((group, 1, False))
                rid = group.request.request_id
                work.append(seq_work_of((rid, seq_ids[0], 1, group.num_computed + 1, False)))
                num_lone_decodes += 1
                kept.append(group)
                budget -= 1
                continue
            else:
                num_new, tokens = 1, len(seq_ids)
                if tokens > budget:
                    kept.append(group)  # no room this step; it keeps its blocks
                    continue
            # Otherwise make room only if needed: one check per group per step.
            if self._blocks_to_grow(group, num_new) > kv.num_free_blocks and not self._make_room(
                group, num_new, remaining, step, now_s
            ):
                continue
            self._grow(group, num_new, is_prefill, step.copies)
            kept.append(group)
            budget -= tokens
        self.running = kept + list(remaining)
        self._num_decode_tokens += num_lone_decodes
        return budget

    def _resume_swapped(self, step: _StepState, budget: int, now_s: float) -> int:
        while self.swapped:
            num_seqs = self.swapped[0].num_seqs
            if num_seqs > budget or not self._swap_back_one(step, now_s):
                break
            budget -= num_seqs
        return budget

    def _admit_chunks(self, budget: int, chunk_cap: int, now_s: float) -> None:
        while len(self.waiting) and budget > 0:
            group = self.waiting.peek()
            if self._num_running_seqs + group.request.num_seqs > self.system.max_num_seqs:
                break
            scheduled = self._admit(group, min(budget, chunk_cap), now_s)
            if not scheduled:
                break
            self.waiting.pop()
            budget -= scheduled
