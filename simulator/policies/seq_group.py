"""A request on the paged KV cache, and the step a policy is building.

`SeqGroup` is the one record of a request's scheduling state: its sequences (ids into the KV
cache, which owns their blocks), how many KV tokens each has computed, how many it must compute
before its next token appears, and its prefix hashes. The `Request` keeps identity, lifecycle and
metrics; the KV cache keeps block tables.

`StepBuilder` collects what one `schedule()` call decides, in visiting order, and freezes it
into the StepPlan that `complete()` later acts on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pagesim.simulator.core.plan import BlockCopy, Preemption, SeqWork, StepPlan, seq_work_of
from pagesim.simulator.core.request import Request, RequestStatus
from pagesim.simulator.kv.prefix_hash import SequenceHasher


@dataclass(eq=False, slots=True)
class SeqGroup:
    """A request's sequences and progress on the paged KV cache."""

    request: Request
    seq_ids: list[int]
    target: int  # KV tokens to compute before the next token appears (prompt, or on recompute
    #              prompt + generated tokens)
    num_computed: int = 0  # KV tokens computed per sequence
    hashers: list[SequenceHasher] | None = None  # per sequence, only with prefix caching
    num_dropped: int = 0  # KV tokens (all sequences') dropped at the last recompute preemption
    fan_out: FanOut | None = None  # the parent this request is one sample of (V1 n > 1)
    # Its prompt's KV arrived from a prefill replica (policies/remote_kv.py): admission computes
    # only the last prompt token, in slots already allocated.
    is_remote: bool = False

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed < self.target

    @property
    def num_seqs(self) -> int:
        return len(self.seq_ids)

    @property
    def final_len(self) -> int:
        """KV tokens each sequence holds when the request finishes: its last token's KV is never
        computed."""
        return self.request.total_len - 1


class FanOut:
    """A request with n > 1 samples as vLLM V1 runs it (v1/engine/parallel_sampling.py
    ParentRequest): n child requests, each with the parent's prompt and output length, that
    share the prompt only through the prefix cache, count one each toward max_num_seqs and are
    preempted on their own. The parent, the request the workload and the metrics know, is
    running from its first child's admission and finishes with its last child; its times and
    counts are the children's (first token: the earliest; preemptions, recomputed and cached
    tokens: summed)."""

    __slots__ = ("children", "num_left", "parent")

    def __init__(self, parent: Request, children: list[Request]) -> None:
        self.parent = parent
        self.children = children
        self.num_left = len(children)

    def child_admitted(self, now_s: float) -> None:
        if self.parent.status is RequestStatus.WAITING:
            self.parent.transition(RequestStatus.RUNNING, now_s)

    def child_finished(self, now_s: float) -> None:
        """One child finished; the last one finishes the parent."""
        self.num_left -= 1
        if self.num_left:
            return
        parent, children = self.parent, self.children
        firsts = [c.first_token_s for c in children if c.first_token_s is not None]
        parent.first_token_s = min(firsts) if firsts else None
        parent.last_token_s = max(c.last_token_s or now_s for c in children)
        parent.num_generated = max(c.num_generated for c in children)
        parent.num_preemptions = sum(c.num_preemptions for c in children)
        parent.num_swaps = sum(c.num_swaps for c in children)
        parent.num_recomputed_tokens = sum(c.num_recomputed_tokens for c in children)
        parent.num_cached_tokens = sum(c.num_cached_tokens for c in children)
        parent.transition(RequestStatus.FINISHED, now_s)


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class StepBuilder:
    """The step being decided: work in visiting order, its counts, and the moves it makes."""

    __slots__ = (
        "copies",
        "is_grouped",
        "num_context_tokens",
        "num_decode_tokens",
        "num_prefill_seqs",
        "num_prefill_tokens",
        "num_requests",
        "preemptions",
        "swap_in",
        "swap_out",
        "work",
    )

    def __init__(self) -> None:
        self.work: list[SeqWork] = []
        self.num_prefill_tokens = 0
        self.num_prefill_seqs = 0
        self.num_decode_tokens = 0
        self.num_context_tokens = 0  # KV tokens of the listed entries after the step
        self.num_requests = 0  # groups added: the batch's requests (members counted by their group)
        self.preemptions: list[Preemption] = []
        self.copies: list[BlockCopy] = []
        self.swap_out = 0  # blocks
        self.swap_in = 0  # blocks
        self.is_grouped = False  # a decode group's members decode too (summed, not listed)

    @property
    def is_idle(self) -> bool:
        """Nothing to compute and no block to move (the plan's `is_empty`, before the plan)."""
        return not (self.work or self.is_grouped or self.swap_out or self.swap_in)

    def add(
        self,
        group: SeqGroup,
        num_new: int,
        is_prefill: bool,
        copies: tuple[BlockCopy, ...] = (),
    ) -> None:
        """`group` computes `num_new` tokens per sequence this step, its slots allocated with
        these copy-on-write copies. Its entries carry contexts as of now: nothing changes a
        scheduled group before the plan is built."""
        if copies:
            self.copies.extend(copies)
        rid = group.request.request_id
        self.num_requests += 1
        context = group.num_computed + num_new
        seq_ids = group.seq_ids
        append = self.work.append
        for seq_id in seq_ids:
            append(seq_work_of((rid, seq_id, num_new, context, is_prefill)))
        self.num_context_tokens += context * len(seq_ids)
        if is_prefill:
            self.num_prefill_tokens += num_new * len(seq_ids)
            self.num_prefill_seqs += len(seq_ids)
        else:
            self.num_decode_tokens += num_new * len(seq_ids)

    def remove(self, group: SeqGroup) -> None:
        """Take back `group`'s entries, added earlier in this step (a request preempted after
        it was scheduled: vLLM V1's priority rule). Its blocks are the caller's to free; V1's
        groups make no copy-on-write copies, so none is taken back."""
        rid = group.request.request_id
        mine = [item for item in self.work if item.request_id == rid]
        assert mine, f"request {rid} is not in this step"
        self.work = [item for item in self.work if item.request_id != rid]
        self.num_requests -= 1
        for item in mine:
            self.num_context_tokens -= item.context_len
            if item.is_prefill:
                self.num_prefill_tokens -= item.num_new_tokens
                self.num_prefill_seqs -= 1
            else:
                self.num_decode_tokens -= item.num_new_tokens

    def plan(self) -> StepPlan:
        """The step's plan, its totals derived as StepPlan.build derives them, from the counts
        kept as entries were added."""
        work = tuple(self.work)
        copies = tuple(self.copies)
        swap_out, swap_in = self.swap_out, self.swap_in
        prefill_tokens, decode_tokens = self.num_prefill_tokens, self.num_decode_tokens
        num_seqs, prefill_seqs = len(work), self.num_prefill_seqs
        return StepPlan(
            work,
            tuple(self.preemptions),
            swap_out,
            swap_in,
            copies,
            prefill_tokens,
            decode_tokens,
            prefill_seqs,
            num_seqs - prefill_seqs,
            self.num_requests,
            0,
            self.num_context_tokens,
            work,
            prefill_tokens + decode_tokens,
            num_seqs,
            bool(copies or swap_out or swap_in),
            not (num_seqs or swap_out or swap_in),
        )


# A policy's running-phase rule: (group, budget left) -> (tokens per sequence, budget tokens,
# is_prefill), or None when the group sits this step out (`DecodeGroup.schedule_running`).
Demand = Callable[[SeqGroup, int], tuple[int, int, bool] | None]
# The state's way to put a group and its allocation into the step (PagedState.add_to_step).
AddToStep = Callable[["StepBuilder", SeqGroup, int, bool, tuple[BlockCopy, ...]], None]
