"""Typed messages between the scheduler, the execution model and the recorder.

The scheduler hands the engine one frozen `StepPlan` per iteration; the execution model prices it
(`StepCost`); the recorder records both. No tuples of magic positions, no sentinel values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import partial
from operator import itemgetter
from typing import NamedTuple


class PreemptionMode(Enum):
    """How a preempted request gives back its KV blocks."""

    SWAP = "swap"  # copy its blocks to CPU memory over the host link, copy back later
    RECOMPUTE = "recompute"  # drop its blocks, re-prefill prompt + generated tokens later


class SeqWork(NamedTuple):
    """One sequence's work in a step. A NamedTuple: built once per sequence per step (hot path)."""

    request_id: int
    seq_id: int
    num_new_tokens: int  # tokens computed this step: a prefill chunk, or 1 when decoding
    context_len: int  # tokens in this sequence's KV after the step, the new ones included
    is_prefill: bool  # computing prompt tokens (or recomputing prompt + generated after preemption)


# SeqWork(...) runs a Python-level __new__; this builds the same NamedTuple in C from one tuple of
# its five fields, for the schedulers' hot paths (a SeqWork per sequence per step).
seq_work_of = partial(tuple.__new__, SeqWork)


class Preemption(NamedTuple):
    request_id: int
    mode: PreemptionMode


class BlockCopy(NamedTuple):
    """A copy-on-write copy of one physical KV block before a write into a shared block."""

    src_block: int
    dst_block: int


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one engine iteration does. Its totals are fields, computed once by whoever builds
    the plan (`build`; policies/seq_group.py `StepBuilder.plan`, which keeps them as it goes; the
    decode fast path's grouped plan), so that the pricer and the recorder read them rather than
    call for them every step."""

    work: tuple[SeqWork, ...]
    preemptions: tuple[Preemption, ...]
    num_swap_out_blocks: int
    num_swap_in_blocks: int
    copies: tuple[BlockCopy, ...]
    num_prefill_tokens: int
    num_decode_tokens: int
    num_prefill_seqs: int
    num_decode_seqs: int
    num_requests: int  # requests computing in the step: the batch that ran
    # Sequences computed as padding, making no token (static batching's members already done):
    # slot utilization counts the others as useful.
    num_padding_seqs: int
    num_context_tokens: int  # KV tokens of all sequences after the step: attention reads
    # The entries listed one by one: all of `work` here (a grouped plan of the decode fast path,
    # simulator/fastpath/grouped_plan.py, sums its members instead). Every prefill is listed.
    listed_work: tuple[SeqWork, ...]
    num_tokens: int  # prefill + decode tokens
    num_seqs: int  # prefill + decode sequences (a grouped plan builds `work` lazily)
    # Swaps or copies a KV block: the rare step whose transfers an execution model prices
    # (`execution.model.TransferPricer`).
    moves_blocks: bool
    is_empty: bool  # nothing to compute and nothing to move: the engine idles until an arrival

    @classmethod
    def build(
        cls,
        work: tuple[SeqWork, ...] | list[SeqWork],
        preemptions: tuple[Preemption, ...] | list[Preemption] = (),
        num_swap_out_blocks: int = 0,
        num_swap_in_blocks: int = 0,
        copies: tuple[BlockCopy, ...] | list[BlockCopy] = (),
        num_padding_seqs: int = 0,
    ) -> StepPlan:
        prefill_tokens = decode_tokens = prefill_seqs = 0
        for item in work:
            if item.is_prefill:
                prefill_tokens += item.num_new_tokens
                prefill_seqs += 1
            else:
                decode_tokens += item.num_new_tokens
        work = tuple(work)
        copies = tuple(copies)
        num_seqs = len(work)
        return cls(
            work,
            tuple(preemptions),
            num_swap_out_blocks,
            num_swap_in_blocks,
            copies,
            prefill_tokens,
            decode_tokens,
            prefill_seqs,
            num_seqs - prefill_seqs,
            len({item.request_id for item in work}),
            num_padding_seqs,
            sum(map(_CONTEXT_LEN, work)),
            work,
            prefill_tokens + decode_tokens,
            num_seqs,
            bool(copies or num_swap_out_blocks or num_swap_in_blocks),
            not (num_seqs or num_swap_out_blocks or num_swap_in_blocks),
        )


_CONTEXT_LEN = itemgetter(3)  # SeqWork.context_len


class StepCost(NamedTuple):
    """What a step costs. Seconds of simulated time; FLOPs and bytes for MFU / MBU.

    `duration_s` is a field, not a property, so that the engine and the recorder read it every
    step without a call: build one with `step_cost` (or, on a pricer's hot path, `step_cost_of`
    with the sum spelled `compute_s + swap_s + copy_s`, in that order)."""

    compute_s: float  # model forward (linear layers, attention, overhead, all-reduce)
    swap_s: float  # KV blocks moved over the host link (swap in + out), serialized on one link
    copy_s: float  # copy-on-write block copies on the GPU
    flops: float  # model FLOPs of the step (for MFU)
    bytes_moved: float  # HBM bytes of the step: weights + KV read/written + activations (for MBU)
    duration_s: float  # compute_s + swap_s + copy_s: the step's simulated time


# Like `seq_work_of`: a StepCost from one tuple of its six fields, built in C (one per step).
step_cost_of = partial(tuple.__new__, StepCost)


def step_cost(
    compute_s: float, swap_s: float, copy_s: float, flops: float, bytes_moved: float
) -> StepCost:
    """A StepCost with its duration, the sum every reader takes as the step's time."""
    return step_cost_of(
        (compute_s, swap_s, copy_s, flops, bytes_moved, compute_s + swap_s + copy_s)
    )
