"""Speculative decoding in the V1 policy, as vLLM V1 schedules and verifies it.

Read in vllm-project/vllm at commit 00024d31 (2026; the code index's copy) and, for the
KV manager, v0.10.2 (01efc7ef) — the same rules in both:

- `v1/core/sched/scheduler.py Scheduler.schedule`: a running request asks for
  `num_tokens_with_spec - num_computed_tokens` tokens, i.e. its last sampled token plus its k
  draft tokens; that is trimmed to the token budget left and to `max_model_len - 1 -
  num_computed_tokens`, and the drafts beyond what was scheduled are dropped. The draft
  tokens count in `num_scheduled_tokens` and so in the token budget.
- `Scheduler.__init__`: `num_lookahead_tokens = num_spec_tokens` when the method uses the
  target's hidden states (`use_eagle()`: eagle, eagle3, mtp) or a draft model, 0 for n-gram.
  `v1/core/kv_cache_manager.py allocate_slots`: a request's blocks must hold
  `min(num_computed + num_new + num_lookahead, max_model_len)` slots. Waiting requests
  (num_computed_tokens == 0) are allocated without lookahead (`effective_lookahead_tokens`).
- `Scheduler.update_from_output`: the verification returns `accepted + 1` tokens (the accepted
  drafts and one token sampled by the target after them); `num_computed_tokens -= num_rejected`:
  the rejected drafts' slots hold no valid KV and the next step writes over them. Their blocks
  stay with the request (`get_num_blocks_to_allocate` only ever adds blocks), so here the slots
  stay allocated and uncomputed — the request's own reservation.
- `Scheduler._update_request_with_output`: tokens are appended one by one and `check_stop`
  trims the rest once the request reaches max_tokens: a request never overshoots.

The accepted count of each verification is drawn from the acceptance model
(`SpeculativeConfig.accepted_pmf`, over the full k drafts; a verification of d < k drafts
accepts min(a, d)) with a generator seeded by the scenario seed on its own stream, so runs are
deterministic and the workload's draws are untouched. Drafts are proposed for every decoding
request each step (vLLM proposes after every sampled token), so the first decode after the
prompt verifies k drafts too.

The same idea in other layers: simulator/execution/speculative.py prices the drafts,
simulator/scenario/speculative.py reads the settings.
"""

from __future__ import annotations

from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import GENERATED_SEGMENT
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder
from pagesim.simulator.policies.spec_decoder import SpecDecoder
from pagesim.simulator.policies.v1_running import schedule_running_v1


def schedule_running_speculative(
    state: PagedState,
    spec: SpecDecoder,
    step: StepBuilder,
    budget: int,
    chunk_cap: int,
    now_s: float,
) -> int:
    """V1's running phase (policies/v1_running.py) with the speculative demand and the
    lookahead slots. Returns the budget left."""
    kv = state.kv
    # policies.factory.hybrid_refusal keeps speculative decoding off hybrid models' caches
    assert isinstance(kv, PagedKVCache)

    def demand(group: SeqGroup, available: int) -> tuple[int, int, bool] | None:
        asked = spec.demand(group, available, chunk_cap)
        return None if asked is None else (asked[0], asked[0], asked[1])

    def slots(group: SeqGroup, num_new: int) -> int:
        return spec.slots_to_append(kv, group, num_new)

    return schedule_running_v1(state, step, budget, demand, slots, now_s)


def complete_speculative(state: PagedState, spec: SpecDecoder, plan: StepPlan, now_s: float) -> int:
    """The step `plan` finished at `now_s`: prompt chunks commit; each decode verifies its
    drafts, commits the accepted ones' KV and emits accepted + 1 tokens, stopping at the
    request's output length. Returns the output tokens produced. Under V1 every group is one
    sequence (n > 1 fans out into child requests)."""
    groups = state.groups
    finished: list[SeqGroup] = []
    num_out = 0
    stats = spec.stats
    for rid, _, num_new, _, is_prefill in plan.work:
        group = groups[rid]
        request = group.request
        assert len(group.seq_ids) == 1, "V1 groups are single sequences"
        if is_prefill:
            group.num_computed += num_new
            state.commit(group)
            if group.num_computed < group.target:
                continue  # a chunk of the prompt: no token yet
            num_tokens = 1
        else:
            if rid in spec.padded:  # an admission padded with placeholder drafts
                accepted = spec.verify_placeholders(num_new - 1)
            else:
                accepted = spec.verify(num_new - 1)
            group.num_computed += 1 + accepted  # num_computed_tokens -= num_rejected
            state.commit(group)
            num_tokens = 1 + accepted
        emitted = 0
        is_done = False
        while emitted < num_tokens:
            emitted += 1
            if request.produce_token(now_s):
                is_done = True
                break
        num_out += emitted
        if not is_prefill:
            stats.num_emitted_tokens += emitted
        if is_done:
            finished.append(group)
        elif group.hashers is not None:
            seq_id = group.seq_ids[0]
            group.hashers[0].extend((GENERATED_SEGMENT, seq_id), emitted)
    spec.padded.clear()
    if finished:
        state.finish(finished, now_s)
    return num_out
