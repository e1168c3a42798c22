"""Mechanics shared by the paged policies (vllm-v0, vllm-v1): admit, grow, preempt, swap, complete.

A request becomes a `Group` of sequences over the paged KV cache. Its prompt is computed by
sequence 0 (in one step or in chunks); the step that computes the prompt's last token also produces
the first output token, and multi-sequence requests (parallel sampling, beams) then fork the
prompt's blocks copy-on-write. Each decode step computes the KV of every sequence's latest token
and produces the next one, so after g output tokens a sequence holds prompt + g - 1 KV tokens.

Preemption by recompute drops the blocks and re-prefills prompt + generated tokens later (reusing
whatever prefix blocks survive in the cache); preemption by swap copies the blocks to CPU memory
over the host link and back. Which one, and whom, are policy (`SystemConfig`); how is mechanism.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from pagesim.simulator.core.config import SystemConfig
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.plan import (
    BlockCopy,
    GroupedStepPlan,
    Preemption,
    PreemptionMode,
    SeqWork,
    StepPlan,
    seq_work_of,
)
from pagesim.simulator.core.request import (
    GENERATED_SEGMENT,
    Request,
    RequestStatus,
    SamplingKind,
    prompt_segments,
)
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.kv.prefix_hash import SequenceHasher
from pagesim.simulator.policies.base import Scheduler, WaitingQueue, victim_key
from pagesim.simulator.policies.decode_group import DecodeGroup


@dataclass(eq=False, slots=True)
class Group:
    """A request's sequences and progress on the paged KV cache."""

    request: Request
    seq_ids: list[int]
    target: int  # KV tokens to compute before the next token appears (prompt, or on recompute
    #              prompt + generated tokens)
    num_computed: int = 0  # KV tokens computed per sequence
    hashers: list[SequenceHasher] | None = None  # per sequence, only with prefix caching
    num_dropped: int = 0  # KV tokens (all sequences') dropped at the last recompute preemption

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed < self.target

    @property
    def num_seqs(self) -> int:
        return len(self.seq_ids)


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class PagedScheduler(Scheduler):
    """Shared state and mechanics; `schedule` is the policy and lives in the subclasses."""

    def __init__(
        self,
        system: SystemConfig,
        max_seq_len: int,
        num_blocks: int,
        num_cpu_blocks: int,
    ) -> None:
        super().__init__(system, max_seq_len)
        self.kv = PagedKVCache(
            num_blocks,
            system.block_size,
            num_cpu_blocks=num_cpu_blocks,
            enable_prefix_cache=system.enable_prefix_cache,
        )
        self.block_size = system.block_size
        self.watermark_blocks = int(system.watermark * num_blocks)
        self.waiting: WaitingQueue[Group] = WaitingQueue(system.admission, _request_of)
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        self._victim_key: Callable[[Request], tuple[float, ...]] = victim_key(system.victim)
        self._final_lens: dict[int, int] = {}  # seq id -> KV tokens it holds when finished
        self._next_seq_id = 0
        self._num_running_seqs = 0
        # Reset and filled by schedule() (`_begin_step`), consumed by complete():
        # (group, new tokens per seq, is_prefill).
        self._scheduled: list[tuple[Group, int, bool]] = []
        # The plan's work, built as groups are scheduled (no second pass), and its counts.
        self._work: list[SeqWork] = []
        self._num_prefill_tokens = 0
        self._num_prefill_seqs = 0
        self._num_decode_tokens = 0
        # Lone decoding sequences advanced together (None: every sequence handled every step).
        self._decode_group: DecodeGroup | None = None
        self._is_grouped_step = False  # this step's plan sums the decode group's members
        self._running_at_plan: tuple[Group, ...] = ()  # running groups as the step visited them

    # -- engine API -------------------------------------------------------------------------
    def add_request(self, request: Request, now_s: float) -> None:
        reason = self._too_long_reason(request) or self._capacity_reason(request)
        if reason is not None:
            request.reject(reason, now_s)
            return
        group = Group(request, [self._new_seq_id()], target=request.prompt_len)
        if self.system.enable_prefix_cache:
            hasher = SequenceHasher(self.block_size)
            for key, length in prompt_segments(request):
                hasher.extend(key, length)
            group.hashers = [hasher]
        self._final_lens[group.seq_ids[0]] = request.total_len - 1
        self.waiting.push(group)

    def complete(self, plan: StepPlan, now_s: float) -> None:
        finished: list[Group] = []
        commit_one = self.kv.commit_one
        for group, num_new, is_prefill in self._scheduled:
            request = group.request
            group.num_computed += num_new
            is_lone = num_new == 1 and len(group.seq_ids) == 1 and group.hashers is None
            if is_lone:
                commit_one(group.seq_ids[0])  # a lone decode (or a one-token chunk)
            else:
                self._commit(group)
            if is_prefill and group.num_computed < group.target:
                continue  # a chunk of the prompt: no token yet
            # One output token per sequence (Scheduler._produce_token, inlined: every group,
            # every step).
            request.num_generated += 1
            if request.first_token_s is None:
                request.first_token_s = now_s
            if request.num_generated >= request.output_len:
                request.last_token_s = now_s
                finished.append(group)
                continue
            if is_lone and not is_prefill:
                continue  # no hashes to extend, nothing to fork
            if group.hashers is not None:
                for seq_id, hasher in zip(group.seq_ids, group.hashers, strict=True):
                    hasher.extend((GENERATED_SEGMENT, seq_id), 1)
            if is_prefill and request.num_seqs > len(group.seq_ids):
                self._fork(group)
            elif len(group.seq_ids) > 1 and request.sampling is SamplingKind.BEAM:
                self._refork_beam(group)
        if self._decode_group is not None:
            self._advance_decode_group(finished, now_s)
        for group in finished:
            self._release(group)
            self._num_running_seqs -= group.num_seqs
            for seq_id in group.seq_ids:
                del self._final_lens[seq_id]
            self._finish(group.request, now_s)
        if finished:
            running = self.running
            for group in finished:  # a few of hundreds: each removal is one C-level scan
                running.remove(group)

    def _advance_decode_group(self, finished: list[Group], now_s: float) -> None:
        """The group's members each produced a token; lone decoders of this step join it."""
        group_ = self._decode_group
        assert group_ is not None
        for group in group_.advance():
            group.request.last_token_s = now_s  # its num_generated reached output_len
            finished.append(group)
        final_lens = self._final_lens
        for group, _, _ in self._scheduled:
            request = group.request
            if (
                len(group.seq_ids) == 1
                and group.num_computed >= group.target
                and request.num_generated < request.output_len
                and group.hashers is None
            ):
                group_.join(group, final_lens[group.seq_ids[0]])

    @property
    def has_pending(self) -> bool:
        return bool(self.running or self.swapped or len(self.waiting))

    def queue_lengths(self) -> tuple[int, int, int]:
        return len(self.running), len(self.waiting), len(self.swapped)

    def memory_breakdown(self) -> MemoryBreakdown:
        group_ = self._decode_group
        if group_ is None or not group_.bases:
            return self.kv.memory_breakdown(self._final_lens)
        # Members in closed form (DecodeGroup), the others' tails walked by the KV cache.
        running = self.running
        others = group_.others(running)
        return self.kv.memory_breakdown(
            self._final_lens,
            [s for i in others for s in running[i].seq_ids] if others else (),
            num_uncommitted=group_.num_deferred_computed,
            num_reserved_elsewhere=group_.num_reserved_slots,
        )

    def check_invariants(self) -> None:
        if self._decode_group is not None:
            self._decode_group.release_all()  # the KV cache's view is exact only without members
        self.kv.check_invariants()
        live = {s for g in self.running for s in g.seq_ids}
        assert all(self.kv.has_seq(s) and not self.kv.is_swapped(s) for s in live)
        assert all(self.kv.is_swapped(s) for g in self.swapped for s in g.seq_ids)
        assert self._num_running_seqs == sum(g.num_seqs for g in self.running)

    @property
    def kv_capacity_slots(self) -> int:
        return self.kv.num_blocks * self.block_size

    def prefix_hit_rate(self) -> float | None:
        if not self.system.enable_prefix_cache:
            return None
        queried = self.kv.num_prefix_query_tokens
        return self.kv.num_prefix_hit_tokens / queried if queried else 0.0

    # -- mechanics for the policies ---------------------------------------------------------
    def _capacity_reason(self, request: Request) -> str | None:
        """A request that could not finish even alone on the GPU is rejected up front."""
        prompt_blocks = blocks_for(request.prompt_len, self.block_size)
        needed = blocks_for(request.total_len - 1, self.block_size)
        # Forked sequences share only the prompt's full blocks: each holds its own copy of the
        # partly filled prompt block and its own output blocks (counting only blocks_for(output)
        # per extra sequence admitted requests that could never come back from swap).
        per_seq_own = needed - request.prompt_len // self.block_size
        needed += (request.num_seqs - 1) * per_seq_own
        if needed > self.kv.num_blocks or prompt_blocks > self.kv.num_blocks:
            return (
                f"needs {needed} KV blocks of {self.block_size} tokens at full length; "
                f"the cache holds {self.kv.num_blocks}"
            )
        return self._too_many_seqs_reason(request)

    def _new_seq_id(self) -> int:
        self._next_seq_id += 1
        return self._next_seq_id - 1

    def _reserve(self) -> int:
        """Blocks kept free when admitting: the watermark, unless the GPU is idle (no livelock)."""
        return self.watermark_blocks if self.running else 0

    def _admit(self, group: Group, max_new_tokens: int, now_s: float) -> int:
        """Try to start (or restart) a waiting group computing up to `max_new_tokens` prompt tokens.

        Returns the tokens scheduled, 0 if its blocks do not fit (nothing is changed then).
        """
        seq_id = group.seq_ids[0]
        hashes = group.hashers[0].block_hashes() if group.hashers is not None else ()
        num_hit = self.kv.add_seq(seq_id, hashes, num_prompt_tokens=group.target)
        num_new = min(group.target - num_hit, max_new_tokens)
        if num_new <= 0 or not self.kv.can_append(seq_id, num_new, self._reserve()):
            self.kv.free(seq_id)
            return 0
        copies = self.kv.append_slots(seq_id, num_new)
        assert not copies, "a fresh sequence owns its blocks"
        request = group.request
        group.num_computed = num_hit
        request.num_cached_tokens += num_hit
        request.num_recomputed_tokens += max(0, group.num_dropped - num_hit)
        group.num_dropped = 0
        request.transition(RequestStatus.RUNNING, now_s)
        self.running.append(group)
        self._num_running_seqs += group.num_seqs
        self._schedule(group, num_new, True)
        return num_new

    def _blocks_to_grow(self, group: Group, num_new: int) -> int:
        seq_ids = group.seq_ids
        if len(seq_ids) == 1:
            return self.kv.num_blocks_needed(seq_ids[0], num_new)
        return sum(self.kv.num_blocks_needed(s, num_new) for s in seq_ids)

    def _grow(self, group: Group, num_new: int, is_prefill: bool, copies: list[BlockCopy]) -> None:
        append_slots = self.kv.append_slots
        for seq_id in group.seq_ids:
            new_copies = append_slots(seq_id, num_new)
            if new_copies:
                copies.extend(new_copies)
        self._schedule(group, num_new, is_prefill)

    def _begin_step(self) -> None:
        self._is_grouped_step = False
        self._scheduled = []
        self._work = []
        self._num_prefill_tokens = self._num_prefill_seqs = self._num_decode_tokens = 0

    def _schedule(self, group: Group, num_new: int, is_prefill: bool) -> None:
        """`group` computes `num_new` tokens per sequence this step: complete() advances it, the
        plan lists its sequences (contexts as of now: nothing changes a scheduled group before
        the plan is built)."""
        self._scheduled.append((group, num_new, is_prefill))
        rid = group.request.request_id
        context = group.num_computed + num_new
        seq_ids = group.seq_ids
        for seq_id in seq_ids:
            self._work.append(seq_work_of((rid, seq_id, num_new, context, is_prefill)))
        if is_prefill:
            self._num_prefill_tokens += num_new * len(seq_ids)
            self._num_prefill_seqs += len(seq_ids)
        else:
            self._num_decode_tokens += num_new * len(seq_ids)

    def _preempt(self, group: Group, now_s: float) -> tuple[Preemption, int]:
        """Take `group` off the GPU by the configured mode; returns the preemption and blocks
        swapped out. Swap falls back to recompute when the CPU swap space is full."""
        request = group.request
        mode = self.system.preemption.mode_for(request.num_seqs)
        self._num_running_seqs -= group.num_seqs
        if mode is PreemptionMode.SWAP and self.kv.can_swap_out(group.seq_ids):
            num_blocks = self.kv.swap_out(group.seq_ids)
            request.transition(RequestStatus.SWAPPED, now_s)
            self.swapped.append(group)
            return Preemption(request.request_id, PreemptionMode.SWAP), num_blocks
        self._release(group)
        if group.num_seqs > 1:
            # Recompute restarts a multi-sequence request from its prompt: its samples'
            # diverged tokens are not reconstructed (documented simplification).
            group.num_dropped = group.num_computed * group.num_seqs
            for seq_id in group.seq_ids[1:]:
                del self._final_lens[seq_id]
            group.seq_ids = group.seq_ids[:1]
            if group.hashers is not None:
                group.hashers = group.hashers[:1]
            request.num_generated = 0
            group.target = request.prompt_len
        else:
            group.num_dropped = group.num_computed
            group.target = request.prompt_len + request.num_generated
        group.num_computed = 0
        request.transition(RequestStatus.PREEMPTED, now_s)
        self.waiting.push_front(group)
        return Preemption(request.request_id, PreemptionMode.RECOMPUTE), 0

    def _swap_in(self, group: Group, now_s: float) -> int:
        num_blocks = self.kv.swap_in(group.seq_ids)
        group.request.transition(RequestStatus.RUNNING, now_s)
        self.running.append(group)
        self._num_running_seqs += group.num_seqs
        return num_blocks

    def _release(self, group: Group) -> None:
        for seq_id in group.seq_ids:
            self.kv.free(seq_id)

    def _commit(self, group: Group) -> None:
        commit = self.kv.commit
        num_computed = group.num_computed
        if group.hashers is None:
            for seq_id in group.seq_ids:
                commit(seq_id, num_computed)
        else:
            for seq_id, hasher in zip(group.seq_ids, group.hashers, strict=True):
                commit(seq_id, num_computed, hasher.block_hashes())

    def _fork(self, group: Group) -> None:
        """Prompt done: fork the remaining sequences, sharing its blocks copy-on-write."""
        request = group.request
        parent = group.seq_ids[0]
        for _ in range(group.num_seqs, request.num_seqs):
            child = self._new_seq_id()
            self.kv.fork(parent, child)
            group.seq_ids.append(child)
            self._final_lens[child] = request.total_len - 1
            if group.hashers is not None:
                hasher = SequenceHasher(self.block_size)
                for key, length in prompt_segments(request):
                    hasher.extend(key, length)
                hasher.extend((GENERATED_SEGMENT, child), request.num_generated)
                group.hashers.append(hasher)
        self._num_running_seqs += request.num_seqs - 1

    def _refork_beam(self, group: Group) -> None:
        """Beam search: each step one beam gives way to a copy of the leading beam (a fixed
        rotation stands in for the scores), so beams share generated blocks copy-on-write and
        the next write into a shared partial block copies it, as in vLLM's beam search."""
        request = group.request
        index = 1 + request.num_generated % (group.num_seqs - 1)
        old = group.seq_ids[index]
        self.kv.free(old)
        del self._final_lens[old]
        new = self._new_seq_id()
        self.kv.fork(group.seq_ids[0], new)
        group.seq_ids[index] = new
        self._final_lens[new] = request.total_len - 1
        if group.hashers is not None:
            group.hashers[index] = group.hashers[0].fork()

    def _build_plan(
        self,
        preemptions: list[Preemption],
        swap_out: int,
        swap_in: int,
        copies: list[BlockCopy],
    ) -> StepPlan:
        work = self._work
        group_ = self._decode_group
        if self._is_grouped_step and group_ is not None:
            listed = tuple(work)
            num_members = len(group_.bases)
            step = group_.step
            seq_work = group_.seq_work
            num_listed_context = sum(item.context_len for item in listed) if listed else 0
            return GroupedStepPlan(
                listed,
                self._running_at_plan,
                group_.snapshot_bases(),  # members may leave before `work` is read
                lambda group, base: seq_work(group, base + step),
                num_listed_context + group_.num_context_tokens,
                preemptions=tuple(preemptions),
                num_swap_out_blocks=swap_out,
                num_swap_in_blocks=swap_in,
                copies=tuple(copies),
                num_prefill_tokens=self._num_prefill_tokens,
                num_decode_tokens=self._num_decode_tokens,
                num_prefill_seqs=self._num_prefill_seqs,
                num_decode_seqs=len(work) - self._num_prefill_seqs + num_members,
            )
        return StepPlan(
            tuple(work),
            tuple(preemptions),
            swap_out,
            swap_in,
            tuple(copies),
            self._num_prefill_tokens,
            self._num_decode_tokens,
            self._num_prefill_seqs,
            len(work) - self._num_prefill_seqs,
        )


def _request_of(group: Group) -> Request:
    return group.request
