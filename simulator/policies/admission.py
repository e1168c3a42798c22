"""Admitting a waiting request (or restarting a preempted one) onto the paged KV cache: its prefix
hit, the blocks of its first step, and what the engine's release adds (core/vllm_eras.py).

    V0 with a prefix cache    every prompt block counts against the free blocks, cached ones
                              too (vLLM 0.5.4 core/block_manager_v1.py can_allocate)
    V1 from v0.19.0           `scheduler_reserve_full_isl` (on by default): admitted only if
                              blocks for the whole prompt (prompt + generated tokens for a
                              preempted request), after its prefix hit, fit in the free blocks
                              less the watermark; else it stays waiting and the waiting loop
                              stops (v1/core/kv_cache_manager.py allocate_slots with
                              `full_sequence_must_fit`, v0.33.0/v0.34.0; v0.19.0's
                              `can_fit_full_sequence`). No lookahead or draft slot is counted.
    V1 from v0.23.0           a speculating system allocates the lookahead slots of the first
                              step too (before: only for a request with computed tokens, i.e.
                              a prompt whose KV arrived from a prefill replica)
    V1 from v0.25.0           speculative decoding: a request with one token left to compute (a
                              prompt all but fully cached, or whose KV arrived) admitted beside
                              decoding requests (from v0.30.0 also alone, having computed
                              tokens), with no running prompt chunk in the step, schedules
                              1 + k tokens: k placeholder drafts, always rejected, so the batch
                              stays a uniform decode for its CUDA graph; if 1 + k do not fit the
                              budget it is not admitted this step (the caller decides when the
                              step allows it: `pad_to`); pagesim follows v0.30.0's form
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pagesim.simulator.core.plan import BlockCopy
from pagesim.simulator.core.request import RUNNING
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.paged_state import PagedState
from pagesim.simulator.policies.seq_group import SeqGroup, StepBuilder, blocks_for


def admit(
    state: PagedState,
    group: SeqGroup,
    max_new_tokens: int,
    step: StepBuilder,
    now_s: float,
    *,
    pad_to: int = 0,
) -> int:
    """Try to start (or restart) a waiting group computing up to `max_new_tokens` prompt tokens
    (or `pad_to` tokens, one of them its last, under the padding rule above).

    Returns the tokens scheduled, 0 if they or their blocks do not fit (nothing changes then).
    """
    if group.is_remote:
        return _admit_remote(state, group, max_new_tokens, step, now_s, pad_to)
    seq_id = group.seq_ids[0]
    hashes = group.hashers[0].block_hashes() if group.hashers is not None else ()
    kv = state.kv
    if (
        hashes
        and state.pieces.admission_counts_cached_blocks
        and kv.num_free_blocks - blocks_for(group.target, state.block_size) < state.reserve()
    ):
        return 0
    checked: bool | None = None  # a hybrid cache's checks: the whole way
    if isinstance(kv, PagedKVCache):
        if hashes:
            checked = _checked_before_adding(state, kv, group, hashes, max_new_tokens, pad_to)
        else:  # (most admissions: `_checked_before_adding` of no hit, inlined)
            checked = fits_after_hits(state, group, 0, max_new_tokens, pad_to)
            if not checked:
                kv.note_prefix_query(group.target)  # `refuse_hits` of no hit
        if checked is False:
            return 0  # refused, with what adding and freeing it again leaves done
    # (Every admission: `group.final_len`, an unpadded `_first_step` and `state.reserve()`
    # inlined.)
    request = group.request
    target = group.target
    final_len = request.prompt_len + request.output_len - 1
    num_hit = kv.add_seq(seq_id, hashes, num_prompt_tokens=target, final_len=final_len)
    if pad_to:
        first = _first_step(state, target - num_hit, num_hit, max_new_tokens, pad_to)
    else:
        num_left = target - num_hit
        first = (num_left if num_left < max_new_tokens else max_new_tokens), True
    if first is None or (checked is None and not _full_prompt_fits(state, group)):
        kv.free(seq_id)
        return 0
    num_new, is_prefill = first
    slots = num_new
    if state.spec is not None and state.rules is not None and state.rules.lookahead_at_admission:
        slots += _lookahead(state, num_hit + num_new)  # (0 without a drafter)
    # Checked to fit with the watermark kept (`fits_after_hits`, the same count), the
    # allocation asks no reserve: `allocate_slots`' one-sequence case, without its general loop.
    reserve = 0 if checked else state.watermark_blocks if state.running else 0
    copies = kv.allocate_slots(group.seq_ids, slots, reserve)
    if copies is None:
        assert checked is None, "counted as fitting before the sequence was added"
        kv.free(seq_id)
        return 0
    if state.knobs.enable_prefix_cache:
        state.prefix_stats.record(request, target, num_hit)
    group.num_computed = num_hit
    request.num_cached_tokens += num_hit
    if group.num_dropped > num_hit:
        request.num_recomputed_tokens += group.num_dropped - num_hit
    group.num_dropped = 0
    request.transition(RUNNING, now_s)
    if group.fan_out is not None:
        group.fan_out.child_admitted(now_s)
    _start(state, group, num_new, is_prefill, copies, step)
    return num_new


def _admit_remote(
    state: PagedState,
    group: SeqGroup,
    max_new_tokens: int,
    step: StepBuilder,
    now_s: float,
    pad_to: int,
) -> int:
    """Start a group whose prompt KV arrived (all but its last token computed, its prompt's
    slots allocated before the transfer): it computes the last prompt token, whose logits give
    the first output token, as vLLM V1 does after WAITING_FOR_REMOTE_KVS. Having computed
    tokens, it is allocated its lookahead slots in every release (v0.11.0 too)."""
    num_computed = group.num_computed
    first = _first_step(state, group.target - num_computed, num_computed, max_new_tokens, pad_to)
    if first is None:
        return 0
    num_new, is_prefill = first
    seq_id = group.seq_ids[0]
    scheduled = group.num_computed + num_new
    slots = max(0, scheduled + _lookahead(state, scheduled) - state.kv.num_tokens(seq_id))
    copies = () if not slots else state.kv.allocate_slots(group.seq_ids, slots, state.reserve())
    if copies is None:
        return 0
    group.is_remote = False
    del state.landed[group.request.request_id]
    group.request.transition(RUNNING, now_s)
    _start(state, group, num_new, is_prefill, copies, step)
    return num_new


def _first_step(
    state: PagedState, num_left: int, num_computed: int, max_new_tokens: int, pad_to: int
) -> tuple[int, bool] | None:
    """(tokens, is_prefill) of the admission's step: its next prompt chunk, or `pad_to` tokens
    (a decode-like verification of placeholder drafts) for a request with one token left while
    the model's length leaves room for the padded tokens and the sampled one; None when the
    padded tokens do not fit `max_new_tokens` (vLLM: "Prefer to not schedule than schedule
    un-padded")."""
    if pad_to and num_left == 1 and num_computed + pad_to + 1 <= state.max_seq_len:
        return None if pad_to > max_new_tokens else (pad_to, False)
    return min(num_left, max_new_tokens), True


def _checked_before_adding(
    state: PagedState,
    kv: PagedKVCache,
    group: SeqGroup,
    hashes: Sequence[int],
    max_new_tokens: int,
    pad_to: int,
) -> bool | None:
    """Whether `admit`'s checks pass for a group with block `hashes`, found without adding
    the group's sequence (False: refused, with what adding and freeing it again leaves done), or
    None where that is not sure (a prefix hit on a block in use shares it): then `admit` goes
    the whole way. Most steps of a loaded replica try a waiting head that does not fit: a
    hashless one (`admit` inlines its case) leaves only its lookup counted, one whose prefix
    hits are all free blocks (a preempted request's own) also those blocks requeued at the free
    order's tail (`PagedKVCache.refuse_hits`)."""
    hits = kv.prefix_hits(hashes, group.target)
    if hits and not kv.are_free(hits):
        return None
    if fits_after_hits(state, group, len(hits), max_new_tokens, pad_to):
        return True
    kv.refuse_hits(hits, group.target)
    return False


@dataclass(frozen=True, slots=True)
class RefusedHits:
    """A waiting head with block hashes that `admit` refuses for its blocks, counting
    `query_tokens` looked up and its `num_hit_blocks` free prefix hits (`refused_with_hits`)."""

    query_tokens: int
    num_hit_blocks: int


def refused_with_hits(
    state: PagedState, kv: PagedKVCache, group: SeqGroup, max_new_tokens: int
) -> RefusedHits | None:
    """`admit`'s refusal of a group with block hashes, found without changing anything, where
    it stays a refusal while blocks are only taken (a run of pure steps beside it:
    fastpath/decode_window.py); None otherwise. Its hits must be free blocks at the tail of the
    free order as `refuse_hits` leaves them, each its hash's only holder
    (`PagedKVCache.ends_free_order`): taking blocks then reaches them last, the last hit first,
    and each one taken shortens the hits by one, so every later refusal requeues blocks
    already at the tail in that order (nothing moves) and counts the hits left. Fewer free
    blocks never make it fit: `fits_after_hits` falls with the free blocks, and a hit taken
    costs one free block and one block of need. Not for V0's count of cached blocks."""
    if state.pieces.admission_counts_cached_blocks:
        return None
    assert group.hashers is not None
    hits = kv.prefix_hits(group.hashers[0].block_hashes(), group.target)
    if hits and not kv.are_free(hits):
        return None
    if fits_after_hits(state, group, len(hits), max_new_tokens, 0):
        return None  # admitted next (the order of the free blocks not asked)
    if hits and not kv.ends_free_order(hits):
        return None
    return RefusedHits(group.target, len(hits))


def fits_after_hits(
    state: PagedState, group: SeqGroup, num_hit_blocks: int, max_new_tokens: int, pad_to: int
) -> bool:
    """Whether `admit` gets past its checks for a group whose prefix hits are `num_hit_blocks`
    free blocks (which the hits take out of the free ones): its first step, the whole prompt's
    blocks and the first step's allocation, counted without registering the sequence."""
    # Asked of most waiting heads of most steps: `_first_step` (unpadded), `blocks_for` and
    # `state.reserve()` inlined.
    bs = state.block_size
    num_hit = num_hit_blocks * bs
    target = group.target
    if pad_to:
        first = _first_step(state, target - num_hit, num_hit, max_new_tokens, pad_to)
        if first is None:
            return False
        slots = first[0]
    else:
        slots = target - num_hit
        if slots > max_new_tokens:
            slots = max_new_tokens
    free = state.kv.num_free_blocks - num_hit_blocks
    reserve = state.watermark_blocks if state.running else 0
    if state.system.scheduler_reserve_full_isl:  # `_full_prompt_fits`, the hits held
        needed = -(-target // bs) - num_hit_blocks
        if (needed if needed > 0 else 0) + reserve > free:
            return False
    if state.spec is not None and state.rules is not None and state.rules.lookahead_at_admission:
        slots += _lookahead(state, num_hit + slots)  # (0 without a drafter)
    # `allocate_slots` of a table of full blocks: no copy, the blocks past them
    return free - (-(-(num_hit + slots) // bs) - num_hit_blocks) >= reserve


def _full_prompt_fits(state: PagedState, group: SeqGroup) -> bool:
    """`scheduler_reserve_full_isl`: blocks for the group's whole prompt (its `target`) fit in
    the free blocks less the watermark, its prefix hit already held (True when the system does
    not reserve)."""
    if not state.system.scheduler_reserve_full_isl:
        return True
    knobs = state.knobs
    max_chunk = min(knobs.max_num_batched_tokens, state.system.max_prefill_chunk or 1 << 62)
    needed = state.kv.num_blocks_to_hold(group.seq_ids[0], group.target, max_chunk)
    return needed + state.reserve() <= state.kv.num_free_blocks


def _lookahead(state: PagedState, num_scheduled: int) -> int:
    """Slots past `num_scheduled` a speculating request's blocks must hold (its drafter's
    lookahead, up to the model's length); 0 without speculative decoding."""
    spec = state.spec
    if spec is None:
        return 0
    return max(0, min(num_scheduled + spec.lookahead, state.max_seq_len) - num_scheduled)


def _start(
    state: PagedState,
    group: SeqGroup,
    num_new: int,
    is_prefill: bool,
    copies: tuple[BlockCopy, ...],
    step: StepBuilder,
) -> None:
    state.running.append(group)
    state.num_running_seqs += len(group.seq_ids)
    state.add_to_step(step, group, num_new, is_prefill, copies)
    if not is_prefill:  # padded: its drafts are placeholders (SpecDecoder.verify_placeholders)
        assert state.spec is not None
        state.spec.padded.add(group.request.request_id)
