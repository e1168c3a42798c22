"""Speculative decoding in the V1 policy, step by step with exact slots and blocks (block size 4),
and a property over random loads: no block leaks, every request ends with exactly its output.

vLLM V1 rules mirrored (simulator/policies/speculative.py cites them): a decode schedules 1 + k
tokens (its last token and k drafts), trimmed to the budget and to max_model_len - 1 - computed;
the blocks hold computed + scheduled + lookahead slots (k for eagle/mtp/draft-model, 0 for
n-gram; on admission from v0.23.0 only); a verification computes 1 + accepted and emits
accepted + 1 tokens, never more than the request's output length.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import paged_scheduler, poisson_workload, request, scenario, system
from sim_helpers import step_and_check as _step
from sim_helpers import work_of as _work

from pagesim.simulator.core.catalog import GIB
from pagesim.simulator.core.config import (
    Policy,
    PreemptionPolicy,
    Scenario,
    SpecMethod,
    SpeculativeConfig,
    SystemConfig,
    VllmVersion,
)
from pagesim.simulator.core.defaults import resolve_system
from pagesim.simulator.core.request import RequestStatus
from pagesim.simulator.kv.block_budget import kv_budget_bytes, kv_capacity, weight_bytes_per_gpu
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.spec_decoder import SpecDecoder
from pagesim.simulator.policies.vllm_v1 import VllmV1


def resolved_for(sc: Scenario, s: SystemConfig) -> SystemConfig:
    return resolve_system(s, sc.model, sc.gpu, sc.tensor_parallel).system


def spec(k: int, rate: float, method: SpecMethod = SpecMethod.EAGLE) -> SpeculativeConfig:
    return SpeculativeConfig(method, k, acceptance_rate=rate)


def test_all_drafts_accepted_give_k_plus_1_tokens_a_step_with_lookahead_slots() -> None:
    """k = 2, acceptance 1, EAGLE (lookahead 2). Prompt 5, output 7: 1 + 3 + 3 tokens in three
    steps. vLLM v0.11.0: a waiting request is allocated no lookahead
    (`effective_lookahead_tokens` is 0 while num_computed_tokens is 0)."""
    sched = paged_scheduler(
        Policy.VLLM_V1, num_blocks=16, speculative=spec(2, 1.0), vllm_version=VllmVersion.V0_11
    )
    sched.add_request(request(0, 5, 7), 0.0)
    kv = sched.kv
    plan = _step(sched, 0.0)  # admitted: exactly its prompt's slots, no lookahead
    assert _work(plan) == [(0, 0, 5, 5, True)]
    assert (kv.num_tokens(0), kv.num_computed_tokens(0), kv.block_table(0)) == (5, 5, (0, 1))
    plan = _step(sched, 1.0)  # 1 + 2 query tokens; slots for 5 + 3 + 2 = 10
    assert _work(plan) == [(0, 0, 3, 8, False)]
    assert (kv.num_tokens(0), kv.num_computed_tokens(0), kv.block_table(0)) == (10, 8, (0, 1, 2))
    assert sched.state.groups[0].request.num_generated == 4  # 1 + (2 accepted + 1)
    plan = _step(sched, 2.0)  # slots for 8 + 3 + 2 = 13: a fourth block
    assert _work(plan) == [(0, 0, 3, 11, False)]
    assert not kv.has_seq(0) and kv.num_free_blocks == 16  # 7 tokens: finished, all freed
    stats = sched.state.spec.stats if sched.state.spec else None
    assert stats is not None
    assert (stats.num_verifications, stats.num_draft_tokens, stats.num_accepted_tokens) == (2, 4, 4)
    assert sched.num_output_tokens == 7


def test_rejected_drafts_roll_back_the_computed_slots_and_keep_their_blocks() -> None:
    """Acceptance 0: each verification computes one token and emits one; the rejected drafts'
    slots stay allocated, uncomputed, and the next step writes over them."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=16, speculative=spec(2, 0.0))
    sched.add_request(request(0, 5, 4), 0.0)
    kv = sched.kv
    _step(sched, 0.0)
    plan = _step(sched, 1.0)
    assert _work(plan) == [(0, 0, 3, 8, False)]
    assert (kv.num_tokens(0), kv.num_computed_tokens(0)) == (10, 6)
    # Slots 6 and 7 will hold its last tokens' KV (final length 8): reserved; 8 and 9 (the
    # lookahead past its end) and the empty tail of block 2 are internal fragmentation.
    breakdown = sched.memory_breakdown()
    assert (breakdown.reserved_slots, breakdown.internal_frag_slots) == (2, 4)
    plan = _step(sched, 2.0)  # 6 + 3 + 2 = 11 slots: one more
    assert _work(plan) == [(0, 0, 3, 9, False)]
    assert (kv.num_tokens(0), kv.num_computed_tokens(0)) == (11, 7)
    plan = _step(sched, 3.0)
    assert _work(plan) == [(0, 0, 3, 10, False)]
    assert not kv.has_seq(0) and sched.num_output_tokens == 4  # 1 + 1 + 1 + 1
    assert sched.state.spec is not None
    assert sched.state.spec.stats.num_accepted_tokens == 0


def test_ngram_allocates_no_lookahead() -> None:
    sched = paged_scheduler(
        Policy.VLLM_V1, num_blocks=16, speculative=spec(2, 0.0, SpecMethod.NGRAM)
    )
    sched.add_request(request(0, 5, 4), 0.0)
    _step(sched, 0.0)
    _step(sched, 1.0)
    assert (sched.kv.num_tokens(0), sched.kv.num_computed_tokens(0)) == (8, 6)  # 5 + 3


def test_a_request_never_overshoots_its_output_length() -> None:
    """vLLM's check_stop trims the tokens past max_tokens: output 3 after the first token needs
    2 more; all 2 drafts accepted yield 3, of which 2 are kept (both accepted counted)."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=16, speculative=spec(2, 1.0))
    sched.add_request(request(0, 5, 3), 0.0)
    _step(sched, 0.0)
    _step(sched, 1.0)
    assert sched.num_output_tokens == 3 and not sched.state.groups
    assert sched.state.spec is not None
    stats = sched.state.spec.stats
    assert (stats.num_accepted_tokens, stats.num_emitted_tokens) == (2, 2)


def test_drafts_count_in_the_token_budget_and_are_trimmed_to_it() -> None:
    """Budget 5, k = 3: the first decode asks 4 tokens, the second only the 1 left (no draft)."""
    sched = paged_scheduler(
        Policy.VLLM_V1, num_blocks=32, max_num_batched_tokens=5, speculative=spec(3, 1.0)
    )
    for rid in (0, 1):
        sched.add_request(request(rid, 2, 9), 0.0)
    plan = _step(sched, 0.0)
    assert _work(plan) == [(0, 0, 2, 2, True), (1, 1, 2, 2, True)]
    plan = _step(sched, 1.0)
    assert _work(plan) == [(0, 0, 4, 6, False), (1, 1, 1, 3, False)]


def test_drafts_stop_at_the_model_maximum_length() -> None:
    """max_model_len 12, computed 9: 12 - 1 - 9 = 2 tokens (one draft); slots min(9 + 2 + 2,
    12) = 12 (vLLM: allocate_slots caps at max_model_len)."""
    resolved = paged_scheduler(Policy.VLLM_V1, 1, speculative=spec(2, 1.0)).system
    sched = PagedScheduler(resolved, 12, 16, 0, VllmV1())
    sched.add_request(request(0, 9, 3), 0.0)
    _step(sched, 0.0)
    plan = sched.schedule(1.0)
    assert _work(plan) == [(0, 0, 2, 11, False)]
    assert sched.kv.num_tokens(0) == 12
    sched.complete(plan, 1.01)
    sched.check_invariants()
    assert sched.num_output_tokens == 3 and not sched.state.groups


def test_a_request_whose_drafts_and_lookahead_cannot_fit_is_rejected_up_front() -> None:
    """Prompt 5 + output 4 holds 8 slots (2 blocks); with k = 2 and lookahead 2 its last
    verification holds 12 (3 blocks): a pool of 2 blocks rejects it, not stalls."""
    plain = paged_scheduler(Policy.VLLM_V1, num_blocks=2)
    plain.add_request(request(0, 5, 4), 0.0)
    assert plain.state.groups
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=2, speculative=spec(2, 1.0))
    r = request(0, 5, 4)
    sched.add_request(r, 0.0)
    assert r.status is RequestStatus.REJECTED
    assert r.rejection_reason == "needs 3 KV blocks of 4 tokens at full length; the cache holds 2"


def test_acceptance_draws_follow_the_distribution_and_the_seed() -> None:
    """Per-position rates (0.8, 0.5): P(0) = 0.2, P(1) = 0.3, P(2) = 0.5."""
    config = SpeculativeConfig(SpecMethod.MTP, 2, acceptance_rates=(0.8, 0.5))
    assert config.accepted_pmf() == pytest.approx((0.2, 0.3, 0.5))
    decoder = SpecDecoder(config, 4096, seed=7)
    draws = [decoder.verify(2) for _ in range(20_000)]
    counts = [draws.count(a) / len(draws) for a in range(3)]
    assert counts == pytest.approx([0.2, 0.3, 0.5], abs=0.015)
    again = SpecDecoder(config, 4096, seed=7)
    assert [again.verify(2) for _ in range(100)] == draws[:100]
    assert max(decoder.verify(1) for _ in range(100)) == 1  # one draft: at most one accepted
    # A fleet's second replica draws its own sequence; its first keeps a single run's.
    first = SpecDecoder(config, 4096, seed=7, replica=0)
    second = SpecDecoder(config, 4096, seed=7, replica=1)
    assert [first.verify(2) for _ in range(100)] == draws[:100]
    assert [second.verify(2) for _ in range(100)] != draws[:100]


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(1, 4),
    rate=st.floats(0.0, 1.0),
    method=st.sampled_from([SpecMethod.EAGLE, SpecMethod.NGRAM, SpecMethod.DRAFT_MODEL]),
    lengths=st.lists(st.tuples(st.integers(1, 24), st.integers(1, 24)), min_size=1, max_size=8),
    num_blocks=st.integers(8, 40),
    budget=st.integers(1, 40),
    prefix=st.booleans(),
    swap=st.booleans(),
    chunk=st.one_of(st.none(), st.integers(1, 8)),
)
def test_random_loads_leak_no_block_and_finish_every_output(
    k: int,
    rate: float,
    method: SpecMethod,
    lengths: list[tuple[int, int]],
    num_blocks: int,
    budget: int,
    prefix: bool,
    swap: bool,
    chunk: int | None,
) -> None:
    """Preemption by recompute or by swap (pagesim's V1 extension), chunked prompts, a budget
    down to one token (no room for drafts), pools down to a few blocks."""
    config = SpeculativeConfig(
        method,
        k,
        acceptance_rate=rate,
        draft_model="llama-3-8b" if method.value == "draft-model" else None,
    )
    sched = paged_scheduler(
        Policy.VLLM_V1,
        num_blocks=num_blocks,
        max_num_batched_tokens=budget,
        enable_prefix_cache=prefix,
        preemption=PreemptionPolicy.SWAP if swap else PreemptionPolicy.RECOMPUTE,
        max_prefill_chunk=chunk,
        speculative=config,
    )
    requests = [
        request(i, p, o, prefix_len=min(p, 4) if prefix else 0) for i, (p, o) in enumerate(lengths)
    ]
    now = 0.0
    for _i, r in enumerate(requests):
        sched.add_request(r, now)
        _step(sched, now)  # one arrival per step, then run
        now += 1.0
    for _ in range(2000):
        if not sched.has_pending:
            break
        plan = _step(sched, now)
        assert not plan.is_empty, "stalled"
        now += 1.0
    assert not sched.has_pending
    expected = 0
    for r in requests:
        if r.status is RequestStatus.REJECTED:
            continue
        assert r.status is RequestStatus.FINISHED
        assert r.num_generated == r.output_len
        expected += r.output_len
    assert sched.num_output_tokens == expected
    assert sched.kv.num_free_blocks == num_blocks and sched.kv.num_used_blocks == 0


def test_the_drafter_takes_its_weights_and_kv_layers_out_of_the_kv_capacity() -> None:
    """An EAGLE head on Llama-3-8B is one decoder layer: 2 x 4096 x 4096 + 2 x 4096 x 1024
    (attention) + 3 x 4096 x 14336 (gated MLP) = 218,103,808 parameters, 436,207,616 bytes; its
    KV is one more layer's, 2 x 8 x 128 x 2 = 4,096 B a token: 33 x 4,096 = 135,168 B a token in
    all. An n-gram drafter takes nothing."""
    sc = scenario(poisson_workload(10, 1.0, 100, 100), model="llama-3-8b", gpu="h100-sxm")
    plain = resolved_for(sc, system(Policy.VLLM_V1))
    eagle = replace(plain, speculative=spec(3, 0.5))
    ngram = replace(plain, speculative=spec(3, 0.5, SpecMethod.NGRAM))
    assert plain.activation_reserve_gib is not None
    budget = kv_budget_bytes(
        sc.gpu,
        plain.gpu_memory_utilization,
        weight_bytes_per_gpu(sc.model, 1) + 436_207_616,
        plain.activation_reserve_gib * GIB,
    )
    capacity = kv_capacity(sc, eagle)
    assert capacity.kv_bytes_per_token == 135_168 == 33 * 4096
    assert capacity.num_gpu_blocks == int(budget // (135_168 * 16))
    assert kv_capacity(sc, ngram) == kv_capacity(sc, plain)
    assert capacity.num_gpu_blocks < kv_capacity(sc, plain).num_gpu_blocks * 32 / 33
