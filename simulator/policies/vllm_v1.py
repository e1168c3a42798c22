"""vLLM's V1 scheduler (`vllm/v1/core/sched/scheduler.py`, of the release in `vllm_version`:
core/vllm_eras.py), as pagesim models it:

One token budget per step. Running requests first (decode = 1 token per sequence, an unfinished
prompt = its next chunk), preempting when blocks run out (policies/v1_running.py); then, unless
this step preempted, swapped-out requests come back and, once none is left swapped out, waiting
requests are admitted, each chunked into what is left of the budget (Sarathi-Serve's stall-free
batching; from v0.19.0 only if blocks for its whole prompt fit: policies/v1_admission.py).
vLLM's V1 only recomputes; swap under V1 is pagesim's extension, with V0's rule for swapped
requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from operator import attrgetter

from pagesim.simulator.core.config import AdmissionOrder, SystemConfig, VictimPolicy
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.admission import (
    RefusedHits,
    admit,
    fits_after_hits,
    refused_with_hits,
)
from pagesim.simulator.policies.grouping import Preempter
from pagesim.simulator.policies.offload import LoadOutcome
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.pieces import PagedPieces, paged_pieces
from pagesim.simulator.policies.remote_kv import admit_landed
from pagesim.simulator.policies.seq_group import Demand, SeqGroup, StepBuilder
from pagesim.simulator.policies.speculative import schedule_running_speculative
from pagesim.simulator.policies.v1_running import schedule_running_v1


class VllmV1:
    """The V1 step: one token budget shared by decodes and prompt chunks."""

    fans_out = True  # n > 1: child requests (v1/engine/parallel_sampling.py)
    groups_decodes = True  # lone decoders may advance as a decode group (the fast path)
    # Made once for the state the policy serves (`_made_for`): the running phase's demand and
    # preempter.
    _preempter_state: PagedState | None = None
    _preempter: Preempter | None = None
    _demand: Demand

    def pieces(self, system: SystemConfig) -> PagedPieces:
        return paged_pieces(system, is_v1=True)

    def schedule(self, state: PagedState, step: StepBuilder, now_s: float) -> None:
        knobs = state.knobs
        budget = knobs.max_num_batched_tokens
        chunk_cap = state.system.max_prefill_chunk or budget

        if self._preempter_state is not state:
            self._made_for(state)
        demand = self._demand

        decode_group = state.decode_group
        left = None
        if decode_group is not None:
            preempter = self._preempter
            left = decode_group.schedule_running(
                state.running, step, budget, demand, state.add_to_step, preempter, now_s
            )
        if state.spec is not None:  # drafts and lookahead slots (policies/speculative.py)
            left = schedule_running_speculative(state, state.spec, step, budget, chunk_cap, now_s)
        elif left is None:
            left = schedule_running_v1(state, step, budget, demand, _plain_slots, now_s)
        if step.preemptions:
            return  # V1 admits nothing in a step that preempted
        if state.swapped:
            left = resume_swapped(state, step, left, now_s)
        # As in V0, swapped-out requests go first: admitting new ones past them would starve
        # them and fill the CPU swap space.
        if not state.swapped and len(state.waiting):
            admit_chunks(state, step, left, chunk_cap, now_s)

    def _made_for(self, state: PagedState) -> None:
        """`_preempter(state)` and the running demand (one call a group, not two), made once per
        state (the policy serves one scheduler's; its system and knobs do not change)."""
        chunk_cap = state.system.max_prefill_chunk or state.knobs.max_num_batched_tokens
        self._demand = partial(running_demand, chunk_cap=chunk_cap)
        self._preempter = _preempter(state)
        self._preempter_state = state

    def pure_step_lookups(self, state: PagedState) -> int | RefusedHits | None:
        """With every running request decoding alone and nothing swapped out: None unless the
        next step decodes them and admits nothing, and so does each after it while nobody
        finishes and blocks are only taken (the decode fast path's runs:
        fastpath/decode_window.py); else the prompt tokens each such step's refused admission
        counts as looked up in the prefix cache (`PagedKVCache.note_prefix_query`). The budget
        must reach every member, and the waiting head must not be admitted: V1 admits it
        unless the batch is full, the budget spent (`admit_chunks`: no lookup, 0), or its
        blocks do not fit (`admit`: its lookup); a full batch stays full while nobody
        finishes, and blocks that do not fit do not while the free blocks only fall. A head with
        no block hashes is refused touching nothing but that count (no prefix hit can change the
        free blocks: admission.fits_after_hits of no hit); one with hashes (a preempted
        request) also hits its own free blocks, and is answered with those only where that
        stays so while blocks are taken (`RefusedHits`: admission.refused_with_hits). Never a
        remote prompt."""
        knobs = state.knobs
        budget_left = knobs.max_num_batched_tokens - len(state.running)
        if budget_left < 0:
            return None  # the budget reaches only some members: each step decides who
        if not len(state.waiting) or not budget_left:
            return 0
        head = state.waiting[0]
        if state.num_running_seqs + head.request.num_seqs > knobs.max_num_seqs:
            return 0
        kv = state.kv
        if head.is_remote or not isinstance(kv, PagedKVCache):
            return None
        if state.spec is not None or state.offload is not None:
            return None  # padded admissions, CPU-tier loads: not counted here
        chunk_cap = state.system.max_prefill_chunk or knobs.max_num_batched_tokens
        max_new_tokens = min(budget_left, chunk_cap)
        if head.hashers is not None and head.hashers[0].block_hashes():
            return refused_with_hits(state, kv, head, max_new_tokens)
        if fits_after_hits(state, head, 0, max_new_tokens, 0):
            return None
        return head.target


def _preempter(state: PagedState) -> Preempter | None:
    """How the running phase preempts (policies/v1_running.py, FCFS) for a decode group that
    keeps its members summed: only where the victim's key reads no member's progress, which the
    group holds in closed form (the last-arrived victim: arrival time, then id)."""
    system = state.system
    if system.admission is not AdmissionOrder.FCFS:
        return None
    if system.victim is not VictimPolicy.LAST_ARRIVED:
        return None

    def victim_of(candidates: Iterable[SeqGroup]) -> SeqGroup:
        # As PagedState.preempt_for, whose key here is the last-arrived one under FCFS
        # (pieces.victim_key: arrival time, then id), read on the group in C.
        return max(candidates, key=_ARRIVAL_THEN_ID)

    return Preempter(victim_of, state.preempt)


_ARRIVAL_THEN_ID = attrgetter("request.arrival_s", "request.request_id")


def _plain_slots(group: SeqGroup, num_new: int) -> int:
    return num_new


def running_demand(group: SeqGroup, budget: int, chunk_cap: int) -> tuple[int, int, bool] | None:
    """What a running group asks of a step with `budget` tokens left: (tokens per sequence,
    tokens of the budget, is_prefill), or None when its decode does not fit this step (it keeps
    its blocks and waits)."""
    if group.num_computed < group.target:
        num_new = min(group.target - group.num_computed, budget, chunk_cap)
        return num_new, num_new, True
    tokens = len(group.seq_ids)
    if tokens > budget:
        return None
    return 1, tokens, False


def resume_swapped(state: PagedState, step: StepBuilder, budget: int, now_s: float) -> int:
    while state.swapped:
        num_seqs = state.swapped[0].num_seqs
        if num_seqs > budget or not state.swap_back_one(step, now_s):
            break
        budget -= num_seqs
    return budget


def admit_chunks(
    state: PagedState, step: StepBuilder, budget: int, chunk_cap: int, now_s: float
) -> None:
    """Waiting requests in order, each its first chunk, until the budget or the blocks run out."""
    waiting = state.waiting
    max_num_seqs = state.knobs.max_num_seqs
    pad_to = 0 if state.spec is None else padded_admission_tokens(state, step, chunk_cap)
    beside_running = bool(step.num_requests) or step.is_grouped  # before any admission
    while len(waiting) and budget > 0:
        group = waiting[0]
        if state.num_running_seqs + group.request.num_seqs > max_num_seqs:
            break
        offload = state.offload  # a CPU tier's hit loads first, the request parked meanwhile
        if offload is not None and group.hashers is not None and not group.is_remote:
            outcome = offload.try_load(state, group, now_s)
            if outcome is LoadOutcome.NO_ROOM:
                break
            if outcome is LoadOutcome.PARKED:
                waiting.pop()
                continue
        pad = pad_to if group.target > 1 or beside_running else 0
        scheduled = admit(state, group, min(budget, chunk_cap), step, now_s, pad_to=pad)
        if not scheduled:
            break
        waiting.pop()
        budget -= scheduled
    if state.landed:  # a disaggregated decode replica's prompts whose KV arrived (remote_kv.py)
        admit_landed(state, step, budget, now_s, pad_to)  # a head that did not fit blocks none


def padded_admission_tokens(state: PagedState, step: StepBuilder, chunk_cap: int) -> int:
    """1 + k when this step pads a one-token admission to a speculative decode's size
    (policies/admission.py; v1/core/sched/scheduler.py Scheduler.schedule, from v0.25.0): the
    release pads, and no running request computes a prompt chunk in this step (a request
    admitted earlier in the waiting loop does not count; the caller asks, per request, that a
    running request was scheduled or the request has computed tokens). 0 otherwise, and where
    the chunk cap is below 1 + k (vLLM would cut the padded tokens to its long-prefill
    threshold)."""
    spec, rules = state.spec, state.rules
    if spec is None or rules is None or not rules.pads_one_token_admission:
        return 0
    if any(item.is_prefill for item in step.work) or 1 + spec.k > chunk_cap:
        return 0
    return 1 + spec.k
