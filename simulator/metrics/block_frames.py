"""What a block map sees after one step: the KV structures read through their public queries.

A frame is the whole state after a step, read from the scheduler (simulator/cluster/
block_reader.py, which knows the policies' records), never kept by it: who owns each sequence
(`Owner`: a request, and which of its samples), each sequence's block table, every GPU block's
reference count and content hash, the CPU swap blocks' reference counts, and the queues. A paged
cache gives a `PagedFrame`; the contiguous caches of static batching and Orca give a
`RegionFrame` (one region of token slots per sequence). simulator/metrics/block_map.py keeps the
differences between consecutive frames; simulator/metrics/paged_events.py and block_events.py
put them in words.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Owner:
    """A sequence's request as the workload knows it (a V1 sample's parent) and, for a request
    of several samples, which one (from 1); `request_id` None: a sequence no request owns."""

    request_id: int | None
    sample: int | None = None

    @property
    def label(self) -> str:
        """How the pages and the events name it."""
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
