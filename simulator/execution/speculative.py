"""The price of speculative decoding: the draft, and what the verification adds.

The verification needs nothing new: a decoding sequence with d drafts is one (d + 1)-token query
chunk in the plan (`SeqWork.num_new_tokens = 1 + d`), and the scenario's execution model prices
it like any step — linear layers over every token, attention reading the sequence's KV once
(roofline.py: "a speculative decode of n > 1 tokens counts its causal pairs for FLOPs and is timed
by its KV read"). Two parts are added here:

    verify_lm_head   the LM head over the d extra positions of each sequence (vLLM computes the
                     target's logits at every draft position to verify it); the execution model
                     counts one row per sequence. Priced as the roofline prices the LM head GEMM
                     (gemm.LinearCost, tiled where the GPU's factors tile): g(S + X) - g(S).
    draft            proposing the drafts, by method:
      draft-model    a smaller model of the catalog, priced by the roofline on its own ModelSpec
                     (same GPU, TP and factors): d sequential decode passes over the sequences,
                     pass j at context c + j (the draft keeps its own KV of the same tokens).
      eagle, mtp     one decoder layer of the target plus the LM head, per draft pass: an
                     EAGLE-3 head is one transformer layer fed by the target's hidden states
                     (Li et al., "EAGLE-3", 2025); DeepSeek-V3's MTP module is one transformer
                     block sharing the embedding and output head (DeepSeek-V3 technical report,
                     2024, section 2.2). Priced as a copy of the target with one layer (an MoE
                     target's layer keeps its experts; EAGLE-3's smaller draft vocabulary is not
                     modelled: the target's vocab is priced, an upper bound).
      ngram          host work only, no GPU: prompt-lookup matching over each sequence's tokens.
                     NGRAM_HOST_S_PER_SEQ is an **estimate**, not a measurement.

A model draft (draft-model, eagle, mtp) also reads every prompt chunk the step computes: vLLM V1's
proposer runs its first pass over all the tokens the target computed in the step, prompt chunks
included, which writes the draft's KV of the prompt (v1/spec_decode/eagle.py
EagleProposer.propose at 008603a3: `num_tokens = target_token_ids.shape[0]`, one forward over
them, logits only at each request's last token; the draft-model proposer shares it). So a step
with prompt chunks adds the draft's forward over those chunks to its first pass, whether or not a
decode in it verifies drafts; this is also what a disaggregated prefill replica computes for the
draft KV it sends (cluster/link.py). The n-gram proposer has no prompt pass.

Each draft pass is a full forward of the draft (its GEMM launches and fixed costs included) with
no host overhead of its own: the passes run inside the engine step whose host work the execution
model already counts. A draft pass's cost sits in the step whose verification uses its drafts
(vLLM proposes them at the end of the step before; in a steady stream the total is the same).
The drafter's weights and KV come out of the KV capacity (kv/block_budget.py).

The same idea in other layers: simulator/policies/speculative.py schedules and verifies the
drafts, simulator/scenario/speculative.py reads the settings.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from pagesim.simulator.core.config import ExecutionConfig, SpecMethod, SpeculativeConfig
from pagesim.simulator.core.draft import draft_model_spec
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan, step_cost
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel

# An estimate (no measurement at hand): vLLM's n-gram proposer scans each request's token
# history on the CPU (numba-compiled KMP over at most the last few thousand tokens).
NGRAM_HOST_S_PER_SEQ = 20e-6


class DraftPricer(Protocol):
    label: str
    reads_prompts: bool  # its first pass covers the step's prompt chunks (module docstring)

    def price(
        self, drafts: list[tuple[int, int]], prompts: list[tuple[int, int]]
    ) -> tuple[float, float, float]:
        """(seconds, FLOPs, HBM bytes) of proposing `drafts`: (context before the drafts,
        number of drafts) per decoding sequence, beside `prompts`: (chunk tokens, context after
        the chunk) per prompt chunk of the step, which a model draft's first pass reads."""
        ...


class ModelDraft:
    """A draft priced by the roofline: d sequential one-token passes over the sequences, the
    first of them also over the step's prompt chunks."""

    reads_prompts = True

    def __init__(self, roofline: RooflineModel, label: str) -> None:
        self.roofline = roofline
        self.label = label

    def price(
        self, drafts: list[tuple[int, int]], prompts: list[tuple[int, int]]
    ) -> tuple[float, float, float]:
        seconds = flops = moved = 0.0
        num_passes = max(max((d for _, d in drafts), default=0), 1 if prompts else 0)
        for j in range(num_passes):
            work = [
                SeqWork(i, i, 1, context + j + 1, False)
                for i, (context, d) in enumerate(drafts)
                if d > j
            ]
            if j == 0:
                first = len(drafts)
                work += [
                    SeqWork(first + i, first + i, num_new, context, True)
                    for i, (num_new, context) in enumerate(prompts)
                ]
            cost = self.roofline.price(StepPlan.build(work))
            seconds += cost.compute_s
            flops += cost.flops
            moved += cost.bytes_moved
        return seconds, flops, moved


class HostDraft:
    """A draft proposed on the host (n-gram): a fixed time per sequence, no GPU work, no prompt
    pass."""

    reads_prompts = False

    def __init__(self, s_per_seq: float, label: str) -> None:
        self.s_per_seq = s_per_seq
        self.label = label

    def price(
        self, drafts: list[tuple[int, int]], prompts: list[tuple[int, int]]
    ) -> tuple[float, float, float]:
        return sum(1 for _, d in drafts if d) * self.s_per_seq, 0.0, 0.0


class SpeculativeModel:
    """An execution model that prices a step's verification through `base` and adds the
    extra LM-head rows and the draft (module docstring)."""

    def __init__(
        self, base: ExecutionModel, target: RooflineModel, draft: DraftPricer, method: SpecMethod
    ) -> None:
        self.base = base
        self.name = base.name
        self.draft = draft
        self.method = method
        self._lm_head = target._linear  # the roofline's LM head GEMM (gemm.LinearCost)
        self._lm_flops_per_row = target.lm_head_flops_per_seq
        self._lm_bytes_per_row = target.lm_head_act_bytes_per_seq
        self.draft_s = 0.0  # run totals of the parts added here (the summary reports them)
        self.verify_lm_head_s = 0.0

    def _lm_head_s(self, rows: int) -> float:
        return self._lm_head.lm_head_s(rows)

    def _adds_nothing(self, plan: StepPlan) -> bool:
        """No decode in `plan` verifies a draft and the draft reads none of its prompt chunks."""
        return plan.num_decode_tokens == plan.num_decode_seqs and (
            not plan.num_prefill_seqs or not self.draft.reads_prompts
        )

    def parts(self, plan: StepPlan) -> tuple[float, float, float, float]:
        """(draft_s, verify_lm_head_s, extra FLOPs, extra HBM bytes) of `plan`."""
        if self._adds_nothing(plan):
            return 0.0, 0.0, 0.0, 0.0
        drafts = [
            (context - num_new + 1, num_new - 1)
            for _, _, num_new, context, is_prefill in plan.work
            if not is_prefill and num_new > 1
        ]
        prompts = [
            (num_new, context)
            for _, _, num_new, context, is_prefill in plan.work
            if is_prefill and self.draft.reads_prompts
        ]
        rows = plan.num_decode_tokens - plan.num_decode_seqs
        seqs = plan.num_seqs
        lm_s = self._lm_head_s(seqs + rows) - self._lm_head_s(seqs) if rows else 0.0
        draft_s, draft_flops, draft_bytes = self.draft.price(drafts, prompts)
        flops = draft_flops + rows * self._lm_flops_per_row
        return draft_s, lm_s, flops, draft_bytes + rows * self._lm_bytes_per_row

    def price(self, plan: StepPlan) -> StepCost:
        cost = self.base.price(plan)
        if self._adds_nothing(plan):
            return cost
        draft_s, lm_s, flops, moved = self.parts(plan)
        self.draft_s += draft_s
        self.verify_lm_head_s += lm_s
        return step_cost(
            cost.compute_s + draft_s + lm_s,
            cost.swap_s,
            cost.copy_s,
            cost.flops + flops,
            cost.bytes_moved + moved,
        )

    def breakdown(self, plan: StepPlan) -> dict[str, float]:
        """The step's compute in three parts: the verification as the base model prices the
        plan (the (d + 1)-token chunks, prefills beside them), its extra LM-head rows, and the
        draft."""
        draft_s, lm_s, _, _ = self.parts(plan)
        return {
            "verify": self.base.price(plan).compute_s,
            "verify_lm_head": lm_s,
            "draft": draft_s,
        }

    def describe(self) -> dict[str, object]:
        described = dict(self.base.describe())
        described["speculative"] = {
            "method": self.method.value,
            "draft": self.draft.label,
            "draft_s_total": self.draft_s,
            "verify_lm_head_s_total": self.verify_lm_head_s,
        }
        return described


def draft_pricer(
    spec: SpeculativeConfig, target: RooflineModel, config: ExecutionConfig
) -> DraftPricer:
    """The draft's pricer for `spec`'s method, on the target's GPU, TP and factors."""
    if spec.method is SpecMethod.NGRAM:
        return HostDraft(
            NGRAM_HOST_S_PER_SEQ,
            f"n-gram on the host: {NGRAM_HOST_S_PER_SEQ * 1e6:g} us per sequence (estimate)",
        )
    draft_model = draft_model_spec(spec, target.model)
    assert draft_model is not None
    if spec.method is SpecMethod.DRAFT_MODEL:
        label = f"draft model {draft_model.name} (roofline)"
    else:
        label = (
            f"{spec.method.value}: one decoder layer of {target.model.name} + LM head (roofline)"
        )
    no_host = replace(config, step_overhead_s=0.0, step_overhead_s_per_seq=0.0)
    roofline = RooflineModel(
        draft_model,
        target.gpu,
        no_host,
        target.kv_dtype,
        target.tensor_parallel,
        target.block_size,
    )
    return ModelDraft(roofline, label)


def speculative_model(
    base: ExecutionModel, target: RooflineModel, spec: SpeculativeConfig, config: ExecutionConfig
) -> SpeculativeModel:
    return SpeculativeModel(base, target, draft_pricer(spec, target, config), spec.method)
