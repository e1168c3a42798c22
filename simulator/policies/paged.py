"""The paged policies' engine-facing scheduler: one `PagedScheduler`, composed of the shared
state and mechanics (`PagedState`) and a step policy that decides each iteration (vLLM V0's or
V1's, `vllm_v0.py` / `vllm_v1.py`).

`complete(plan)` acts on what the plan lists: each listed group computed its entries' tokens (and,
on the decode fast path, each member of the decode group one token: policies/grouping.py says
what the scheduler asks of it). Whether a token appears follows the one rule of
`Request.produce_token`.
"""

from __future__ import annotations

from typing import Protocol

from pagesim.simulator.core.config import SystemConfig
from pagesim.simulator.core.memory import MemoryBreakdown, MemoryRow
from pagesim.simulator.core.plan import Preemption, StepPlan
from pagesim.simulator.core.request import GENERATED_SEGMENT, Request, SamplingKind
from pagesim.simulator.kv.hybrid_layout import HybridLayout
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.admission import RefusedHits
from pagesim.simulator.policies.base import PolicyBase
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.pieces import PagedPieces
from pagesim.simulator.policies.samples import fan_out, fork, refork_beam
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder, blocks_for
from pagesim.simulator.policies.spec_decoder import SpecDecoder
from pagesim.simulator.policies.speculative import complete_speculative


class StepPolicy(Protocol):
    """How a paged policy decides one iteration over the shared state."""

    groups_decodes: bool  # whether its running phase can take the decode fast path
    fans_out: bool  # n > 1 runs as n child requests (V1), not as forked sequences (V0)

    def pieces(self, system: SystemConfig) -> PagedPieces:
        """Its era's victim key, eviction order and prefix-cache behaviour."""
        ...

    def schedule(self, state: PagedState, step: StepBuilder, now_s: float) -> None: ...

    def pure_step_lookups(self, state: PagedState) -> int | RefusedHits | None:
        """With every running request a decode-group member and nothing swapped out or
        landing: None unless the next step only decodes them, and so does each after it while
        nobody finishes and blocks are only taken (fastpath/decode_window.py's runs); else the
        prompt tokens each such step's refused admission counts as looked up in the prefix
        cache (0 if none is tried), or that refusal with its prefix hits (`RefusedHits`)."""
        ...


class PagedScheduler(PolicyBase):
    """vLLM-style paged scheduling: `policy` decides, `state` remembers and acts."""

    def __init__(
        self,
        system: SystemConfig,
        max_seq_len: int,
        num_blocks: int,
        num_cpu_blocks: int,
        policy: StepPolicy,
        layout: HybridLayout | None = None,
        seed: int = 0,
        replica: int = 0,
    ) -> None:
        super().__init__(system, max_seq_len)
        self.state = PagedState(
            system, max_seq_len, num_blocks, num_cpu_blocks, policy.pieces(system), layout
        )
        if system.speculative is not None:  # the scenario allows it under vllm-v1 only
            self.state.spec = SpecDecoder(system.speculative, max_seq_len, seed, replica)
        self.kv = self.state.kv  # read by the fidelity executor and tests
        # Preemptions made by steps that ran nothing (`_schedule_again`), for the step table's
        # row of the next step that runs (which must then be a planned one, never a pure decode
        # step of the fast path: simulator/fastpath/decode_window.py reads it).
        self.unrecorded_preemptions: list[Preemption] = []
        self.policy = policy
        # A request of one sequence shorter than these (its prompt, its prompt and output
        # tokens) fits alone with a block to spare, under no drafter: `rejection_reason` has
        # no reason for it (its blocks, V0's spare block per sequence, its prompt's length),
        # so `add_request` asks only at the edge. (-1: always asks.)
        self._fits_prompt_len = self._fits_total_len = -1
        if (
            isinstance(self.kv, PagedKVCache)
            and self.state.spec is None
            and self.knobs.max_num_seqs >= 1
        ):
            spare_tokens = (self.kv.num_blocks - 1) * self.state.block_size
            self._fits_prompt_len = min(max_seq_len, spare_tokens + 1)
            self._fits_total_len = spare_tokens + 1

    # -- engine API -------------------------------------------------------------------------
    def add_request(self, request: Request, now_s: float) -> None:
        prompt_len = request.prompt_len
        state = self.state
        if not (
            request.num_seqs == 1
            and prompt_len < self._fits_prompt_len
            and prompt_len + request.output_len < self._fits_total_len
        ):
            reason = self.too_long_reason(request) or self._capacity_reason(request)
            if reason is not None:
                request.reject(reason, now_s)
                return
            if request.num_seqs > 1 and self.policy.fans_out:
                for child in fan_out(state, request):
                    state.waiting.push(child)
                return
        state.waiting.push(state.new_group(request))

    def schedule(self, now_s: float) -> StepPlan:
        step = StepBuilder()
        state = self.state
        if state.offload is not None:  # loads from a CPU tier that ended by now
            state.offload.land(state, now_s)
        self.policy.schedule(state, step, now_s)
        if step.preemptions and step.is_idle:
            step = self._schedule_again(step, now_s)
            if step.is_idle:  # a step that runs nothing has no row: the next that runs counts them
                self.unrecorded_preemptions += step.preemptions
                step.preemptions = []
        if self.unrecorded_preemptions and not step.is_idle:
            step.preemptions[:0] = self.unrecorded_preemptions
            self.unrecorded_preemptions = []
        if step.is_grouped:  # the fast path's members took part (policies/grouping.py)
            assert state.decode_group is not None
            return state.decode_group.plan(step, state.running)
        return step.plan()

    def _schedule_again(self, step: StepBuilder, now_s: float) -> StepBuilder:
        """`step` only preempted (by recompute: a swap moves blocks, which is work), so it runs
        nothing and the engine schedules again at once, no time passing. vLLM runs no forward
        pass for a step with no token scheduled (V1, v0.11: v1/worker/gpu_model_runner.py
        `execute_model` returns EMPTY_MODEL_RUNNER_OUTPUT, or `kv_connector_no_forward` with
        a KV connector; V0, v0.5.4: engine/llm_engine.py `step` executes only a non-empty
        `SchedulerOutputs`) and its engine loop steps again while requests are unfinished (V1
        v1/engine/core.py `step`; V0 engine/async_llm_engine.py `run_engine_loop`); the ~1 ms of
        host work of that empty step is not charged. Only a replica whose blocks are also held
        by requests not running (a disaggregated decode replica's landed prompts, a prefill
        replica's finished prompts awaiting transfer) can preempt its last running request;
        without this it idled with blocks free for the next request until something woke it.
        One more pass settles it: a step that ran nothing preempted every running request (one
        it did not preempt would have run), so the next has nobody running to preempt."""
        earlier = step.preemptions
        step = StepBuilder()
        self.policy.schedule(self.state, step, now_s)
        step.preemptions[:0] = earlier
        return step

    def complete(self, plan: StepPlan, now_s: float) -> None:
        offload = self.state.offload
        if offload is None:
            self._complete(plan, now_s)
            return
        offload.note_step(self.state, plan)  # a CPU tier stores what the step filled
        self._complete(plan, now_s)
        offload.store_step(self.state, now_s)

    def next_wakeup_s(self, now_s: float) -> float | None:
        """When the next load from a CPU tier ends (policies/offload.py), if one is on its way."""
        offload = self.state.offload
        return None if offload is None else offload.next_landing_s()

    def _complete(self, plan: StepPlan, now_s: float) -> None:
        state = self.state
        if state.spec is not None:
            self.num_output_tokens += complete_speculative(state, state.spec, plan, now_s)
            return
        groups = state.groups
        kv = state.kv
        commit_one = kv.commit_one
        decode_group = state.decode_group
        finished: list[SeqGroup] = []
        joining: list[SeqGroup] = []  # lone decoders that join the decode group after the step
        last_rid = None
        for rid, _, num_new, _, is_prefill in plan.listed_work:
            if rid == last_rid:
                continue  # a multi-sequence group's further entries: handled with the first
            last_rid = rid
            group = groups[rid]
            request = group.request
            seq_ids, hashers = group.seq_ids, group.hashers
            num_seqs = len(seq_ids)
            group.num_computed += num_new
            is_lone = num_new == 1 and num_seqs == 1 and hashers is None
            if is_lone:
                commit_one(seq_ids[0])  # a lone decode (or a one-token chunk)
            elif hashers is None and num_seqs == 1:
                kv.commit(seq_ids[0], group.num_computed)  # (`state.commit`'s, a chunk)
            else:
                state.commit(group)
            if is_prefill and group.num_computed < group.target:
                continue  # a chunk of the prompt: no token yet
            # One token per sequence: a prompt's first token for all its samples (V0 forks
            # right after), later ones for each sequence the group decodes.
            self.num_output_tokens += request.num_seqs if is_prefill and num_seqs == 1 else num_seqs
            if request.produce_token(now_s):
                finished.append(group)
                continue
            if not is_lone or is_prefill:  # a lone decode has no hashes to extend, nothing to fork
                if hashers is not None:
                    for seq_id, hasher in zip(seq_ids, hashers, strict=True):
                        hasher.extend((GENERATED_SEGMENT, seq_id), 1)
                if is_prefill and request.num_seqs > num_seqs:
                    fork(state, group)
                elif num_seqs > 1 and request.sampling is SamplingKind.BEAM:
                    refork_beam(state, group)
            if decode_group is not None and len(group.seq_ids) == 1:
                joining.append(group)
        if decode_group is not None:  # the fast path's members (policies/grouping.py)
            num_tokens, done = decode_group.complete(plan, now_s, joining)
            self.num_output_tokens += num_tokens
            finished += done
        if finished:
            state.finish(finished, now_s)

    @property
    def has_pending(self) -> bool:
        state = self.state
        loading = state.offload is not None and bool(state.offload.loading)
        return bool(state.running or state.swapped or len(state.waiting) or loading)

    def queue_lengths(self) -> tuple[int, int, int]:
        state = self.state
        return len(state.running), len(state.waiting), len(state.swapped)

    def memory_breakdown(self) -> MemoryBreakdown:
        kv = self.kv
        if isinstance(kv, PagedKVCache):
            return MemoryBreakdown(*self.memory_row())
        return kv.memory_breakdown()  # a hybrid cache: no decode group (fastpath/attach.py)

    def memory_row(self) -> MemoryRow:
        """`memory_breakdown()`'s fields in order, which the step log reads every planned step,
        without building the breakdown."""
        state, kv = self.state, self.kv
        if not isinstance(kv, PagedKVCache):
            return kv.memory_breakdown().row
        decode_group = state.decode_group
        running = state.running
        terms = None if decode_group is None else decode_group.memory_terms(running)
        if terms is None:  # every sequence walked by the KV cache
            return kv.memory_row(0, kv.num_reserved_slots())
        # Members in closed form (the fast path's), the others' tails walked by the KV cache.
        others, num_uncommitted, reserved = terms
        walked = [s for i in others for s in running[i].seq_ids] if others else []
        if state.receiving or state.landed:
            # Prompts' KV on the way or arrived, not yet admitted (policies/remote_kv.py).
            walked += [g.seq_ids[0] for g in state.receiving.values()]
            walked += [g.seq_ids[0] for g in state.landed.values()]
        if walked:
            reserved += kv.num_reserved_slots(walked)
        return kv.memory_row(num_uncommitted, reserved)

    def check_invariants(self) -> None:
        """The state's and the KV cache's invariants, and the memory breakdown against a walk of
        every block; with decode-group members, also the group's own sums, its closed-form
        breakdown checked by that walk with the members' true progress. Changes nothing."""
        state = self.state
        state.check_invariants()
        decode_group = state.decode_group
        true_computed = {} if decode_group is None else decode_group.check_invariants()
        walked = self.kv.walk_memory_breakdown(true_computed)
        assert self.memory_breakdown() == walked, (self.memory_breakdown(), walked)

    @property
    def kv_capacity_slots(self) -> int:
        return self.kv.num_blocks * self.state.block_size

    def hybrid_summary(self) -> dict[str, int] | None:
        """A hybrid model's KV figures for the summary (None for one of only full attention,
        whose summary stays as it was): its layer groups, the blocks freed out of the windows
        over the run (each one an all-full-attention layout would have kept), and the bytes of
        state each request holds (its state groups' blocks, padded pages included)."""
        kv = self.kv
        if isinstance(kv, PagedKVCache):
            return None
        layout = kv.layout
        return {
            "kv_layer_groups": layout.num_groups,
            "kv_layers_per_group": layout.layers_per_group,
            "kv_padding_layers": layout.num_padding_layers,
            "kv_window_freed_blocks": kv.num_window_freed_blocks,
            "kv_window_freed_bytes": kv.num_window_freed_blocks * layout.block_bytes,
            "kv_state_bytes_per_seq": layout.num_state_groups * layout.block_bytes,
        }

    def prefix_hit_rate(self) -> float | None:
        """Prompt tokens served from the prefix cache over those looked up, once per successful
        first admission (re-admissions after preemption: `prefix_readmit_hit_rate`)."""
        if not self.knobs.enable_prefix_cache:
            return None
        return self.state.prefix_stats.hit_rate

    def prefix_readmit_hit_rate(self) -> float | None:
        """The same over preempted requests' re-admissions; None when there were none."""
        if not self.knobs.enable_prefix_cache:
            return None
        return self.state.prefix_stats.readmit_hit_rate

    # -- admission checks -------------------------------------------------------------------
    def rejection_reason(self, request: Request) -> str | None:
        """Why `request` could never run here (add_request rejects it for this), or None."""
        return self.too_long_reason(request) or self._capacity_reason(request)

    def _capacity_reason(self, request: Request) -> str | None:
        """A request that could not finish even alone on the GPU is rejected up front."""
        block_size = self.state.block_size
        num_blocks = self.kv.num_blocks
        if not isinstance(self.kv, PagedKVCache):
            return self._hybrid_capacity_reason(request)
        prompt_blocks = blocks_for(request.prompt_len, block_size)
        num_seqs = 1 if self.policy.fans_out else request.num_seqs  # V1: each child alone
        last_len = request.total_len - 1
        if self.state.spec is not None:  # its last verification's drafts and lookahead slots
            last_len = self.state.spec.peak_slots(request.total_len, request.output_len)
        needed = _blocks_at(request, last_len, block_size, num_seqs)
        if self.state.pieces.decode_keeps_block_per_seq and request.output_len >= 2:
            # vLLM V0 decodes a group only while one block per sequence is free
            # (core/block_manager_v1.py can_append_slots): before its last decode step the
            # request holds its blocks of total_len - 2 tokens and needs num_seqs more free.
            needed = max(
                needed,
                _blocks_at(request, request.total_len - 2, block_size, num_seqs) + num_seqs,
            )
        if needed > num_blocks or prompt_blocks > num_blocks:
            return (
                f"needs {needed} KV blocks of {block_size} tokens at full length; "
                f"the cache holds {num_blocks}"
            )
        # V1's children run one at a time if need be; V0's forks must run together.
        return None if self.policy.fans_out else self.too_many_seqs_reason(request)

    def _hybrid_capacity_reason(self, request: Request) -> str | None:
        """A hybrid model's request alone at its longest, growing by prompt chunks as large
        as the token budget allows (its sliding groups hold those chunks' blocks for a step)."""
        assert not isinstance(self.kv, PagedKVCache)
        layout = self.kv.layout
        knobs = self.state.knobs
        chunk = min(knobs.max_num_batched_tokens, self.system.max_prefill_chunk or 1 << 62)
        needed = layout.blocks_alone(request.total_len - 1, chunk)
        if needed > self.kv.num_blocks:
            return (
                f"needs {needed} KV blocks of {layout.block_size} tokens (over "
                f"{layout.num_groups} layer groups) at full length; the cache holds "
                f"{self.kv.num_blocks}"
            )
        return None


def _blocks_at(request: Request, num_tokens: int, block_size: int, num_seqs: int) -> int:
    """Blocks a request's sequences hold with `num_tokens` tokens each. Forked sequences share
    only the prompt's full blocks: each holds its own copy of the partly filled prompt block and
    its own output blocks (counting only blocks_for(output) per extra sequence admitted
    requests that could never come back from swap)."""
    needed = blocks_for(num_tokens, block_size)
    per_seq_own = needed - request.prompt_len // block_size
    return needed + (num_seqs - 1) * per_seq_own
