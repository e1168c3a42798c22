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


def draft_model_spec(spec: SpeculativeConfig, target: ModelSpec) -> ModelSpec | None:
    if spec.method is SpecMethod.NGRAM:
        return None
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
