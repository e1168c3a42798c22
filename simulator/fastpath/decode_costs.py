"""The prices of a run of pure decode steps (decode_window.py), in turn.

A pure step decodes one token for each of its S sequences and nothing else: no prefill, no
swap, no copy, so `RooflineModel.price` depends only on S and the step's context tokens C. Over
a run S stays fixed and C grows by S a step; the terms that depend on S alone (linear layers,
LM head, all-reduce, host time) are computed once per S (`decode_terms`; a replica keeps them:
its runs come back to the same few batch sizes), and each step then costs a few float
operations, taken in `price`'s own order so that every value is the same to the last bit
(tests/simulator/fastpath/test_decode_costs.py compares the two on random steps). A run's clock
needs only each step's duration (`price_steps`); its FLOPs and bytes, which only the step's
record reads, are taken for the steps recorded (`step_work`, a chunk of runs at once in
run_rows.py), not for steps priced ahead that an arrival then cuts off.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from pagesim.simulator.core.plan import StepCost, step_cost_of
from pagesim.simulator.execution.roofline import RooflineModel


class DecodeTerms(NamedTuple):
    """A pure decode step's price terms that depend on its sequence count S alone, or on
    nothing (`price_steps`: each step then adds its context's terms)."""

    num_seqs: int
    before_attention_s: float  # linear layers, LM head, all-reduces
    fixed_s: float
    token_s: float
    host_serial_s: float  # the host's work the GPU waits for (overhead.py)
    host_overlapped_s: float  # and the part done while the GPU runs the step
    attention_seq_s: float  # attention's cost per call and per sequence
    attention_context_s: float  # per context token
    decode_extra_s: float  # per context token, where decode attention is compute-bound
    # `step_work`'s terms (run_rows.py reads these last six in this order)
    base_flops: float
    pair_flops: float
    mla_pair_flops: float
    mla_upproject_flops: float
    base_bytes: float
    kv_bytes_per_token: float


def price_steps(
    terms: DecodeTerms,
    first_context: int,
    num_steps: int,
    start: float,
    limit: float,
    ends: list[float],
    durations: list[float],
) -> int:
    """Time `num_steps` pure decode steps of a run back to back from `start`, the first at
    `first_context` context tokens C, each later one at S (`terms.num_seqs`) more, as a run's
    steps grow (`decode_terms` gives `terms`; a caller pricing many runs keeps them per
    sequence count, pure_runs.py): each step's end and duration go to `ends` and `durations`
    while its end stays <= `limit` (each step starts as the one before ends). Returns how many
    were timed.

    The duration is `RooflineModel.price`'s for the same step to the last bit: its compute
    time (a pure step swaps and copies nothing: `duration_s` adds 0.0 twice, which leaves a
    positive float as it is). The rest of its price (FLOPs and bytes, which only its record
    reads) is `step_work`'s, and `step_cost` puts the two together."""
    (
        num_seqs,
        before_attention,
        fixed_s,
        token_s,
        host_serial_s,
        host_overlapped_s,
        seq_s,
        context_s,
        extra_s,
        *_,
    ) = terms
    num_before = len(ends)
    add_end, add_duration = ends.append, durations.append
    # C as a float (exact: a token count is far below 2**53), which Python multiplies by a
    # float as it does the int, to the same bit, but in a specialised instruction
    context = float(first_context)
    growth = float(num_seqs)
    for _ in range(num_steps):
        attention_s = seq_s + context * context_s
        if extra_s:
            attention_s += context * extra_s
        gpu_s = before_attention + attention_s + fixed_s + token_s
        compute_s = (gpu_s if gpu_s > host_overlapped_s else host_overlapped_s) + host_serial_s
        start += compute_s  # the step's end, the next one's start
        if start > limit:
            break
        add_end(start)
        add_duration(compute_s)
        context += growth
    return len(ends) - num_before


class WorkTerms(Protocol):
    """The terms `step_work` reads: a DecodeTerms' (floats), or columns of them (arrays)."""

    @property
    def num_seqs(self) -> Any: ...
    @property
    def base_flops(self) -> Any: ...
    @property
    def pair_flops(self) -> Any: ...
    @property
    def mla_pair_flops(self) -> Any: ...
    @property
    def mla_upproject_flops(self) -> Any: ...
    @property
    def base_bytes(self) -> Any: ...
    @property
    def kv_bytes_per_token(self) -> Any: ...


def step_work(terms: WorkTerms, contexts: Any) -> tuple[Any, Any]:
    """A pure step's FLOPs and HBM bytes at C = `contexts` context tokens, as
    `RooflineModel.price` sums them (the same operations in its order): one step's, or many
    steps' at once (`contexts` an array, each term a float or an array of one a step, as
    run_rows.py expands whole runs). A model without MLA adds 0.0 for its terms (`decode_terms`),
    which leaves a positive float as it is, so no step branches."""
    flops = terms.base_flops + contexts * terms.pair_flops
    flops = flops + contexts * terms.mla_pair_flops
    flops = flops + terms.mla_upproject_flops
    bytes_moved = terms.base_bytes + (contexts + terms.num_seqs) * terms.kv_bytes_per_token + 0.0
    return flops, bytes_moved


def step_cost(terms: DecodeTerms, context: int, duration_s: float) -> StepCost:
    """The whole price of a pure step at `context` tokens that `price_steps` timed at
    `duration_s`: `RooflineModel.price`'s, every field."""
    flops, bytes_moved = step_work(terms, context)
    return step_cost_of((duration_s, 0.0, 0.0, flops, bytes_moved, duration_s))


def decode_terms(model: RooflineModel, s: int) -> DecodeTerms:
    """`price`'s terms that depend on the number of sequences S alone, in its order (a CUDA
    graph's padded size included: RooflineModel.graph_shape)."""
    if not model.prices_statelessly:
        raise ValueError("pure decode steps are priced ahead only without layer kinds or experts")
    is_mla = model.model.mla is not None
    priced, is_graphed = model.graph_shape(s, s, True)
    return DecodeTerms(
        s,
        model.linear_layers_s(priced)
        + model._linear.lm_head_s(s)
        + model.allreduce_step_s(priced, is_graphed),
        model._fixed_s,
        priced * model._per_token_s,
        model._host_serial_s + s * model._host_serial_per_seq_s,
        model._host_overlapped_s + s * model._host_overlapped_per_seq_s,
        model._attention_call_s + s * (model._attention_seq_s + model.block_s_per_seq),
        model._kv_s_per_token + model.block_s_per_context,
        model._decode_extra_s,
        s * model.linear_flops_per_token + s * model.lm_head_flops_per_seq,
        model.attention_flops_per_pair,
        # 0.0 without MLA: `step_work` adds these terms to every model's steps
        model.decode_flops_per_pair - model.attention_flops_per_pair if is_mla else 0.0,
        (0 - 0) * model.upproject_flops_per_cached_token if is_mla else 0.0,
        (
            model._weight_bytes
            + 0.0
            + s * model.linear_act_bytes_per_token
            + s * model.lm_head_act_bytes_per_seq
        ),
        model.kv_bytes_per_token,
    )
