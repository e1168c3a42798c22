"""A paged cache's block events in words, from the frames before and after a step and its plan.

Each is read off what changed between the two frames (simulator/metrics/block_frames.py), which
is exact because every change leaves a trace there, with the plan naming what the frames alone
cannot (which request a preemption took, by which mode; which copy-on-write copy went where):

    a sequence appears         admitted: its first blocks hit the prefix cache (as many as its
                               request's cached tokens grew, in blocks), the rest allocated; or
                               forked from a sibling of its request, sharing every block
    a sequence disappears      finished, preempted by recompute, or a beam given way
    a table grows              blocks allocated for its next tokens
    a table entry changes      a copy-on-write copy (the plan's src -> dst)
    GPU table -> CPU table     swapped out (a preemption by swap); back: swapped in
    a block gains a hash       registered in the prefix cache (full; under V1, when allocated)
    a block loses its hash     evicted: reused, its cached content gone

A block taken and let go within one step (a request's last token) is in neither frame: the
finish says how many. The events of a step are listed in that order of kinds, not in the order
the scheduler made them within the step (which no frame records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pagesim.simulator.core.plan import PreemptionMode, StepPlan
from pagesim.simulator.metrics.block_events import BlockEvent, EventKind, ids_text, plural
from pagesim.simulator.metrics.block_frames import Owner, PagedFrame, SeqState


def paged_events(
    prev: PagedFrame,
    new: PagedFrame,
    plan: StepPlan,
    block_size: int,
    describe: Callable[[int], str],
) -> list[BlockEvent]:
    """The events of the step `plan` that led from `prev` to `new`; `describe(hash)` names a
    block's cached content (for evictions)."""
    modes = {p.request_id: p.mode for p in plan.preemptions}
    copies = {dst: src for src, dst in plan.copies}
    contexts = {w.seq_id: w.context_len for w in plan.work}
    events: list[BlockEvent] = []
    arrived = {Owner(r.owner.request_id) for k, r in new.requests.items() if k not in prev.requests}
    events += [
        BlockEvent(EventKind.ARRIVE, o, (), f"{o.label} arrives")
        for o in sorted(arrived, key=_order)
    ]
    later: list[BlockEvent] = []
    for seq_id in sorted(prev.seqs.keys() | new.seqs.keys()):
        before, after = prev.seqs.get(seq_id), new.seqs.get(seq_id)
        recomputed = (
            before is not None and modes.get(before.request_key) is PreemptionMode.RECOMPUTE
        )
        if before is not None and (after is None or recomputed):
            events.append(_gone(before, new, recomputed, contexts.get(seq_id), block_size))
        if after is not None and (before is None or recomputed):
            later += _arrived(after, prev, new, block_size)
        elif before is not None and after is not None:
            later += _changed(before, after, copies, block_size)
    events += later
    events += _copies(plan, prev, new)
    events += _hash_changes(prev, new, describe)
    order = list(EventKind)
    events.sort(key=lambda e: order.index(e.kind))  # stable: seq order within a kind
    return _merge_samples(events, new)


# Kinds whose events for several samples of one request read as one.
_MERGED = (
    EventKind.SWAP_OUT,
    EventKind.SWAP_IN,
    EventKind.FINISH,
    EventKind.PREEMPT,
    EventKind.FORK,
)


def _merged_text(
    kind: EventKind, who: str, gpu: tuple[int, ...], cpu: tuple[int, ...], new: PagedFrame
) -> str:
    blocks = ids_text(gpu) if gpu else "no block"
    if kind is EventKind.SWAP_OUT:
        return f"{who} are preempted by swap: GPU {blocks} copied to CPU {ids_text(cpu)} and freed"
    if kind is EventKind.SWAP_IN:
        return f"{who} swap back in: CPU {ids_text(cpu)} copied to GPU {blocks}"
    if kind is EventKind.FINISH:
        return f"{who} finish: free {blocks}{_fates(gpu, new)}"
    if kind is EventKind.PREEMPT:
        return (
            f"{who} are preempted by recompute: free {blocks}{_fates(gpu, new)}; the request "
            "starts again from its prompt"
        )
    refs = sorted({new.ref_counts[b] for b in gpu})
    return (
        f"{who} fork from sample 1: each shares its {plural(len(gpu), 'block')} ({blocks}; "
        f"reference count {', '.join(map(str, refs))}), copied on write"
    )


def _merge_samples(events: list[BlockEvent], new: PagedFrame) -> list[BlockEvent]:
    """One event per request for the samples of a V0 group that swap, finish or are preempted
    together (their blocks put together, each once)."""
    together: dict[tuple[EventKind, int | None], list[BlockEvent]] = {}
    for event in events:
        owner = event.owner
        if event.kind in _MERGED and owner is not None and owner.sample is not None:
            together.setdefault((event.kind, owner.request_id), []).append(event)
    out = []
    for event in events:
        owner = event.owner
        key = (event.kind, None if owner is None else owner.request_id)
        group = together.get(key)
        if group is None or len(group) == 1 or owner is None or owner.sample is None:
            out.append(event)
            continue
        if event is not group[0]:
            continue  # told with the first
        gpu = tuple(dict.fromkeys(b for e in group for b in e.blocks))
        cpu = tuple(dict.fromkeys(b for e in group for b in e.cpu_blocks))
        samples = sorted(e.owner.sample for e in group if e.owner and e.owner.sample)
        who = f"request {owner.request_id} {ids_text(samples, 'sample')}"
        text = _merged_text(event.kind, who, gpu, cpu, new)
        out.append(BlockEvent(event.kind, Owner(owner.request_id), gpu, text, cpu))
    return out


def _order(owner: Owner) -> tuple[int, int]:
    return (-1 if owner.request_id is None else owner.request_id, owner.sample or 0)


def _fates(blocks: Iterable[int], new: PagedFrame) -> str:
    """What became of blocks a sequence let go: free, kept cached, or still held."""
    cached = [b for b in blocks if new.ref_counts[b] == 0 and new.hashes[b] is not None]
    held = [b for b in blocks if new.ref_counts[b] > 0]
    notes = []
    if cached:
        notes.append(
            f"{ids_text(cached)} stay{'s' if len(cached) == 1 else ''} in the prefix cache"
        )
    if held:
        notes.append(f"{ids_text(held)} still held by others")
    return f" ({'; '.join(notes)})" if notes else ""


def _gone(
    seq: SeqState, new: PagedFrame, recomputed: bool, context: int | None, block_size: int
) -> BlockEvent:
    label, table = seq.owner.label, seq.table
    if seq.is_swapped:  # swapped back in and, in the same step, finished or preempted again
        what = "is preempted by recompute" if recomputed else "finishes with its last token"
        text = (
            f"{label} swaps back in and {what}: CPU {ids_text(table)} and their GPU copies "
            "are free again"
        )
        kind = EventKind.PREEMPT if recomputed else EventKind.FINISH
        return BlockEvent(kind, seq.owner, (), text, cpu_blocks=table)
    if recomputed:
        kind = EventKind.PREEMPT
        text = (
            f"{label} is preempted by recompute: frees {ids_text(table)}{_fates(table, new)}; "
            f"its {plural(seq.num_computed_tokens, 'token')} will be computed again"
        )
    elif seq.request_key in new.requests:
        kind, text = (
            EventKind.FREE,
            f"{label} gives way: frees {ids_text(table)}{_fates(table, new)}",
        )
    else:
        kind = EventKind.FINISH
        freed = f": frees {ids_text(table)}{_fates(table, new)}" if table else ""
        # A block taken for its last token and let go in the same step is in neither frame.
        taken = 0 if context is None else -(-context // block_size) - len(table)
        also = f", and the {plural(taken, 'block')} it took for its last token" if taken > 0 else ""
        text = f"{label} finishes{freed}{also}"
    return BlockEvent(kind, seq.owner, table, text)


def _copies(plan: StepPlan, prev: PagedFrame, new: PagedFrame) -> list[BlockEvent]:
    """The plan's copy-on-write copies, each for the sequence whose table took the copy where
    it held the source (or, for one that finished in the step, held the source)."""
    events = []
    for src, dst in plan.copies:
        owner = None
        where = ""
        for seq in new.seqs.values():
            if dst in seq.table and not seq.is_swapped:
                owner, where = seq.owner, f" (logical block {seq.table.index(dst)})"
                break
        else:
            owner = next((s.owner for s in prev.seqs.values() if src in s.table), None)
        whom = f" for {owner.label}" if owner is not None else ""
        text = f"block {src} copied on write to block {dst}{whom}{where}"
        events.append(BlockEvent(EventKind.COPY_ON_WRITE, owner, (src, dst), text))
    return events


def _tokens(first: int, num_tokens: int) -> str:
    """The token positions `first` .. `num_tokens` - 1 (what newly taken blocks hold)."""
    last = num_tokens - 1
    return f"token {first}" if last == first else f"tokens {first}–{last}"


def _arrived(seq: SeqState, prev: PagedFrame, new: PagedFrame, block_size: int) -> list[BlockEvent]:
    """A sequence new in this step: forked from a sibling, or admitted (hits, then allocations)."""
    table, label = seq.table, seq.owner.label
    parent = _fork_parent(seq, new)
    if parent is not None:
        refs = sorted({new.ref_counts[b] for b in table})
        text = (
            f"{label} forks from {parent.owner.label}: shares its {plural(len(table), 'block')} "
            f"({ids_text(table)}; reference count {', '.join(map(str, refs))}), copied on write"
        )
        return [BlockEvent(EventKind.FORK, seq.owner, table, text)]
    request = new.requests.get(seq.request_key)
    before = prev.requests.get(seq.request_key)
    num_hit = 0
    if request is not None:
        cached = request.num_cached_tokens - (before.num_cached_tokens if before else 0)
        num_hit = min(len(table), cached // block_size)
    events = []
    if num_hit:
        hits = table[:num_hit]
        events.append(_hit(seq, hits, prev, new, block_size))
    rest = table[num_hit:]
    if rest:
        first = num_hit * block_size
        text = f"{label} is admitted: takes {ids_text(rest)} for {_tokens(first, seq.num_tokens)}"
        events.append(BlockEvent(EventKind.ALLOCATE, seq.owner, rest, text))
    return events


def _hit(
    seq: SeqState, hits: tuple[int, ...], prev: PagedFrame, new: PagedFrame, block_size: int
) -> BlockEvent:
    request = new.requests[seq.request_key]
    shared_prefix = (
        request.prefix_group is not None and len(hits) * block_size <= request.prefix_len
    )
    if shared_prefix:
        whose = "of the shared system prompt"
    elif request.num_preemptions:
        whose = "of its own, cached before it was preempted"
    else:
        whose = "of a prompt computed before"
    # Where each hit block was before the step: held by others (now shared), free but still
    # cached (taken back from the free queue), or neither: cached in this very step as another
    # request's prompt took it (vLLM V1 caches a block when it is allocated).
    held = sum(1 for b in hits if prev.ref_counts[b])
    revived = sum(1 for b in hits if not prev.ref_counts[b] and prev.hashes[b] is not None)
    how = [
        f"{n} {what}"
        for n, what in (
            (held, "held by other requests, now shared"),
            (revived, "taken back from the free queue"),
            (len(hits) - held - revived, "cached this step by the request computing it"),
        )
        if n
    ]
    text = (
        f"{seq.owner.label} hits {plural(len(hits), 'cached block')} {whose} "
        f"({ids_text(hits)}: {'; '.join(how)}); it computes from token {len(hits) * block_size}"
    )
    return BlockEvent(EventKind.HIT, seq.owner, hits, text, is_shared_prefix=shared_prefix)


def _fork_parent(seq: SeqState, new: PagedFrame) -> SeqState | None:
    """The sibling (same request, an earlier sample) whose first block `seq` shares, the
    lowest sample first: V0 forks every sample (and beam search re-forks) from the first."""
    sample = seq.owner.sample
    if sample is None or not seq.table:
        return None
    siblings = [
        s
        for s in new.seqs.values()
        if s.request_key == seq.request_key
        and (s.owner.sample or 0) < sample
        and s.table[:1] == seq.table[:1]
    ]
    return min(siblings, key=lambda s: s.owner.sample or 0, default=None)


def _changed(
    before: SeqState, after: SeqState, copies: dict[int, int], block_size: int
) -> list[BlockEvent]:
    """Swapped out or in, or grown (copy-on-write copies: `_copies`)."""
    label, old, table = after.owner.label, before.table, after.table
    events = []
    if not before.is_swapped and after.is_swapped:
        text = (
            f"{label} is preempted by swap: GPU {ids_text(old)} copied to CPU "
            f"{ids_text(table)} and freed"
        )
        return [BlockEvent(EventKind.SWAP_OUT, after.owner, old, text, cpu_blocks=table)]
    swapped_in = before.is_swapped and not after.is_swapped
    if swapped_in:
        back = tuple(copies.get(b, b) for b in table[: len(old)])  # before any copy-on-write
        text = f"{label} swaps back in: CPU {ids_text(old)} copied to GPU {ids_text(back)}"
        events.append(BlockEvent(EventKind.SWAP_IN, after.owner, back, text, cpu_blocks=old))
    grown = table[len(old) :]
    if grown:
        first = min(len(old) * block_size, after.num_tokens - 1)
        text = f"{label} takes {ids_text(grown)} for {_tokens(first, after.num_tokens)}"
        events.append(BlockEvent(EventKind.ALLOCATE, after.owner, grown, text))
    return events


def _hash_changes(
    prev: PagedFrame, new: PagedFrame, describe: Callable[[int], str]
) -> list[BlockEvent]:
    """Blocks registered in the prefix cache (grouped by holder) and cached contents evicted."""
    if prev.hashes == new.hashes:  # compared in C: the usual step
        return []
    registered: dict[Owner | None, list[int]] = {}
    holder = {
        b: s.owner
        for frame in (prev, new)  # the holder now, else before (hashed as it was preempted)
        for s in frame.seqs.values()
        if not s.is_swapped
        for b in s.table
    }
    events: list[BlockEvent] = []
    for block, (was, now) in enumerate(zip(prev.hashes, new.hashes, strict=True)):
        if was == now:
            continue
        if was is not None:
            text = f"block {block} is evicted: its cached content ({describe(was)}) is gone"
            events.append(BlockEvent(EventKind.EVICT, None, (block,), text))
        if now is not None:
            registered.setdefault(holder.get(block), []).append(block)
    for owner, blocks in registered.items():
        whose = f"{owner.label}'s " if owner is not None else ""
        verb = "enters" if len(blocks) == 1 else "enter"
        text = f"{whose}{ids_text(blocks)} {verb} the prefix cache (full: later prompts can hit it)"
        events.append(BlockEvent(EventKind.CACHE, owner, tuple(blocks), text))
    return events
