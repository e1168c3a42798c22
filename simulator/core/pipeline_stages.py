"""Pipeline parallelism: the layers each stage holds, and each stage as a model of its own.

A system with `pipeline_parallel = P` splits the model's L decoder layers into P stages, each run
by its own tensor-parallel group of `tensor_parallel` GPUs. The split is vLLM's
(vllm/distributed/utils.py `get_pp_indices`, v0.34.0):

    every stage gets L // P layers; the r = L % P layers left over go one each to the stages
    just before the last, walking back from it (stages P-2, P-3, ..., P-1-r): the last stage
    also holds the final norm and the LM head, and with r <= P - 2 the first stage (which holds
    the embedding) is spared as well.

e.g. 126 layers over 4 stages: [31, 32, 32, 31]; 10 over 4: [2, 3, 3, 2]; 11 over 4: [3, 3, 3, 2].
vLLM's environment variable VLLM_PP_LAYER_PARTITION ("31,32,32,31") replaces the rule with an
explicit list, which must have P entries summing to L: pagesim's `pipeline_layer_partition`.

A stage is priced, and its KV cache sized, as a model of its own (`stage_model`): its layers
(their kinds and dense MLPs as in the whole model), the embedding on the first stage, the LM
head on the last (with tied embeddings the last stage holds its own copy of the embedding
matrix as the head: vLLM builds the head on the last rank and loads the shared weights into it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pagesim.simulator.core.catalog import ModelSpec


def stage_layer_counts(
    num_layers: int, pipeline_parallel: int, partition: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Decoder layers per stage, first stage first (vLLM's `get_pp_indices`, v0.34.0; see the
    module docstring). `partition` is VLLM_PP_LAYER_PARTITION's list, taken as it is (the
    scenario reader checks it has P entries summing to L)."""
    if partition is not None:
        return tuple(partition)
    counts = [num_layers // pipeline_parallel] * pipeline_parallel
    for i in range(2, num_layers % pipeline_parallel + 2):
        counts[-i] += 1
    return tuple(counts)


def stage_ranges(counts: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """(first layer, one past the last) of each stage."""
    ranges = []
    start = 0
    for count in counts:
        ranges.append((start, start + count))
        start += count
    return tuple(ranges)


def embedding_params(model: ModelSpec) -> int:
    """Parameters of one vocabulary matrix (the embedding, or the untied LM head)."""
    return model.vocab_size * model.hidden_size


def stage_model(model: ModelSpec, counts: Sequence[int], index: int) -> ModelSpec:
    """Stage `index` of `model` split as `counts`: its layers, and the ends it holds. Its name is
    the model's with the stage's layer range, for reports."""
    start, end = stage_ranges(counts)[index]
    moe = model.moe
    if moe is not None:  # the first `num_dense_layers` layers keep a dense MLP
        moe = replace(moe, num_dense_layers=max(0, min(end, moe.num_dense_layers) - start))
    kinds = model.layer_kinds[start:end] if model.layer_kinds else ()
    stage = replace(model, num_layers=end - start, moe=moe, layer_kinds=kinds)
    # The published count's decoder-layer part, shared out by the layers' shapes (which
    # weigh a dense MLP and a mixture of experts as they are).
    vocab = embedding_params(model)
    ends = vocab if model.tied_embeddings else 2 * vocab
    own_ends = vocab if stage.tied_embeddings else 2 * vocab  # count_params' embeddings
    layer_share = (stage.count_params() - own_ends) / (model.count_params() - ends)
    params = round((model.num_params - ends) * layer_share)
    params += vocab if index == 0 else 0
    params += vocab if index == len(counts) - 1 else 0
    return replace(stage, name=f"{model.name} layers {start}-{end - 1}", num_params=params)


def stage_models(
    model: ModelSpec, pipeline_parallel: int, partition: Sequence[int] | None = None
) -> tuple[ModelSpec, ...]:
    """Every stage of `model` as its own model, first stage first."""
    counts = stage_layer_counts(model.num_layers, pipeline_parallel, partition)
    return tuple(stage_model(model, counts, i) for i in range(pipeline_parallel))
