"""The paged policies' shared state and mechanics: admit, grow, make room, preempt, swap, fork.

A request becomes a `SeqGroup` of sequences over the paged KV cache. Its prompt is computed by
sequence 0 (in one step or in chunks); the step that computes the prompt's last token also produces
the first output token, and multi-sequence requests (parallel sampling, beams) then fork the
prompt's blocks copy-on-write. Each decode step computes the KV of every sequence's latest token
and produces the next one, so after g output tokens a sequence holds prompt + g - 1 KV tokens.

Preemption by recompute drops the blocks and re-prefills prompt + generated tokens later (reusing
whatever prefix blocks survive in the cache); preemption by swap copies the blocks to CPU memory
over the host link and back. Which one, and whom, are policy (`SystemConfig`); how is mechanism.
The step policies (`vllm_v0`, `vllm_v1`) decide an iteration with these operations; none of
them holds state of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from pagesim.simulator.core.config import NEWEST_VLLM, Policy, SystemConfig
from pagesim.simulator.core.defaults import knobs_of
from pagesim.simulator.core.plan import BlockCopy, Preemption, PreemptionMode
from pagesim.simulator.core.request import FINISHED, PREEMPTED, RUNNING, SWAPPED, Request
from pagesim.simulator.core.vllm_eras import V1Rules, v1_rules
from pagesim.simulator.kv.block_pool import EvictionOrder
from pagesim.simulator.kv.hybrid_cache import HybridKVCache
from pagesim.simulator.kv.hybrid_layout import HybridLayout
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.group_hashes import (
    has_private_blocks,
    hash_private,
    prompt_hasher,
)
from pagesim.simulator.policies.grouping import DecodeGrouping
from pagesim.simulator.policies.pieces import PagedPieces, PrefixStats, VictimKey, waiting_queue
from pagesim.simulator.policies.seq_group import FanOut, SeqGroup, StepBuilder

if TYPE_CHECKING:
    from pagesim.simulator.policies.offload import Offload
    from pagesim.simulator.policies.spec_decoder import SpecDecoder

_new_group = partial(object.__new__, SeqGroup)  # (`new_group`'s: no __init__ call)
CHILD_ID_BASE = 1 << 48  # ids of V1's child requests (n > 1), above any workload's
# (An Enum's members read as globals: core/request.py says why.)
_SWAP, _RECOMPUTE = PreemptionMode.SWAP, PreemptionMode.RECOMPUTE


class PagedState:
    """The KV cache, the three queues, and the operations every paged step policy uses.

    `decode_group`, when set, holds lone decoding sequences advanced in closed form (the fast
    path, simulator/fastpath/, through policies/grouping.py); it is empty whenever a step policy
    visits the running requests one by one.
    """

    def __init__(
        self,
        system: SystemConfig,
        max_seq_len: int,
        num_blocks: int,
        num_cpu_blocks: int,
        pieces: PagedPieces,
        layout: HybridLayout | None = None,
    ) -> None:
        self.system = system
        self.knobs = knobs = knobs_of(system)
        self.max_seq_len = max_seq_len
        self.pieces = pieces
        # The release's V1 rules (core/vllm_eras.py); None for V0.
        self.rules: V1Rules | None = None
        if system.policy is Policy.VLLM_V1:
            self.rules = v1_rules(system.vllm_version or NEWEST_VLLM)
        reuse_unhashed_first = self.rules is not None and self.rules.frees_unhashed_first
        self.kv: PagedKVCache | HybridKVCache
        if layout is None:
            self.kv = PagedKVCache(
                num_blocks,
                system.block_size,
                num_cpu_blocks=num_cpu_blocks,
                enable_prefix_cache=knobs.enable_prefix_cache,
                eviction=pieces.eviction,
                allow_duplicate_hashes=pieces.duplicate_hashes,
                reuse_unhashed_first=reuse_unhashed_first,
            )
        else:  # layer groups of a hybrid model (vLLM V1's hybrid KV-cache manager)
            self.kv = HybridKVCache(
                num_blocks,
                layout,
                enable_prefix_cache=knobs.enable_prefix_cache,
                eviction=pieces.eviction,
                allow_duplicate_hashes=pieces.duplicate_hashes,
                reuse_unhashed_first=reuse_unhashed_first,
            )
        self._caches_at_allocation = pieces.caches_at_allocation and knobs.enable_prefix_cache
        # V1's paged cache hashes a private request's blocks only if it is preempted
        # (policies/group_hashes.py); a hybrid model's layer groups always hash.
        self._defers_private = (
            self._caches_at_allocation and layout is None and pieces.eviction is EvictionOrder.LRU
        )
        self.block_size = self.kv.block_size
        self.watermark_blocks = int(knobs.watermark * num_blocks)
        self.waiting = waiting_queue(system, _request_of)
        self.running: list[SeqGroup] = []
        self.swapped: deque[SeqGroup] = deque()
        self.groups: dict[int, SeqGroup] = {}  # request id -> its group, until it finishes
        self.victim_key: VictimKey = pieces.victim_key
        self.prefix_stats = PrefixStats()
        self.num_running_seqs = 0
        self.decode_group: DecodeGrouping | None = None  # the fast path's (policies/grouping.py)
        self.spec: SpecDecoder | None = None  # speculative decoding (V1; policies/speculative)
        # Disaggregation (policies/remote_kv.py): finished requests' blocks kept until sent
        # (request id -> holder seq); prompts whose KV is on the way, or arrived.
        self.keeps_finished_blocks = False
        self.held: dict[int, int] = {}
        self.receiving: dict[int, SeqGroup] = {}
        self.landed: dict[int, SeqGroup] = {}  # received, waiting for admission
        # A KV offload tier in CPU memory (policies/offload.py): its loads park requests in
        # `receiving` and land them in `landed`, as a remote prompt's KV does.
        self.offload: Offload | None = None
        self._next_seq_id = 0
        self._next_child_id = 0

    # -- requests -------------------------------------------------------------------------------
    def new_group(self, request: Request, fan_out: FanOut | None = None) -> SeqGroup:
        # (Every arrival: `new_seq_id` inlined, and the group made with no class call, whose
        # dispatch to the dataclass's Python __init__ costs more than its stores: each field
        # set here, as `SeqGroup(request, [seq_id], request.prompt_len, fan_out=fan_out)` sets
        # it; tests/simulator/policies/test_arrival_checks.py holds the two alike.)
        seq_id = self._next_seq_id
        self._next_seq_id = seq_id + 1
        group = _new_group()
        group.request = request
        group.seq_ids = [seq_id]
        group.target = request.prompt_len
        group.num_computed = 0
        group.hashers = None
        group.num_dropped = 0
        group.fan_out = fan_out
        group.is_remote = False
        if self.knobs.enable_prefix_cache and not self._is_private(request):
            group.hashers = [prompt_hasher(request, self.block_size)]
        self.groups[request.request_id] = group
        return group

    def _is_private(self, request: Request) -> bool:
        """Whether `request` is hashed only if preempted (policies/group_hashes.py): under V1's
        paged cache, not with speculative decoding nor on a prefill replica, which keep their
        own ways of extending and holding blocks."""
        return (
            self._defers_private
            and has_private_blocks(request, self.block_size)
            and self.spec is None
            and not self.keeps_finished_blocks
        )

    def new_seq_id(self) -> int:
        self._next_seq_id += 1
        return self._next_seq_id - 1

    def new_child_id(self) -> int:
        """A request id for one of V1's child requests (n > 1): policies/samples.py."""
        self._next_child_id += 1
        return CHILD_ID_BASE + self._next_child_id

    # -- admission and growth -----------------------------------------------------------------
    def reserve(self) -> int:
        """Blocks kept free when admitting: the watermark, unless the GPU is idle (no livelock)."""
        return self.watermark_blocks if self.running else 0

    def add_to_step(
        self,
        step: StepBuilder,
        group: SeqGroup,
        num_new: int,
        is_prefill: bool,
        copies: tuple[BlockCopy, ...],
    ) -> None:
        """`group` computes `num_new` tokens per sequence this step, its slots allocated (with
        these copy-on-write copies). Under V1 its blocks this step fills are cached now."""
        if self._caches_at_allocation:
            hashers = group.hashers
            if hashers is not None:
                num_tokens = group.num_computed + num_new
                for seq_id, hasher in zip(group.seq_ids, hashers, strict=True):
                    self.kv.cache_blocks(seq_id, num_tokens, hasher.block_hashes())
            else:  # private: hashed only if preempted (policies/group_hashes.py)
                assert self._defers_private, "a V1 group with no hashers"
        step.add(group, num_new, is_prefill, copies)

    def preempt_for(
        self, group: SeqGroup, remaining: deque[SeqGroup], step: StepBuilder, now_s: float
    ) -> bool:
        """Preempt the victim policy's choice among the not-yet-scheduled `remaining` (or
        `group` itself when none is left) to make room for `group`; False if `group` went."""
        if remaining:
            victim = max(remaining, key=lambda g: self.victim_key(g.request))
            remaining.remove(victim)
        else:
            victim = group
        self.preempt(victim, step, now_s)
        return victim is not group

    # -- preemption and swap ------------------------------------------------------------------
    def preempt(
        self, group: SeqGroup, step: StepBuilder, now_s: float, *, recompute: bool = False
    ) -> None:
        """Take `group` off the GPU by the configured mode (by recompute if `recompute`). Swap
        falls back to recompute when the CPU swap space is full."""
        request = group.request
        if group.hashers is None and self._defers_private:
            hash_private(self.kv, group)
        mode = self.knobs.preemption.mode_for(request.num_seqs)
        if recompute:
            mode = _RECOMPUTE
        self.num_running_seqs -= group.num_seqs
        if mode is _SWAP and self.kv.can_swap_out(group.seq_ids):
            step.swap_out += self.kv.swap_out(group.seq_ids)
            request.transition(SWAPPED, now_s)
            self.swapped.append(group)
            step.preemptions.append(Preemption(request.request_id, _SWAP))
            return
        self.release(group)
        if group.num_seqs > 1:
            # Recompute restarts a multi-sequence request from its prompt: its samples'
            # diverged tokens are not reconstructed (documented simplification).
            group.num_dropped = group.num_computed * group.num_seqs
            group.seq_ids = group.seq_ids[:1]
            if group.hashers is not None:
                group.hashers = group.hashers[:1]
            request.num_generated = 0
            group.target = request.prompt_len
        else:
            group.num_dropped = group.num_computed
            group.target = request.prompt_len + request.num_generated
        group.num_computed = 0
        request.transition(PREEMPTED, now_s)
        self.waiting.push_front(group)
        step.preemptions.append(Preemption(request.request_id, _RECOMPUTE))

    def swap_back_one(self, step: StepBuilder, now_s: float) -> bool:
        """Bring the oldest swapped-out group back and schedule one token per sequence (a decode,
        or the next prompt token of a group swapped out mid-prefill, which must not produce an
        output token yet); False if it cannot come back now."""
        group = self.swapped[0]
        if self.num_running_seqs + group.num_seqs > self.knobs.max_num_seqs:
            return False
        # Swapping in must leave room for this step's token of every sequence, and keeps at
        # least one block spare, as it always did for a lone sequence. (One block per sequence,
        # asked before, is more than a group sharing a partly filled block may ever find free:
        # it stayed swapped out and the scheduler stalled.)
        needed = max(1, self.num_blocks_to_resume(group))
        if not self.kv.can_swap_in(group.seq_ids, self.reserve() + needed):
            return False
        self.swapped.popleft()
        step.swap_in += self.kv.swap_in(group.seq_ids)
        group.request.transition(RUNNING, now_s)
        self.running.append(group)
        self.num_running_seqs += group.num_seqs
        made: list[BlockCopy] = []
        for seq_id in group.seq_ids:  # one by one: the last holder of a shared block writes in it
            copies = self.kv.allocate_slots((seq_id,), 1)
            assert copies is not None, "swap-in kept room for this step's tokens"
            made.extend(copies)
        self.add_to_step(step, group, 1, group.is_prefilling, tuple(made))
        return True

    def num_blocks_to_resume(self, group: SeqGroup) -> int:
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

    # -- completion ---------------------------------------------------------------------------
    def release(self, group: SeqGroup) -> None:
        # A private group's full blocks are hashed in vLLM, not here (group_hashes.py): the free
        # order places them as hashed blocks all the same.
        private = group.hashers is None and self._defers_private
        for seq_id in group.seq_ids:
            self.kv.free(seq_id, hashes_full_blocks=private)

    def commit(self, group: SeqGroup) -> None:
        commit = self.kv.commit
        num_computed = group.num_computed
        if group.hashers is None:
            for seq_id in group.seq_ids:
                commit(seq_id, num_computed)
        else:
            for seq_id, hasher in zip(group.seq_ids, group.hashers, strict=True):
                commit(seq_id, num_computed, hasher.block_hashes())

    def finish(self, finished: Sequence[SeqGroup], now_s: float) -> None:
        """Finished groups free their blocks (in this order) and leave the running list."""
        for group in finished:
            if self.keeps_finished_blocks:
                self.hold(group)
            self.release(group)
            self.num_running_seqs -= len(group.seq_ids)
            del self.groups[group.request.request_id]
            group.request.transition(FINISHED, now_s)
            if group.fan_out is not None:
                group.fan_out.child_finished(now_s)
        running = self.running
        for group in finished:  # a few of hundreds: each removal is one C-level scan
            running.remove(group)

    def hold(self, group: SeqGroup) -> None:
        """Keep a finishing group's blocks under a holder sequence until released: vLLM
        V1 frees a prefill request's blocks only once its KV was sent (the connector's
        request_finished returns delay_free_blocks; v1/core/sched/scheduler.py _free_request):
        every block the request holds, those of speculative decoding's lookahead slots too (a
        prompt chunk after the first is a running request's, allocated with lookahead). Its
        final length is what it computed: lookahead slots are never written (internal
        fragmentation in the memory breakdown, not a reservation)."""
        seq_id = group.seq_ids[0]
        holder = self.new_seq_id()
        self.kv.fork(seq_id, holder, final_len=group.num_computed, parent_done=True)
        self.held[group.request.request_id] = holder

    # -- checks -------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        self.kv.check_invariants()
        live = {s for g in self.running for s in g.seq_ids}
        assert all(self.kv.has_seq(s) and not self.kv.is_swapped(s) for s in live)
        assert all(self.kv.is_swapped(s) for g in self.swapped for s in g.seq_ids)
        assert self.num_running_seqs == sum(g.num_seqs for g in self.running)
        queued = len(self.running) + len(self.swapped) + len(self.waiting) + len(self.receiving)
        assert queued == len(self.groups), "a live group is in no queue, or in two"
        receiving = [g.seq_ids[0] for g in self.receiving.values()]
        assert all(self.kv.has_seq(s) for s in [*self.held.values(), *receiving])
        assert all(g.is_remote and self.kv.has_seq(g.seq_ids[0]) for g in self.landed.values())


def _request_of(group: SeqGroup) -> Request:
    return group.request
