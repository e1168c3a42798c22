"""A block map: every KV block's state and the step's events, step by step, for a window of a run.

Asked for with `simulate(..., block_map=BlockMapRecorder(window))` (`pagesim run --block-map`,
`pagesim explain`). The replica calls `record` after each step it completes, behind one `None`
check: a run that records nothing pays nothing more. A recording run takes the per-step path
(no decode fast path: its closed form takes blocks ahead and leaves the tables behind), whose
results are the fast path's, step for step (tests/simulator/policies/test_fast_path.py).

What is kept: the frame before the window (simulator/metrics/block_frames.py), then per step only
what changed (blocks whose reference count or content changed, tables that changed, token
counts that moved) and the step's events in words (simulator/metrics/block_events.py).
`BlockMap.states()` rebuilds every step's full state from them; a test compares each with the KV
structures' own, walked step by step.

Which steps, and what a block map can draw: simulator/metrics/block_map_window.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from pagesim.simulator.core.config import SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.kv.block_budget import Capacity
from pagesim.simulator.metrics.block_events import BlockEvent, region_events
from pagesim.simulator.metrics.block_frames import (
    Frame,
    PagedFrame,
    Queues,
    RegionFrame,
    RegionState,
    SeqState,
)
from pagesim.simulator.metrics.block_map_window import (
    FIELD,
    MAX_STEPS,
    BlockMapWindow,
    unmappable_reason,
)
from pagesim.simulator.metrics.paged_events import paged_events


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded step: what changed, the queues after it and its events."""

    step: int
    start_s: float
    end_s: float
    blocks: tuple[tuple[int, int, int], ...]  # GPU blocks changed: (block, ref count, content)
    cpu_blocks: tuple[tuple[int, int], ...]  # CPU blocks changed: (block, ref count)
    seqs: tuple[SeqState, ...]  # sequences new, or whose table or owner changed
    tokens: tuple[tuple[int, int, int], ...]  # (seq, tokens, computed) of the others that moved
    gone: tuple[int, ...]  # sequences that left
    regions: tuple[RegionState, ...]  # contiguous caches: every region after the step
    queues: Queues
    events: tuple[BlockEvent, ...]
    num_prefill_tokens: int  # what the step computed (the plan's counts)
    num_decode_tokens: int


@dataclass
class MapState:
    """The full state after step `step` (-1: before the first recorded one)."""

    step: int
    ref_counts: list[int]
    contents: list[int]  # per GPU block: 0 none, else its content's number (BlockMap.contents)
    cpu_ref_counts: list[int]
    seqs: dict[int, SeqState]
    regions: dict[int, RegionState]


@dataclass(frozen=True, slots=True)
class MapAbout:
    """What a block map is of: one system of a scenario, and its KV pools."""

    scenario: str
    system: str
    policy: str
    kind: str  # "paged" or "contiguous" (static batching, Orca: regions of token slots)
    block_size: int  # tokens per block (contiguous: the slots one drawn cell stands for)
    num_blocks: int  # GPU blocks
    num_cpu_blocks: int  # CPU swap blocks (paged)
    num_slots: int  # token slots: num_blocks x block_size


@dataclass(frozen=True)
class BlockMap:
    """A recorded window of one system's run (see the module docstring)."""

    about: MapAbout
    window: BlockMapWindow
    num_steps_run: int  # steps the whole run took
    initial: MapState
    steps: tuple[StepRecord, ...]
    contents: dict[int, str]  # content number -> what the block holds

    def states(self) -> Iterator[MapState]:
        """The full state after each recorded step, in order (a fresh object each)."""
        state = self.initial
        for record in self.steps:
            state = apply(state, record)
            yield state


def apply(state: MapState, record: StepRecord) -> MapState:
    """`state` moved on by one step's record."""
    refs, contents, cpu = list(state.ref_counts), list(state.contents), list(state.cpu_ref_counts)
    for block, ref_count, content in record.blocks:
        refs[block], contents[block] = ref_count, content
    for block, ref_count in record.cpu_blocks:
        cpu[block] = ref_count
    seqs = {k: v for k, v in state.seqs.items() if k not in record.gone}
    for seq_id, num_tokens, num_computed in record.tokens:
        seqs[seq_id] = replace(
            seqs[seq_id], num_tokens=num_tokens, num_computed_tokens=num_computed
        )
    seqs.update((s.seq_id, s) for s in record.seqs)
    regions = {r.seq_id: r for r in record.regions}
    return MapState(record.step, refs, contents, cpu, seqs, regions)


class BlockMapRecorder:
    """Records a window of one replica's steps (engine.simulate attaches it to its replica)."""

    def __init__(self, window: BlockMapWindow | None = None) -> None:
        self.window = window or BlockMapWindow()
        self.scheduler: Scheduler | None = None  # the one attached (tests walk its KV)
        self._read: Callable[[Scheduler], Frame] | None = None
        self._about: MapAbout | None = None
        self._num_steps = 0
        self._prev: Frame | None = None
        self._initial: MapState | None = None
        self._steps: list[StepRecord] = []
        self._content_of: dict[int, int] = {}  # content hash -> its number
        self._labels: dict[int, str] = {}  # content number -> what the block holds
        self._holder_index: dict[int, dict[int, tuple[SeqState, int]]] = {}  # by id(frame)

    def attach(
        self,
        scheduler: Scheduler,
        read: Callable[[Scheduler], Frame],
        capacity: Capacity,
        system: SystemConfig,
        scenario: str,
    ) -> None:
        """Watch `scheduler`'s KV structures from now on, reading each frame with `read`
        (simulator/cluster/block_reader.py; InputError if it has none a block map draws:
        `unmappable_reason`)."""
        reason = unmappable_reason(capacity, system)
        if reason is not None:
            raise InputError(reason)
        self.scheduler, self._read = scheduler, read
        paged = isinstance(read(scheduler), PagedFrame)
        self._about = MapAbout(
            scenario,
            system.name,
            system.policy.value,
            "paged" if paged else "contiguous",
            capacity.block_size,
            capacity.num_gpu_blocks,
            capacity.num_cpu_blocks if paged else 0,
            capacity.num_token_slots,
        )
        if self.window.start == 0:
            self._take_baseline()

    def record(self, start_s: float, end_s: float, plan: StepPlan) -> None:
        """Step number `_num_steps` ran from `start_s` to `end_s` as `plan` says, and completed."""
        step = self._num_steps
        self._num_steps += 1
        window = self.window
        if step < window.start - 1 or (window.end is not None and step >= window.end):
            return
        if step == window.start - 1:
            self._take_baseline()
            return
        assert self._prev is not None, "attach() first"
        if len(self._steps) >= MAX_STEPS:
            raise InputError(
                f"{FIELD} {window.spec}: system {self._system!r} runs past "
                f"{MAX_STEPS:,} steps, more than a block map holds; give a window of at most "
                f"{MAX_STEPS:,} steps, e.g. {FIELD} 0:500"
            )
        frame = self._frame()
        self._steps.append(self._diff(step, start_s, end_s, plan, self._prev, frame))
        self._prev = frame

    def block_map(self) -> BlockMap:
        """What was recorded (InputError if the window starts after the run's last step)."""
        if self._about is None or self._initial is None or not self._steps:
            raise InputError(
                f"{FIELD} {self.window.spec}: system {self._system!r} ran "
                f"{self._num_steps:,} steps; the window must start before step "
                f"{self._num_steps:,}"
            )
        return BlockMap(
            self._about,
            self.window,
            self._num_steps,
            self._initial,
            tuple(self._steps),
            dict(self._labels),
        )

    @property
    def _system(self) -> str:
        return "?" if self._about is None else self._about.system

    @property
    def _block_size(self) -> int:
        assert self._about is not None
        return self._about.block_size

    # -- internals -----------------------------------------------------------------------------

    def _frame(self) -> Frame:
        assert self.scheduler is not None and self._read is not None, "attach() first"
        self._holder_index.clear()
        return self._read(self.scheduler)

    def _take_baseline(self) -> None:
        frame = self._frame()
        self._prev = frame
        if isinstance(frame, PagedFrame):
            contents = [self._content(h, b, frame) for b, h in enumerate(frame.hashes)]
            self._initial = MapState(
                self._num_steps - 1,
                list(frame.ref_counts),
                contents,
                list(frame.cpu_ref_counts),
                dict(frame.seqs),
                {},
            )
        else:
            self._initial = MapState(self._num_steps - 1, [], [], [], {}, dict(frame.regions))

    def _content(self, block_hash: int | None, block: int, *frames: PagedFrame) -> int:
        """The number of a content hash (0: none), named the first time it is seen (on
        `block`)."""
        if block_hash is None:
            return 0
        number = self._content_of.get(block_hash)
        if number is None:
            number = self._content_of[block_hash] = len(self._content_of) + 1
            self._labels[number] = self._describe_new(block, frames)
        return number

    def _describe_new(self, block: int, frames: tuple[PagedFrame, ...]) -> str:
        """What `block` holds, read off a sequence holding it in the first of `frames` where
        one does (a block hashed as its holder is preempted: only the frame before knows)."""
        bs = self._block_size
        for frame in frames:
            found = self._holders(frame).get(block)
            if found is None:
                continue
            seq, i = found
            request = frame.requests.get(seq.request_key)
            tokens = f"tokens {i * bs}–{(i + 1) * bs - 1}"
            shared = 0 if request is None or request.prefix_group is None else request.prefix_len
            if (i + 1) * bs <= shared:
                assert request is not None
                return f"shared system prompt {request.prefix_group}, {tokens}"
            return f"{seq.owner.label}, {tokens}"
        return "content cached before the recorded steps, by a request gone since"

    def _holders(self, frame: PagedFrame) -> dict[int, tuple[SeqState, int]]:
        """GPU block -> a sequence holding it and its logical index, built once per frame."""
        index = self._holder_index.get(id(frame))
        if index is None:
            index = {}
            for seq in frame.seqs.values():
                if not seq.is_swapped:
                    for i, block in enumerate(seq.table):
                        index.setdefault(block, (seq, i))
            self._holder_index[id(frame)] = index
        return index

    def _describe(self, block_hash: int) -> str:
        number = self._content_of.get(block_hash)
        return "unknown content" if number is None else self._labels[number]

    def _diff(
        self, step: int, start_s: float, end_s: float, plan: StepPlan, prev: Frame, new: Frame
    ) -> StepRecord:
        if isinstance(new, RegionFrame):
            assert isinstance(prev, RegionFrame)
            events = region_events(prev, new)
            regions = tuple(new.regions.values())
            return StepRecord(
                step,
                start_s,
                end_s,
                (),
                (),
                (),
                (),
                (),
                regions,
                new.queues,
                tuple(events),
                plan.num_prefill_tokens,
                plan.num_decode_tokens,
            )
        assert isinstance(prev, PagedFrame)
        events = paged_events(prev, new, plan, self._block_size, self._describe)
        blocks: tuple[tuple[int, int, int], ...] = ()
        if prev.ref_counts != new.ref_counts or prev.hashes != new.hashes:  # compared in C
            blocks = tuple(
                (b, new.ref_counts[b], self._content(new.hashes[b], b, new, prev))
                for b, (r0, r1, h0, h1) in enumerate(
                    zip(prev.ref_counts, new.ref_counts, prev.hashes, new.hashes, strict=True)
                )
                if r0 != r1 or h0 != h1
            )
        cpu: tuple[tuple[int, int], ...] = ()
        if prev.cpu_ref_counts != new.cpu_ref_counts:
            cpu = tuple(
                (b, r1)
                for b, (r0, r1) in enumerate(
                    zip(prev.cpu_ref_counts, new.cpu_ref_counts, strict=True)
                )
                if r0 != r1
            )
        changed, tokens = [], []
        for seq_id, seq in new.seqs.items():
            was = prev.seqs.get(seq_id)
            if was is None or (was.table, was.is_swapped, was.owner) != (
                seq.table,
                seq.is_swapped,
                seq.owner,
            ):
                changed.append(seq)
            elif (was.num_tokens, was.num_computed_tokens) != (
                seq.num_tokens,
                seq.num_computed_tokens,
            ):
                tokens.append((seq_id, seq.num_tokens, seq.num_computed_tokens))
        gone = tuple(s for s in prev.seqs if s not in new.seqs)
        return StepRecord(
            step,
            start_s,
            end_s,
            blocks,
            cpu,
            tuple(changed),
            tuple(tokens),
            gone,
            (),
            new.queues,
            tuple(events),
            plan.num_prefill_tokens,
            plan.num_decode_tokens,
        )
