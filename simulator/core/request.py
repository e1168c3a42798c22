"""A request's identity, its lifecycle enum and the legal transitions between states.

Identity (arrival, prompt/output lengths, shared prefix, sampling) is fixed by the workload; the
lifecycle fields are advanced only by schedulers through `transition`, which refuses illegal moves
and stamps each one with the simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import partial

# Content keys of a request's tokens, for prefix hashing: equal keys mean equal tokens.
PREFIX_SEGMENT = 1  # (PREFIX_SEGMENT, group): a system prompt shared by a whole prefix group
UNIQUE_SEGMENT = 2  # (UNIQUE_SEGMENT, request_id): the rest of one request's prompt
GENERATED_SEGMENT = 3  # (GENERATED_SEGMENT, seq_id): the tokens one sequence generated
# (TRACE_BLOCK_SEGMENT, hash_id): one 512-token block of a Mooncake trace row (workload/mooncake)
TRACE_BLOCK_SEGMENT = 4
# (ANSWER_SEGMENT, request_id): a turn's answer, repeated in its session's next prompt
ANSWER_SEGMENT = 5


class RequestStatus(Enum):
    WAITING = "waiting"  # arrived, not yet admitted
    RUNNING = "running"  # holds KV blocks, is being computed
    SWAPPED = "swapped"  # preempted by swap: its blocks are in CPU memory
    PREEMPTED = "preempted"  # preempted by recompute: blocks dropped, waits to re-prefill
    FINISHED = "finished"
    REJECTED = "rejected"  # can never be served (too long for the model or the KV cache)


_LEGAL: dict[RequestStatus, frozenset[RequestStatus]] = {
    RequestStatus.WAITING: frozenset({RequestStatus.RUNNING, RequestStatus.REJECTED}),
    RequestStatus.RUNNING: frozenset(
        {RequestStatus.FINISHED, RequestStatus.SWAPPED, RequestStatus.PREEMPTED}
    ),
    RequestStatus.SWAPPED: frozenset({RequestStatus.RUNNING, RequestStatus.REJECTED}),
    RequestStatus.PREEMPTED: frozenset({RequestStatus.RUNNING, RequestStatus.REJECTED}),
    RequestStatus.FINISHED: frozenset(),
    RequestStatus.REJECTED: frozenset(),
}
# The members as module constants, for the hot paths: in 3.11 `EnumType` defines `__getattr__`,
# so every read of a member off its class (`RequestStatus.RUNNING`) takes the slow attribute
# hook (about 0.25 us, ten times a global's read), and every request moves three times or more.
WAITING = RequestStatus.WAITING
RUNNING = RequestStatus.RUNNING
SWAPPED = RequestStatus.SWAPPED
PREEMPTED = RequestStatus.PREEMPTED
FINISHED = RequestStatus.FINISHED
REJECTED = RequestStatus.REJECTED
# The same moves by the name of the status moved from (a str hashes in C; an Enum member in
# Python): `transition` checks every move of every request, a tuple's test by identity first.
_NEXT = {old._name_: tuple(m for m in RequestStatus if m in moves) for old, moves in _LEGAL.items()}


def _is_end(status: RequestStatus) -> bool:
    """Finished or rejected: no move out (`_LEGAL`)."""
    return status is FINISHED or status is REJECTED


class SamplingKind(Enum):
    """How many sequences a request decodes, all forked from its prompt's blocks."""

    SINGLE = "single"
    PARALLEL = "parallel"  # n independent samples sharing the prompt (copy-on-write)
    BEAM = "beam"  # beam search: beams re-fork from each other as they advance


@dataclass(eq=False, slots=True)
class Request:
    """One request. `output_len` is its true final length (only oracle policies may read it)."""

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    prefix_group: int | None = None  # id of the shared system prompt this request starts with
    prefix_len: int = 0  # tokens of that shared prefix (the first prefix_len prompt tokens)
    sampling: SamplingKind = SamplingKind.SINGLE
    num_seqs: int = 1  # parallel samples n, or beam width
    priority: int = 0  # lower is served first under priority admission
    prompt_of: int | None = None  # the request whose prompt this one repeats (V1's n > 1 child)
    # Each parallel sample's own output length when they differ (workload.sample_lengths =
    # "independent"); output_len is then the longest. Empty: every sample runs output_len.
    sample_output_lens: tuple[int, ...] = ()
    session_id: int | None = None  # the conversation it is a turn of (routers may read it)
    # The prompt's content as (content key, tokens) segments when the workload knows it (a
    # session's growing context, a trace's block hashes); None: prefix group + unique rest.
    content: tuple[tuple[tuple[int, ...], int], ...] | None = None

    status: RequestStatus = RequestStatus.WAITING
    history: list[tuple[RequestStatus, float]] = field(default_factory=list)
    admitted_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    last_token_s: float | None = None  # last token produced (static batching returns it later)
    num_generated: int = 0  # output tokens produced per sequence (sequences advance in lockstep)
    num_preemptions: int = 0
    num_swaps: int = 0
    num_recomputed_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache (all admissions)
    rejection_reason: str | None = None
    # Finished or rejected (`status` is one of those; `transition` keeps it): an attribute, not
    # a property, as it is read after every step for every request in flight
    # (cluster/replica.py `_settle`).
    is_done: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        status = self.status  # (`_is_end`, inlined: every request is built once)
        self.is_done = status is FINISHED or status is REJECTED

    @property
    def total_len(self) -> int:
        """Prompt plus full output: the KV tokens one sequence holds when it finishes."""
        return self.prompt_len + self.output_len

    def transition(self, new_status: RequestStatus, now_s: float) -> None:
        """Move to `new_status` at simulated time `now_s`; illegal moves are bugs and raise."""
        if new_status not in _NEXT[self.status._name_]:
            raise RuntimeError(
                f"request {self.request_id}: illegal transition "
                f"{self.status.value} -> {new_status.value}"
            )
        self.status = new_status
        self.history.append((new_status, now_s))
        if new_status is RUNNING:
            if self.admitted_s is None:
                self.admitted_s = now_s
        elif new_status is FINISHED:
            self.is_done = True  # the end (`_is_end`)
            self.finish_s = now_s
        elif new_status is REJECTED:
            self.is_done = True
        elif new_status is SWAPPED or new_status is PREEMPTED:
            self.num_preemptions += 1
            if new_status is SWAPPED:
                self.num_swaps += 1

    def reject(self, reason: str, now_s: float) -> None:
        self.transition(REJECTED, now_s)
        self.rejection_reason = reason

    @property
    def num_output_tokens(self) -> int:
        """Output tokens of all its sequences at the end: what throughput counts."""
        if self.sample_output_lens:
            return sum(self.sample_output_lens)
        return self.output_len * self.num_seqs

    @property
    def num_tokens_left(self) -> int:
        """Output tokens still to come (per sequence): the request is done when this reaches 0."""
        return self.output_len - self.num_generated

    def produce_token(self, now_s: float) -> bool:
        """One output token per sequence appears at `now_s`; True when it was the last.

        The one rule of token production, which TTFT and TPOT rest on: a step that computes a
        prompt's last token, and every decode step after it, produces one token. (A decode
        group, simulator/fastpath/decode_group.py, applies it to many steps at once.)
        """
        self.num_generated += 1
        if self.first_token_s is None:
            self.first_token_s = now_s
        if self.num_generated >= self.output_len:
            self.last_token_s = now_s
            return True
        return False


_new_request = partial(object.__new__, Request)


def streamed_request(
    request_id: int,
    arrival_s: float,
    prompt_len: int,
    output_len: int,
    prefix_group: int | None,
    prefix_len: int,
    sampling: SamplingKind,
    num_seqs: int,
    priority: int,
    sample_output_lens: tuple[int, ...],
) -> Request:
    """`Request(request_id, arrival_s, prompt_len, output_len, prefix_group, prefix_len,
    sampling, num_seqs, priority, None, sample_output_lens)`, every other field its default:
    a workload stream's request, made with no class call (one a request: the dispatch to the
    dataclass's Python __init__, then to its __post_init__, cost more than the stores).
    tests/simulator/core/test_request.py holds every field to the class call's."""
    request = _new_request()
    request.request_id = request_id
    request.arrival_s = arrival_s
    request.prompt_len = prompt_len
    request.output_len = output_len
    request.prefix_group = prefix_group
    request.prefix_len = prefix_len
    request.sampling = sampling
    request.num_seqs = num_seqs
    request.priority = priority
    request.prompt_of = None
    request.sample_output_lens = sample_output_lens
    request.session_id = None
    request.content = None
    request.status = WAITING
    request.history = []
    request.admitted_s = None
    request.first_token_s = None
    request.finish_s = None
    request.last_token_s = None
    request.num_generated = 0
    request.num_preemptions = 0
    request.num_swaps = 0
    request.num_recomputed_tokens = 0
    request.num_cached_tokens = 0
    request.rejection_reason = None
    request.is_done = False  # (WAITING)
    return request


def prompt_segments(request: Request) -> list[tuple[tuple[int, ...], int]]:
    """Content segments of the prompt, in order, as (content key, tokens) for prefix hashing.

    Requests of one prefix group share their first `prefix_len` tokens, key (PREFIX_SEGMENT,
    group); the rest is unique to the request, key (UNIQUE_SEGMENT, request_id). A request whose
    workload described its content (`content`) has those segments instead.
    """
    if request.content is not None:
        return list(request.content)
    segments: list[tuple[tuple[int, ...], int]] = []
    if request.prefix_group is not None and request.prefix_len > 0:
        segments.append(((PREFIX_SEGMENT, request.prefix_group), request.prefix_len))
    unique_len = request.prompt_len - (request.prefix_len if segments else 0)
    if unique_len > 0:
        owner = request.request_id if request.prompt_of is None else request.prompt_of
        segments.append(((UNIQUE_SEGMENT, owner), unique_len))
    return segments
