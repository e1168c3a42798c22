"""The baselines that reserve KV contiguously per request: static batching and Orca.

Both lay every sequence's KV out as one contiguous region of the address space, sized by a
reservation policy (the model's max length, a power of two, or the oracle's true length) and
placed by the system's `contiguous_allocator` (orca: a buddy allocator, as the vLLM paper's Orca;
static: first fit), so internal and external fragmentation are real. Nothing is shared and
nothing is preempted: a reservation, once made, holds the sequence's whole future.

static (FasterTransformer): wait for up to `static_batch_size` requests (or the fill timeout),
prefill them together with prompts padded to the longest, then decode until the last member
finishes; finished members keep their slot and are still computed (padding) until the batch ends,
and the batch's answers return together then (`finish_s`; `last_token_s` is when each was done).

orca: iteration-level scheduling; each iteration decodes every running sequence and admits waiting
requests whose reservations fit, prefilling their whole prompts in the same iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pagesim.simulator.core.config import ContiguousAllocator, SystemConfig
from pagesim.simulator.core.memory import MemoryBreakdown, MemoryRow
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.core.request import Request, RequestStatus
from pagesim.simulator.kv.buddy import BuddyKVCache, block_order
from pagesim.simulator.kv.contiguous import ContiguousKVCache, RegionCache, reservation_slots
from pagesim.simulator.policies.base import PolicyBase
from pagesim.simulator.policies.pieces import WaitingQueue, waiting_queue


@dataclass(eq=False, slots=True)
class Member:
    """A request holding contiguous regions, one per sequence (nothing shared)."""

    request: Request
    seq_ids: list[int] = field(default_factory=list)
    num_computed: int = 0  # KV tokens computed per sequence
    is_done: bool = False


class ReservingScheduler(PolicyBase):
    """Shared mechanics: reservation sizing, admission into regions, token bookkeeping."""

    returns_batch_together = False  # static batching answers a whole batch at once

    def __init__(self, system: SystemConfig, max_seq_len: int, num_slots: int) -> None:
        super().__init__(system, max_seq_len)
        self.kv: RegionCache
        if system.contiguous_allocator is ContiguousAllocator.BUDDY:
            self.kv = BuddyKVCache(num_slots)
        else:
            self.kv = ContiguousKVCache(num_slots)
        self.waiting: WaitingQueue[Request] = waiting_queue(system, _same)
        self.running: list[Member] = []
        self.members: dict[int, Member] = {}  # request id -> its member, while it holds regions
        self._final_lens: dict[int, int] = {}
        self._next_seq_id = 0

    def _region_slots(self, request: Request) -> int:
        return reservation_slots(
            self.system.reservation, request.prompt_len, request.output_len, self.max_seq_len
        )

    def add_request(self, request: Request, now_s: float) -> None:
        reason = self.too_long_reason(request)
        slots = self._region_slots(request)
        if reason is None and not self.kv.can_ever_hold(slots, request.num_seqs):
            reason = self._never_fits_reason(slots, request.num_seqs)
        # Else it would wait forever: no batch may hold its sequences.
        reason = reason or self.too_many_seqs_reason(request)
        if reason is not None:
            request.reject(reason, now_s)
            return
        self.waiting.push(request)

    def _never_fits_reason(self, slots: int, num_seqs: int) -> str:
        reservation = self.system.reservation.value
        if isinstance(self.kv, BuddyKVCache):
            block = 1 << block_order(slots)
            return (
                f"reserves {num_seqs} x {block} contiguous KV slots ({reservation} reservation "
                f"of {slots} slots, rounded up to a power of two by the buddy allocator); the "
                f"cache of {self.kv.num_slots} slots cannot hold them"
            )
        return (
            f"reserves {slots * num_seqs} contiguous KV slots ({reservation} "
            f"reservation); the cache holds {self.kv.num_slots}"
        )

    def _try_reserve(self, request: Request, now_s: float) -> Member | None:
        """Reserve one region per sequence, all or nothing."""
        slots = self._region_slots(request)
        member = Member(request)
        for _ in range(request.num_seqs):
            if not self.kv.can_reserve(slots):
                for seq_id in member.seq_ids:
                    self.kv.free(seq_id)
                    del self._final_lens[seq_id]
                return None
            seq_id = self._next_seq_id
            self._next_seq_id += 1
            self.kv.reserve(seq_id, slots)
            self._final_lens[seq_id] = request.total_len - 1
            member.seq_ids.append(seq_id)
        request.transition(RequestStatus.RUNNING, now_s)
        self.members[request.request_id] = member
        return member

    def _advance(self, member: Member, num_new: int, now_s: float, is_prefill: bool) -> None:
        member.num_computed += num_new
        for seq_id in member.seq_ids:
            self.kv.set_computed(seq_id, member.num_computed)
        if is_prefill and member.num_computed < member.request.prompt_len:
            return
        self.num_output_tokens += len(member.seq_ids)  # one token per sequence
        if member.request.produce_token(now_s):
            member.is_done = True
            if not self.returns_batch_together:
                member.request.transition(RequestStatus.FINISHED, now_s)

    def _release(self, member: Member) -> None:
        for seq_id in member.seq_ids:
            self.kv.free(seq_id)
            del self._final_lens[seq_id]
        del self.members[member.request.request_id]

    def _planned(self, plan: StepPlan) -> list[tuple[Member, bool]]:
        """The members `plan` lists, in its order, each once, with whether it prefills."""
        out: list[tuple[Member, bool]] = []
        last_rid = None
        for item in plan.work:
            if item.request_id != last_rid:
                last_rid = item.request_id
                out.append((self.members[last_rid], item.is_prefill))
        return out

    @property
    def has_pending(self) -> bool:
        return bool(self.running or len(self.waiting))

    def queue_lengths(self) -> tuple[int, int, int]:
        return sum(not m.is_done for m in self.running), len(self.waiting), 0

    def memory_breakdown(self) -> MemoryBreakdown:
        next_slots = self._region_slots(self.waiting[0]) if len(self.waiting) else None
        return self.kv.memory_breakdown(self._final_lens, next_slots)

    def memory_row(self) -> MemoryRow:
        return self.memory_breakdown().row

    def check_invariants(self) -> None:
        self.kv.check_invariants()

    @property
    def kv_capacity_slots(self) -> int:
        return self.kv.num_slots


class OrcaScheduler(ReservingScheduler):
    def schedule(self, now_s: float) -> StepPlan:
        work: list[SeqWork] = []
        for member in self.running:
            context = member.num_computed + 1
            rid = member.request.request_id
            work.extend(SeqWork(rid, s, 1, context, False) for s in member.seq_ids)
        num_seqs = sum(len(m.seq_ids) for m in self.running)
        budget = max(self.knobs.max_num_batched_tokens, self.max_seq_len)
        while len(self.waiting):
            request = self.waiting[0]
            if num_seqs + request.num_seqs > self.knobs.max_num_seqs:
                break
            if request.prompt_len > budget:
                break
            admitted = self._try_reserve(request, now_s)
            if admitted is None:
                break  # FCFS: the head blocks the queue
            self.waiting.pop()
            num_seqs += request.num_seqs
            budget -= request.prompt_len
            work.extend(
                SeqWork(request.request_id, s, request.prompt_len, request.prompt_len, True)
                for s in admitted.seq_ids[:1]
            )
        return StepPlan.build(work)

    def complete(self, plan: StepPlan, now_s: float) -> None:
        for member, is_prefill in self._planned(plan):
            if is_prefill:
                self._advance(member, member.request.prompt_len, now_s, is_prefill=True)
                self.running.append(member)
            else:
                self._advance(member, 1, now_s, is_prefill=False)
        for member in self.running:
            if member.is_done:
                self._release(member)
        self.running = [m for m in self.running if not m.is_done]


class StaticScheduler(ReservingScheduler):
    """One batch at a time; see the module docstring."""

    returns_batch_together = True

    def __init__(self, system: SystemConfig, max_seq_len: int, num_slots: int) -> None:
        super().__init__(system, max_seq_len, num_slots)
        self.batch_capacity = system.static_batch_size
        self._padded_prompt = 0  # the batch's longest prompt: every member is padded to it
        self._num_steps_in_batch = 0

    def next_wakeup_s(self, now_s: float) -> float | None:
        if self.running or not len(self.waiting):
            return None
        return self.waiting[0].arrival_s + self.system.static_batch_timeout_s

    def _ready_to_form(self, now_s: float) -> bool:
        if len(self.waiting) >= self.system.static_batch_size or self.arrivals_done:
            return True
        oldest = self.waiting[0].arrival_s
        return now_s >= oldest + self.system.static_batch_timeout_s

    def schedule(self, now_s: float) -> StepPlan:
        if not self.running:
            if not len(self.waiting) or not self._ready_to_form(now_s):
                return StepPlan.build(())
            return self._form_batch(now_s)
        self._num_steps_in_batch += 1
        context = self._padded_prompt + self._num_steps_in_batch
        work = [
            SeqWork(m.request.request_id, s, 1, context, False)
            for m in self.running
            for s in m.seq_ids
        ]
        # Members already done are computed still, as padding that makes no token.
        num_padding = sum(len(m.seq_ids) for m in self.running if m.is_done)
        return StepPlan.build(work, num_padding_seqs=num_padding)

    def _form_batch(self, now_s: float) -> StepPlan:
        batch: list[Member] = []
        num_seqs = 0
        while len(self.waiting) and len(batch) < self.system.static_batch_size:
            request = self.waiting[0]
            if num_seqs + request.num_seqs > self.knobs.max_num_seqs:
                break
            member = self._try_reserve(request, now_s)
            if member is None:
                break
            self.waiting.pop()
            batch.append(member)
            num_seqs += request.num_seqs
        if not batch:
            return StepPlan.build(())
        self._padded_prompt = max(m.request.prompt_len for m in batch)
        self._num_steps_in_batch = 0
        pad = self._padded_prompt
        work = [SeqWork(m.request.request_id, m.seq_ids[0], pad, pad, True) for m in batch]
        return StepPlan.build(work)

    def complete(self, plan: StepPlan, now_s: float) -> None:
        planned = self._planned(plan)
        if plan.num_prefill_seqs:  # a new batch's prompts
            for member, _ in planned:
                self._advance(member, member.request.prompt_len, now_s, is_prefill=True)
            self.running = [member for member, _ in planned]
        else:  # the batch decodes; members already done are padding
            for member, _ in planned:
                if not member.is_done:
                    self._advance(member, 1, now_s, is_prefill=False)
        if all(m.is_done for m in self.running):
            for member in self.running:
                self._release(member)
                # The batch returns all its answers now.
                member.request.transition(RequestStatus.FINISHED, now_s)
            self.running = []


def _same(request: Request) -> Request:
    return request
