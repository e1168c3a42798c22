"""What a block map sees after one step: the KV structures read through their public queries.

A frame is the whole state after a step, read from the scheduler, never kept by it: who owns each
sequence (`Owner`: a request, and which of its samples), each sequence's block table, every GPU
block's reference count and content hash, the CPU swap blocks' reference counts, and the queues.
A paged cache gives a `PagedFrame`; the contiguous caches of static batching and Orca give a
`RegionFrame` (one region of token slots per sequence). simulator/metrics/block_map.py keeps the
differences between consecutive frames; simulator/metrics/block_events.py puts them in words.

Reading a frame is O(blocks + sequences): a block map records small runs or a window of a large
one, and nothing here runs unless one was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.request import Request
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.policies.reserving import ReservingScheduler
from pagesim.simulator.policies.seq_group import SeqGroup

MAX_QUEUE_LABELS = 40  # queue members named per step; the rest are counted


@dataclass(frozen=True, slots=True)
class Owner:
    """A sequence's request as the workload knows it (a V1 sample's parent) and, for a request
    of several samples, which one (from 1); `request_id` None: a sequence no request owns."""

    request_id: int | None
    sample: int | None = None

    @property
    def label(self) -> str:
        if self.request_id is None:
            return "a held sequence"
        if self.sample is None:
            return f"request {self.request_id}"
        return f"request {self.request_id} sample {self.sample}"


@dataclass(frozen=True, slots=True)
class SeqState:
    """One sequence after a step: its table lists GPU blocks, or CPU ones while swapped out."""

    seq_id: int
    owner: Owner
    request_key: int  # the scheduler's request id (a V1 sample's own): RequestState's key
    table: tuple[int, ...]
    is_swapped: bool
    num_tokens: int  # slots appended
    num_computed_tokens: int  # slots whose KV is written


@dataclass(frozen=True, slots=True)
class RequestState:
    """The counters of one live request the events read (prefix hits, tokens, lengths)."""

    owner: Owner
    status: str
    num_cached_tokens: int  # prompt tokens served from the prefix cache, every admission
    num_generated: int
    num_preemptions: int
    prompt_len: int
    output_len: int
    prefix_len: int  # tokens of a shared system prompt it starts with
    prefix_group: int | None


@dataclass(frozen=True, slots=True)
class RegionState:
    """One sequence's contiguous region of token slots (static batching, Orca)."""

    seq_id: int
    owner: Owner
    offset: int
    num_held: int  # slots the allocator holds (a buddy allocator rounds up to a power of two)
    num_asked: int  # slots the reservation policy asked for
    num_computed: int  # slots whose KV is written
    final_len: int  # slots the request fills when it finishes: the rest is over-reserved


@dataclass(frozen=True, slots=True)
class Queues:
    """Labels of the running, waiting and swapped requests (at most MAX_QUEUE_LABELS each),
    with each queue's full length."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    swapped: tuple[str, ...]
    lengths: tuple[int, int, int]


@dataclass(frozen=True)
class PagedFrame:
    ref_counts: tuple[int, ...]  # per GPU block
    hashes: tuple[int | None, ...]  # per GPU block: its content hash (prefix cache), if any
    cpu_ref_counts: tuple[int, ...]  # per CPU (swap) block
    seqs: dict[int, SeqState]  # by sequence id
    requests: dict[int, RequestState]  # by the scheduler's request id
    queues: Queues


@dataclass(frozen=True)
class RegionFrame:
    num_slots: int
    regions: dict[int, RegionState]  # by sequence id
    requests: dict[int, RequestState]
    queues: Queues


Frame = PagedFrame | RegionFrame


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
