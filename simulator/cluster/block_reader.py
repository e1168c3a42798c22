"""Reading a block map's frame (simulator/metrics/block_frames.py) off a replica's scheduler: the
KV structures through their public queries, the owners off the policies' own records (a paged
request's `SeqGroup`, V1's samples' `FanOut`; a contiguous request's `Member`).

It lives with the replica, above both the policies and the metrics: the recorder
(simulator/metrics/block_map.py) is handed `read_frame` when the replica attaches it. Reading a
frame is O(blocks + sequences), the blocks copied at C speed; nothing here runs unless a block
map was asked for.
"""

from __future__ import annotations

from pagesim.simulator.core.request import Request
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.metrics.block_frames import (
    Frame,
    Owner,
    PagedFrame,
    Queues,
    RegionFrame,
    RegionState,
    RequestState,
    SeqState,
)
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.reserving import ReservingScheduler
from pagesim.simulator.policies.seq_group import SeqGroup

MAX_QUEUE_LABELS = 40  # queue members named per step; the rest are counted


def read_frame(scheduler: Scheduler) -> Frame:
    """The frame of a paged or a contiguous scheduler (TypeError for another)."""
    if isinstance(scheduler, PagedScheduler):
        return _paged_frame(scheduler)
    if isinstance(scheduler, ReservingScheduler):
        return _region_frame(scheduler)
    raise TypeError(f"a block map cannot read a {type(scheduler).__name__}")


def _request_state(request: Request, owner: Owner) -> RequestState:
    return RequestState(
        owner,
        request.status.value,
        request.num_cached_tokens,
        request.num_generated,
        request.num_preemptions,
        request.prompt_len,
        request.output_len,
        request.prefix_len,
        request.prefix_group,
    )


def _group_owners(group: SeqGroup) -> list[Owner]:
    """The owner of each of a group's sequences: a V1 sample (a child request) by its place
    among its parent's; a V0 request of several samples by the sequence's place in the group."""
    request = group.request
    if group.fan_out is not None:
        sample = group.fan_out.children.index(request) + 1
        return [Owner(group.fan_out.parent.request_id, sample)]
    if request.num_seqs > 1:
        return [Owner(request.request_id, i + 1) for i in range(len(group.seq_ids))]
    return [Owner(request.request_id)]


def _labels(owners: list[Owner], length: int) -> tuple[str, ...]:
    return tuple(o.label for o in owners[:MAX_QUEUE_LABELS]) + (
        (f"... {length - MAX_QUEUE_LABELS} more",) if length > MAX_QUEUE_LABELS else ()
    )


def _paged_frame(scheduler: PagedScheduler) -> PagedFrame:
    state, kv = scheduler.state, scheduler.kv
    if not isinstance(kv, PagedKVCache):
        raise TypeError("a block map draws one block table per sequence, not layer groups")
    owner_of: dict[int, tuple[Owner, int]] = {}
    requests: dict[int, RequestState] = {}
    for key, group in state.groups.items():
        owners = _group_owners(group)
        requests[key] = _request_state(group.request, owners[0])
        for seq_id, owner in zip(group.seq_ids, owners, strict=True):
            owner_of[seq_id] = (owner, key)
    seqs: dict[int, SeqState] = {}
    for seq_id in kv.seq_ids():
        owner, key = owner_of.get(seq_id, (Owner(None), -1))
        seqs[seq_id] = SeqState(
            seq_id,
            owner,
            key,
            kv.block_table(seq_id),
            kv.is_swapped(seq_id),
            kv.num_tokens(seq_id),
            kv.num_computed_tokens(seq_id),
        )
    ref_counts, hashes = kv.block_states()

    def first(group: SeqGroup) -> Owner:  # a queue holds requests: V0's samples as one
        owner = _group_owners(group)[0]
        return owner if group.fan_out is not None else Owner(owner.request_id)

    waiting = [first(g) for _, g in zip(range(MAX_QUEUE_LABELS), state.waiting, strict=False)]
    return PagedFrame(
        ref_counts,
        hashes,
        kv.cpu_ref_counts(),
        seqs,
        requests,
        Queues(
            _labels([first(g) for g in state.running], len(state.running)),
            _labels(waiting, len(state.waiting)),
            _labels([first(g) for g in state.swapped], len(state.swapped)),
            scheduler.queue_lengths(),
        ),
    )


def _region_frame(scheduler: ReservingScheduler) -> RegionFrame:
    kv = scheduler.kv
    regions: dict[int, RegionState] = {}
    requests: dict[int, RequestState] = {}
    for key, member in scheduler.members.items():
        request = member.request
        several = request.num_seqs > 1
        for i, seq_id in enumerate(member.seq_ids):
            owner = Owner(key, i + 1 if several else None)
            offset, held = kv.region(seq_id)
            regions[seq_id] = RegionState(
                seq_id,
                owner,
                offset,
                held,
                kv.asked_slots(seq_id),
                kv.num_computed_tokens(seq_id),
                request.total_len - 1,  # its last token's KV is never computed
            )
        requests[key] = _request_state(request, Owner(key))
    running = [Owner(m.request.request_id) for m in scheduler.running if not m.is_done]
    waiting = [
        Owner(r.request_id)
        for _, r in zip(range(MAX_QUEUE_LABELS), scheduler.waiting, strict=False)
    ]
    lengths = scheduler.queue_lengths()
    return RegionFrame(
        kv.num_slots,
        regions,
        requests,
        Queues(_labels(running, lengths[0]), _labels(waiting, lengths[1]), (), lengths),
    )
