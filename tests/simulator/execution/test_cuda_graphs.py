"""CUDA graphs as vLLM captures them (execution/cuda_graphs.py): the sizes of each era, which
steps replay one, and the padded batch a step is priced at."""

from __future__ import annotations

import pytest

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.plan import SeqWork, StepPlan
from pagesim.simulator.execution.cuda_graphs import cuda_graphs_for
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.vllm_runtime import VllmRuntime


def test_v0_6_4_captures_decode_batches_of_1_2_4_and_multiples_of_8_up_to_max_num_seqs() -> None:
    """vLLM v0.6.4 worker/model_runner.py: _BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + multiples of 8,
    up to _get_max_graph_batch_size(max_num_seqs) (max_num_seqs rounded up the same way);
    _use_captured_graph: decode-only steps; _get_graph_batch_size pads to the next size."""
    graphs = cuda_graphs_for(EngineEra.V0, 256, 2048)
    assert graphs.sizes == (1, 2, 4, *range(8, 257, 8)) and not graphs.by_tokens
    assert graphs.padded(3, 3, True) == 4
    assert graphs.padded(9, 9, True) == 16
    assert graphs.padded(256, 256, True) == 256
    assert graphs.padded(257, 257, True) is None  # beyond the largest: eager
    assert graphs.padded(100, 3, False) is None  # a prefill: eager
    assert cuda_graphs_for(EngineEra.V0, 100, 2048).largest == 104
    assert cuda_graphs_for(EngineEra.V0, 3, 2048).sizes == (1, 2, 4)


def test_v0_11_captures_steps_by_tokens_up_to_twice_max_num_seqs_or_512() -> None:
    """vLLM v0.11 config VllmConfig._set_cudagraph_sizes: [1, 2, 4] + multiples of 8 up to
    cuda_graph_sizes = min(2 x max_num_seqs, 512), none above max_num_batched_tokens; any step
    of that many tokens or fewer replays a (piecewise) graph, prefill chunks included."""
    graphs = cuda_graphs_for(EngineEra.V1, 1024, 8192)
    assert graphs.largest == 512 and graphs.by_tokens
    assert graphs.padded(300, 2, False) == 304  # a prefill chunk of 300 tokens
    assert graphs.padded(513, 1, False) is None
    assert cuda_graphs_for(EngineEra.V1, 64, 8192).largest == 128
    assert cuda_graphs_for(EngineEra.V1, 256, 100).largest == 96


def test_a_graphed_decode_batch_is_priced_at_its_padded_size() -> None:
    """A V0 decode of 9 sequences replays the graph of 16: its linear layers cost 16 tokens'
    worth; attention and the LM head (outside the graph) its 9 real sequences."""
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    runtime = VllmRuntime(EngineEra.V0, cuda_graphs_for(EngineEra.V0, 256, 2048), gpu.name)
    vllm = RooflineModel(model, gpu, ExecutionConfig(), runtime=runtime)
    plain = RooflineModel(model, gpu, ExecutionConfig())
    nine = StepPlan.build([SeqWork(i, i, 1, 500, False) for i in range(9)])
    sixteen = StepPlan.build([SeqWork(i, i, 1, 500, False) for i in range(16)])
    graphed = vllm.breakdown(nine)
    assert graphed["linear"] == pytest.approx(plain.breakdown(sixteen)["linear"], rel=1e-12)
    assert graphed["decode_attention"] == pytest.approx(plain.breakdown(nine)["decode_attention"])
    assert graphed["lm_head"] == pytest.approx(plain.breakdown(nine)["lm_head"])
    assert vllm.graph_shape(9, 9, True) == (16, True)
    assert vllm.graph_shape(300, 1, False) == (300, False)
