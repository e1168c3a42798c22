"""The model a speculative-decoding method drafts with, as a ModelSpec: what the execution model
prices for the draft passes and what the KV capacity sets aside for the drafter.

    draft-model   the catalog model named by `draft_model`
    eagle, mtp    one decoder layer of the target (an EAGLE-3 head: one transformer layer on the
                  target's hidden states, Li et al. 2025; DeepSeek-V3's MTP module: one
                  transformer block sharing the embedding and output head, technical report
                  section 2.2). An MoE target's layer keeps its experts. Its parameters are that
                  one layer's: the embedding and LM head are the target's (EAGLE-3's own smaller
                  draft-vocabulary head and its fusion layer are left out, a few percent of a
                  layer on the catalog's models).
    ngram         none: drafts come from the request's own tokens, on the host
"""

from __future__ import annotations

from dataclasses import replace

from pagesim.simulator.core.catalog import MODELS, ModelSpec
from pagesim.simulator.core.config import SpecMethod, SpeculativeConfig
from pagesim.simulator.core.errors import InputError


def draft_refusal(spec: SpeculativeConfig, target: ModelSpec) -> tuple[str, str] | None:
    """(the [systems.speculative] key, why) when `spec` cannot draft for `target`, or None.

    - A draft model shares the target's vocabulary: its tokens are verified by the target's
      (vLLM v0.34.0 vllm/config/speculative.py verify_equal_vocab_size_if_draft_model refuses
      a draft of another vocab_size).
    - A draft model keeps KV for every token in every layer: its KV sits in the target's
      blocks (kv/block_budget.py), which holds no window of its own.
    - "mtp" drafts with the module a checkpoint ships (DeepSeek-V3, Qwen3-Next: vLLM maps only
      such model types to an MTP drafter); a model without one has nothing to draft with.
    """
    if spec.method is SpecMethod.MTP and not target.has_mtp:
        return (
            "method",
            f"'mtp' drafts with the multi-token-prediction module a checkpoint ships "
            f"(DeepSeek-V3, Qwen3-Next); model {target.name!r} ships none: use 'eagle' (a "
            "trained draft head), 'draft-model' or 'ngram'",
        )
    if spec.method is not SpecMethod.DRAFT_MODEL or spec.draft_model is None:
        return None
    draft = MODELS[spec.draft_model]
    if draft.vocab_size != target.vocab_size:
        same = [
            name
            for name, m in MODELS.items()
            if m.vocab_size == target.vocab_size and name != target.name
        ]
        return (
            "draft_model",
            f"{draft.name!r} has a vocabulary of {draft.vocab_size:,} tokens, the target "
            f"{target.name!r} {target.vocab_size:,}; a draft model must share the target's "
            f"vocabulary (vLLM refuses others); catalog models with it: "
            f"{', '.join(same) or 'none'}",
        )
    if draft.layer_kinds:
        return (
            "draft_model",
            f"{draft.name!r} has sliding-window or state layers; a draft model's KV is kept "
            "for every token beside the target's, which pagesim models for full-attention "
            "drafts only: use a draft of full-attention layers, or method 'eagle'",
        )
    return None


def draft_model_spec(spec: SpeculativeConfig, target: ModelSpec) -> ModelSpec | None:
    if spec.method is SpecMethod.NGRAM:
        return None
    refusal = draft_refusal(spec, target)
    if refusal is not None:
        raise InputError(f"speculative.{refusal[0]}: {refusal[1]}")
    if spec.method is SpecMethod.DRAFT_MODEL:
        assert spec.draft_model is not None, "the scenario requires draft_model"
        return MODELS[spec.draft_model]
    moe = None if target.moe is None else replace(target.moe, num_dense_layers=0)
    layer = replace(
        target,
        name=f"{target.name} {spec.method.value} layer",
        num_layers=1,
        layer_kinds=(),
        moe=moe,
    )
    return replace(layer, num_params=layer.layer_params(0))


def model_draft_key(spec: SpeculativeConfig | None) -> tuple[str, str | None] | None:
    """What of a drafter has KV of its own (its method and draft model), None for n-gram or no
    speculation: the part a disaggregated fleet's prefill and decode sides must agree on."""
    if spec is None or spec.method is SpecMethod.NGRAM:
        return None
    return spec.method.value, spec.draft_model
