"""Speculative decoding in a disaggregated fleet, exactly: the prefill replica runs the draft's
pass over the prompt, the draft's KV travels with the target's, and the decode replica verifies
drafts from its first decode step after the landed prompt's last token."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagesim.simulator.cluster.disagg import run_disagg
from pagesim.simulator.core.config import SpecMethod, SpeculativeConfig, VllmVersion
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.speculative import SpeculativeModel
from tests.sim_helpers import explicit_workload
from tests.simulator.cluster.disagg_helpers import assert_all_blocks_back, fleet, run, v1_scenario

LLAMA2_7B_KV_BYTES_PER_TOKEN = 524_288  # docs/facts.md: 2 x 32 layers x 32 heads x 128 x 2 bytes
EAGLE = SpeculativeConfig(SpecMethod.EAGLE, 3, acceptance_rate=1.0)
NGRAM = SpeculativeConfig(SpecMethod.NGRAM, 3, acceptance_rate=1.0)


def test_a_model_draft_sends_its_kv_of_the_prompt_with_the_targets() -> None:
    # An EAGLE head is one decoder layer of Llama-2-7B: 100 tokens x 524,288 x 33 / 32 bytes
    # = 54,067,200; at 10 GB/s and 1 ms: 0.001 + 54,067,200 / 1e10 s. An n-gram draft has no KV.
    link = LinkConfig(10e9, 1e-3)
    sent = {}
    for spec in (None, NGRAM, EAGLE):
        sc = v1_scenario(explicit_workload([(100, 3, 0.0)]), speculative=spec)
        disagg, result = run(sc, fleet(sc, link=link))
        row = result.requests.iloc[0]
        sent[spec] = row.transfer_bytes
        assert row.transfer_end_s - row.transfer_start_s == pytest.approx(
            0.001 + row.transfer_bytes / 1e10, abs=1e-15
        )
        assert_all_blocks_back(disagg)
    assert sent[None] == sent[NGRAM] == 100 * LLAMA2_7B_KV_BYTES_PER_TOKEN
    assert sent[EAGLE] == 100 * LLAMA2_7B_KV_BYTES_PER_TOKEN * 33 // 32 == 54_067_200


def test_the_prefill_step_includes_the_drafts_pass_over_the_prompt() -> None:
    # vLLM V1's proposer runs its first pass over every token the target computed: on a prefill
    # replica that is the whole prompt, which fills the draft KV the transfer carries.
    sc = v1_scenario(explicit_workload([(512, 4, 0.0)]), speculative=EAGLE)
    disagg, result = run(sc, fleet(sc, link=LinkConfig(float("inf"), 0.0)))
    execution = disagg.prefills[0].execution
    assert isinstance(execution, SpeculativeModel)
    plan = StepPlan.build([SeqWork(0, 0, 512, 512, True)])
    target_s = execution.base.price(plan).duration_s
    draft_s = execution.draft.price([], [(512, 512)])[0]
    assert 0 < draft_s < target_s / 16  # one layer of 32, and the LM head's weights once
    assert result.requests.iloc[0].ttft_prefill_s == pytest.approx(target_s + draft_s, abs=1e-15)


@pytest.mark.parametrize(
    ("version", "prefill_tokens", "decode_tokens", "drafts", "mean_length"),
    [
        # v0.11.0: the first step recomputes the last prompt token (token 1), then two
        # verifications of 3 drafts each emit 4 tokens each (tokens 2-5 and 6-9).
        (VllmVersion.V0_11, [1, 0, 0], [0, 4, 4], 6, 4.0),
        # v0.34.0 (from v0.25.0): that first step is padded to 1 + 3 tokens, its 3 drafts
        # placeholders, rejected (v1/core/sched/scheduler.py, "Pad new decode requests to
        # uniform spec decoding size"): token 1 still, and 3 more drafted, none accepted.
        (VllmVersion.V0_34, [0, 0, 0], [4, 4, 4], 9, 3.0),
    ],
)
def test_the_decode_replica_verifies_drafts_after_the_landed_prompts_last_token(
    version: VllmVersion,
    prefill_tokens: list[int],
    decode_tokens: list[int],
    drafts: int,
    mean_length: float,
) -> None:
    # Every draft accepted (rate 1), k = 3, 9 output tokens: three decode-replica steps. The
    # prefill replica verifies nothing (its clone stops at one token).
    sc = v1_scenario(explicit_workload([(100, 9, 0.0)]), speculative=EAGLE, vllm_version=version)
    disagg, result = run(sc, fleet(sc, link=LinkConfig(float("inf"), 0.0)))
    steps = result.steps
    on_decode = steps[steps["replica"] == disagg.decodes[0].index]
    assert list(on_decode["num_prefill_tokens"]) == prefill_tokens
    assert list(on_decode["num_decode_tokens"]) == decode_tokens
    summary = result.summary
    assert summary["spec_num_draft_tokens"] == drafts
    assert summary["spec_num_accepted_tokens"] == 6
    assert summary["spec_mean_acceptance_length"] == mean_length
    assert result.requests.iloc[0].num_output_tokens == 9
    assert_all_blocks_back(disagg)


def test_a_prefill_replica_holds_a_finished_prompts_lookahead_blocks_until_its_kv_left() -> None:
    # A 256-token budget: step 1 runs A (100 tokens, whole) and 156 tokens of B (176); step 2
    # runs B's last 20 as a running request, which vLLM V1 allocates with k = 3 lookahead slots:
    # 179 slots, 12 blocks of 16 (11 without speculation). A finished request's blocks are
    # kept whole until its KV has left (the connector's delay_free_blocks), lookahead included.
    # A 1 MB/s link keeps both transfers going long after step 2.
    workload = explicit_workload([(100, 1, 0.0), (176, 1, 0.0)])
    held = {}
    for spec in (None, EAGLE):
        sc = v1_scenario(workload, max_num_batched_tokens=256, speculative=spec)
        sc = replace(sc, stop=replace(sc.stop, max_time_s=1.0))
        disagg = run_disagg(sc, fleet(sc, link=LinkConfig(1e6, 0.0)), check_invariants=True)
        prefill = disagg.prefills[0].paged
        assert len(prefill.state.held) == 2 and not prefill.state.groups
        held[spec] = prefill.kv.num_used_blocks
        # 276 computed slots; the rest of the blocks is padding (the 3 lookahead slots
        # included: never written, so not a reservation)
        breakdown = prefill.memory_breakdown()
        assert breakdown.token_slots == 276 and breakdown.reserved_slots == 0
        assert breakdown.internal_frag_slots == held[spec] * 16 - 276
    assert held == {None: 7 + 11, EAGLE: 7 + 12}


def test_a_layerwise_transfer_sends_the_draft_kv_after_the_prefill_step() -> None:
    # 512 tokens of Llama-2-7B at 10 GB/s: the target's 268,435,456 bytes leave layer by layer
    # under the prefill step P (all but the last of 32 layers' share hidden: max(X/32,
    # X - P x 31/32)); the EAGLE head's 8,388,608 bytes only after it.
    sc = v1_scenario(explicit_workload([(512, 2, 0.0)]), speculative=EAGLE)
    link = LinkConfig(10e9, 0.0, layerwise=True)
    disagg, result = run(sc, fleet(sc, link=link))
    row = result.requests.iloc[0]
    target_s, draft_s = 512 * LLAMA2_7B_KV_BYTES_PER_TOKEN / 10e9, 512 * 16_384 / 10e9
    step_s = row.ttft_prefill_s
    expected = max(target_s / 32, target_s - step_s * 31 / 32) + draft_s
    assert row.transfer_end_s - row.transfer_start_s == pytest.approx(expected, rel=1e-12)
    assert_all_blocks_back(disagg)


def test_the_summary_counts_both_sides_draft_time() -> None:
    sc = v1_scenario(explicit_workload([(300, 6, 0.0), (200, 5, 0.01)]), speculative=EAGLE)
    disagg, result = run(sc, fleet(sc))
    prefill_s = disagg.prefills[0].execution.draft_s  # type: ignore[attr-defined]
    decode_s = disagg.decodes[0].execution.draft_s  # type: ignore[attr-defined]
    assert prefill_s > 0 and decode_s > 0
    assert result.summary["spec_draft_s"] == pytest.approx(prefill_s + decode_s, rel=1e-12)


def test_a_decode_pool_must_hold_a_speculating_request_of_the_maximum_length() -> None:
    # max_seq_len 257, blocks of 16: a request peaks at 256 slots without speculation (16
    # blocks) but at 257 with drafts and lookahead (17): 16 blocks hold only the first.
    for spec, fits in ((None, True), (EAGLE, False)):
        sc = v1_scenario(explicit_workload([(200, 57, 0.0)]), max_seq_len=257, speculative=spec)
        cluster = fleet(sc)
        sc = replace(sc, systems=(replace(sc.systems[0], num_kv_blocks=16),))
        if fits:
            assert run(sc, cluster)[1].requests.iloc[0].status == "finished"
        else:
            with pytest.raises(InputError, match=r"needs \(17\)"):
                run(sc, cluster)


def test_a_fleet_built_in_code_refuses_drafts_that_differ() -> None:
    sc = v1_scenario(explicit_workload([(100, 3, 0.0)]))
    base = sc.systems[0]
    sc = replace(sc, systems=(replace(base, name="p", speculative=EAGLE), replace(base, name="d")))
    with pytest.raises(InputError, match="differ in their model draft"):
        run(sc, fleet(sc, prefill_system="p", decode_system="d"))
