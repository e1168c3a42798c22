"""Speculative decoding in a disaggregated fleet, exactly: the prefill replica runs the draft's
pass over the prompt, the draft's KV travels with the target's, and the decode replica verifies
drafts from its first decode step after the landed prompt's last token."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagesim.simulator.cluster.disagg import run_disagg
from pagesim.simulator.core.config import SpecMethod, SpeculativeConfig
from pagesim.simulator.core.link import LinkConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.speculative import SpeculativeModel
from tests.sim_helpers import explicit_workload
from tests.simulator.cluster.disagg_helpers import assert_all_blocks_back, fleet, run, v1_scenario

LLAMA2_7B_KV_BYTES_PER_TOKEN = 524_288  # FACTS.md: 2 x 32 layers x 32 heads x 128 x 2 bytes
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


def test_the_decode_replica_verifies_drafts_after_the_landed_prompts_last_token() -> None:
    # Every draft accepted (rate 1), k = 3, 9 output tokens: the decode replica's first step
    # recomputes the last prompt token (token 1), then two verifications of 3 drafts each emit
    # 4 tokens each (tokens 2-5 and 6-9): three decode steps. The prefill replica verifies
    # nothing (its clone stops at one token).
    sc = v1_scenario(explicit_workload([(100, 9, 0.0)]), speculative=EAGLE)
    disagg, result = run(sc, fleet(sc, link=LinkConfig(float("inf"), 0.0)))
    steps = result.steps
    on_decode = steps[steps["replica"] == disagg.decodes[0].index]
    assert list(on_decode["num_prefill_tokens"]) == [1, 0, 0]
    assert list(on_decode["num_decode_tokens"]) == [0, 4, 4]
    summary = result.summary
    assert summary["spec_num_draft_tokens"] == summary["spec_num_accepted_tokens"] == 6
    assert summary["spec_mean_acceptance_length"] == 4.0
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
    assert held == {None: 7 + 11, EAGLE: 7 + 12}
