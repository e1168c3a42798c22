"""The price of speculative decoding (simulator/execution/speculative.py), and the closed forms
of the issue: acceptance 1 with a free draft gives k + 1 tokens a step and TPOT = step / (k + 1);
acceptance 0 gives one token a step at the verification's price."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from profile_helpers import synthetic_profile
from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import (
    ExecutionConfig,
    ExecutionKind,
    Policy,
    Scenario,
    SpecMethod,
    SpeculativeConfig,
    SystemConfig,
)
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.factory import make_execution_model
from pagesim.simulator.execution.gemm import gemm_time_s
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.profile import ProfileModel
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.speculative import (
    NGRAM_HOST_S_PER_SEQ,
    HostDraft,
    SpeculativeModel,
    draft_pricer,
)

LLAMA = get_model("llama-3-8b")
H100 = get_gpu("h100-sxm")
CONFIG = ExecutionConfig()


def target() -> RooflineModel:
    return RooflineModel(LLAMA, H100, CONFIG, era=EngineEra.V1)


def eagle_layer() -> RooflineModel:
    """An EAGLE head as the draft pricer builds it: one layer of the target, no host overhead."""
    return RooflineModel(
        replace(LLAMA, name="x", num_layers=1),
        H100,
        replace(CONFIG, step_overhead_s=0.0, step_overhead_s_per_seq=0.0),
    )


def plan_of(*work: tuple[int, int, bool]) -> StepPlan:
    return StepPlan.build([SeqWork(i, i, n, c, p) for i, (n, c, p) in enumerate(work)])


def test_a_step_without_drafts_costs_what_the_base_model_says() -> None:
    base = target()
    spec = SpeculativeModel(base, base, HostDraft(1.0, "slow"), SpecMethod.NGRAM)
    plan = plan_of((1, 100, False), (1, 300, False), (64, 64, True))
    assert spec.price(plan) == base.price(plan)
    assert spec.draft_s == 0.0


def test_verification_is_the_base_price_of_the_chunks_plus_lm_head_rows_plus_the_draft() -> None:
    """Two sequences with 3 drafts each: the base model prices the 4-token chunks; the extra
    6 LM-head rows cost g(2 + 6) - g(2) on the roofline's LM head GEMM; an n-gram draft costs
    its host time per sequence (the LM head GEMM as the roofline prices it: execution/gemm.py,
    tiled on H100, pinned by tests/simulator/execution/test_gemm.py)."""
    base = target()
    spec = SpeculativeModel(base, base, HostDraft(NGRAM_HOST_S_PER_SEQ, "n"), SpecMethod.NGRAM)
    plan = plan_of((4, 104, False), (4, 204, False))
    f = base.factors
    peak, bw = H100.fp16_flops, H100.mem_bandwidth_bps

    def lm_head(rows: int) -> float:
        model = base.model
        return float(gemm_time_s(rows, model.hidden_size, model.vocab_size, peak, bw, f))

    lm_s = lm_head(8) - lm_head(2)
    assert 0 < lm_s < 6 * base.lm_head_flops_per_seq / (peak * f.gemm_efficiency) + 1e-9
    cost = spec.price(plan)
    expected = base.price(plan).compute_s + lm_s + 2 * NGRAM_HOST_S_PER_SEQ
    assert cost.compute_s == pytest.approx(expected, rel=1e-12)
    assert cost.flops == pytest.approx(base.price(plan).flops + 6 * base.lm_head_flops_per_seq)
    assert spec.breakdown(plan) == pytest.approx(
        {"verify": base.price(plan).compute_s, "verify_lm_head": lm_s, "draft": 2 * 20e-6}
    )


def test_an_eagle_draft_is_k_one_layer_decode_passes_without_host_overhead() -> None:
    """k = 3 drafts for two sequences whose context was 100 and 200 before the step: three
    passes of a one-layer copy of the target at contexts +1, +2, +3."""
    base = target()
    eagle = draft_pricer(SpeculativeConfig(SpecMethod.EAGLE, 3, 0.5), base, CONFIG)
    layer = eagle_layer()
    seconds, flops, _ = eagle.price([(100, 3), (200, 3)], [])
    passes = [layer.price(plan_of((1, 100 + j, False), (1, 200 + j, False))) for j in (1, 2, 3)]
    assert seconds == pytest.approx(sum(p.compute_s for p in passes), rel=1e-12)
    assert flops == pytest.approx(sum(p.flops for p in passes), rel=1e-12)
    # One layer + LM head: far cheaper than the 32-layer target's decode, dearer than nothing.
    assert 0 < seconds / 3 < base.decode_time_s(2, 200) / 2


def test_a_model_draft_first_pass_reads_the_steps_prompt_chunks() -> None:
    """vLLM V1's proposer runs its first pass over every token the target computed in the step
    (v1/spec_decode/eagle.py EagleProposer.propose): a prompt chunk of 64 tokens at context 64
    joins the first of the three one-layer passes; an n-gram draft has no such pass."""
    base = target()
    eagle = draft_pricer(SpeculativeConfig(SpecMethod.EAGLE, 3, 0.5), base, CONFIG)
    layer = eagle_layer()
    seconds, flops, _ = eagle.price([(100, 3)], [(64, 64)])
    first = layer.price(plan_of((1, 101, False), (64, 64, True)))
    later = [layer.price(plan_of((1, 100 + j, False))) for j in (2, 3)]
    assert seconds == pytest.approx(first.compute_s + sum(p.compute_s for p in later), rel=1e-12)
    assert flops == pytest.approx(first.flops + sum(p.flops for p in later), rel=1e-12)
    # A step of prompt chunks only: the target's price plus the draft's pass over the chunks.
    spec = SpeculativeModel(base, base, eagle, SpecMethod.EAGLE)
    prompts = plan_of((64, 64, True), (512, 1024, True))
    pass_s = layer.price(prompts).compute_s
    assert spec.parts(prompts) == pytest.approx(
        (pass_s, 0.0, layer.price(prompts).flops, layer.price(prompts).bytes_moved)
    )
    assert spec.price(prompts).compute_s == pytest.approx(base.price(prompts).compute_s + pass_s)
    assert spec.draft_s == pytest.approx(pass_s)
    ngram = SpeculativeModel(base, base, HostDraft(1.0, "n"), SpecMethod.NGRAM)
    assert ngram.price(prompts) == base.price(prompts)
    assert HostDraft(1.0, "n").price([(100, 3)], [(64, 64)]) == (1.0, 0.0, 0.0)


def test_a_draft_model_is_priced_on_its_own_model_spec() -> None:
    base = RooflineModel(get_model("llama-3-70b"), H100, CONFIG, tensor_parallel=4)
    draft = draft_pricer(
        SpeculativeConfig(SpecMethod.DRAFT_MODEL, 2, 0.5, draft_model="llama-3-8b"), base, CONFIG
    )
    small = RooflineModel(
        LLAMA,
        H100,
        replace(CONFIG, step_overhead_s=0.0, step_overhead_s_per_seq=0.0),
        tensor_parallel=4,
    )
    seconds, _, _ = draft.price([(50, 2)], [])
    assert seconds == pytest.approx(small.decode_time_s(1, 51) + small.decode_time_s(1, 52))


# -- closed forms through the engine -----------------------------------------------------------


def run(k: int, rate: float, output_len: int) -> tuple[Scenario, SystemConfig]:
    spec = SpeculativeConfig(SpecMethod.NGRAM, k, acceptance_rate=rate)
    sc = scenario(
        explicit_workload([(100, output_len, 0.0)]),
        system(Policy.VLLM_V1, "spec", speculative=spec),
        model="llama-3-8b",
        gpu="h100-sxm",
    )
    return sc, sc.systems[0]


def free_draft(sc: Scenario, s: SystemConfig, _: Scheduler) -> ExecutionModel:
    base = RooflineModel(sc.model, sc.gpu, sc.execution, era=EngineEra.V1)
    return SpeculativeModel(base, base, HostDraft(0.0, "free"), SpecMethod.NGRAM)


def test_acceptance_1_and_a_free_draft_give_k_plus_1_tokens_a_step() -> None:
    """k = 3, output 41: the prompt step gives 1 token, then 10 verifications give 4 each; TPOT
    = (sum of the 10 decode steps) / 40 = mean step / (k + 1)."""
    sc, s = run(3, 1.0, 41)
    result = simulate(sc, s, execution_factory=free_draft, check_invariants=True)
    steps = result.steps
    assert len(steps) == 11
    decode = steps["duration_s"].iloc[1:]
    assert list(steps["num_decode_tokens"].iloc[1:]) == [4] * 10
    tpot = result.requests["tpot_s"].iloc[0]
    assert tpot == pytest.approx(decode.mean() / 4, rel=1e-9)
    assert result.summary["spec_acceptance_rate"] == 1.0
    assert result.summary["spec_mean_acceptance_length"] == 4.0


def test_acceptance_0_gives_one_token_a_step_at_the_verification_price() -> None:
    """Each of the 9 decode steps verifies 3 drafts and keeps none: 1 token per step, each
    step priced as a 4-token chunk (dearer than a plain one-token decode)."""
    sc, s = run(3, 0.0, 10)
    result = simulate(sc, s, execution_factory=free_draft)
    steps = result.steps
    assert len(steps) == 10 and list(steps["num_decode_tokens"].iloc[1:]) == [4] * 9
    model = free_draft(sc, s, None)  # type: ignore[arg-type]
    base = RooflineModel(sc.model, sc.gpu, sc.execution, era=EngineEra.V1)
    for i, duration in enumerate(steps["duration_s"].iloc[1:]):
        context = 100 + i + 4  # computed 100 + i before the step, plus its 4 query tokens
        verify = model.price(plan_of((4, context, False))).compute_s
        assert duration == pytest.approx(verify, rel=1e-12)
        assert verify > base.price(plan_of((1, context - 3, False))).compute_s
    tpot = result.requests["tpot_s"].iloc[0]
    assert tpot == pytest.approx(steps["duration_s"].iloc[1:].mean(), rel=1e-9)
    assert result.summary["spec_acceptance_rate"] == 0.0


def test_spec_decoding_off_is_todays_run() -> None:
    """No [systems.speculative]: no spec keys, the same summary as a system without the field."""
    sc = scenario(
        explicit_workload([(100, 20, 0.0), (50, 30, 0.01)]), model="llama-3-8b", gpu="h100-sxm"
    )
    result = simulate(sc)
    assert not any(key.startswith("spec_") for key in result.summary)


def test_a_profile_priced_system_verifies_on_its_profile_and_drafts_on_the_roofline(
    tmp_path: Path,
) -> None:
    """The verification goes through the scenario's execution model (here a measured profile);
    the draft, which the profile never measured, through the roofline."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(synthetic_profile(get_model("llama-2-7b"))))
    spec = SpeculativeConfig(SpecMethod.EAGLE, 2, acceptance_rate=0.5)
    sc = replace(
        scenario(explicit_workload([(10, 5, 0.0)]), system(Policy.VLLM_V1, speculative=spec)),
        execution=ExecutionConfig(kind=ExecutionKind.PROFILE, profile_path=path),
    )
    model = make_execution_model(sc, sc.systems[0])
    assert isinstance(model, SpeculativeModel) and isinstance(model.base, ProfileModel)
    plain = plan_of((1, 100, False), (1, 300, False))
    assert model.price(plain) == model.base.price(plain)
    verify = plan_of((3, 102, False), (64, 64, True))
    draft_s, lm_s, _, _ = model.parts(verify)
    assert draft_s > 0 and lm_s > 0
    cost = model.price(verify)
    assert cost.compute_s == pytest.approx(model.base.price(verify).compute_s + draft_s + lm_s)
