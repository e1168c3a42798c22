"""The fast path: lone decoding sequences advanced as one group, without per-sequence work.

Most of a long run's sequence-steps are single-sequence requests decoding: each step appends one
slot, commits it and produces one token, and nothing else about the sequence changes until its
last block fills or it finishes. A member of the group keeps the state it had when it joined
(its KV tokens n0 and generated tokens g0 at group step j); at group step K it truly holds
base + K tokens (base = n0 - j) and has generated g0 + K - j. Two calendars say when a member
needs attention:

    cross  every K with (base + K) % block_size == 0    its next token needs a new block: the
           step allocates it (`PagedKVCache.allocate_slots`, the slots it skipped included) if
           the step's blocks all fit, else everyone is handled one by one, as room may have to
           be made. Periodic, so a member sits in one of block_size buckets (K % block_size)
           for as long as it stays: no per-crossing calendar work.
    finish j + Request.num_tokens_left at joining      its last token appears (the one rule of
           token production, `Request.produce_token`, applied K - j times): it leaves.

Between events the group's totals follow in closed form from a few running sums, so a step
costs work proportional to what changes, not to the batch. Leaving (`release`) brings the
member's SeqGroup, Request and KV sequence up to date exactly as the per-step path would have:
the KV cache learns of its skipped slots and commits them then.

The decisions stay the general path's: a policy's running phase passes its own demand rule
(`schedule_running`, one of the few calls policies/grouping.py lets the per-step path make),
which this module applies to every non-member, and a step is grouped only when it is exactly
what the per-step path would do (everyone decodes, nothing needs room made).
`tests/simulator/fastpath/test_fast_path.py` runs both paths on random scenarios with invariants
checked after every step and counts the steps that took this one.

With a prefix cache, a member's generated tokens extend its block hashes and its full blocks are
registered when it leaves, not block by block: those hashes name its own generated tokens, which
no other sequence holds, so nothing can hit them meanwhile, and its blocks stay referenced (hence
neither free nor evictable) until it leaves.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from functools import partial
from itertools import compress

from pagesim.simulator.core.memory import MemoryRow
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import GENERATED_SEGMENT
from pagesim.simulator.fastpath.grouped_plan import GroupedStepPlan, grouped_step_plan
from pagesim.simulator.fastpath.grouped_preemption import preempting_running_phase
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.grouping import Preempter
from pagesim.simulator.policies.seq_group import AddToStep, Demand, SeqGroup, StepBuilder


class _Member:
    """A member's state at joining, and what the KV cache has been told of it since. Made
    only by `DecodeGroup.join_all`, which sets every field itself (`_new_member`: no __init__
    call a join)."""

    __slots__ = ("base", "cap", "final_len", "g0", "group", "j", "n0", "synced")
    group: SeqGroup
    j: int  # group step at joining
    base: int  # its KV tokens then minus j: its entry in DecodeGroup.bases, kept at hand
    n0: int  # its KV tokens then (all committed)
    g0: int  # its output tokens then
    cap: int  # min(final length, slots allocated)
    final_len: int
    synced: int  # slots the KV cache holds for it (appended, maybe uncommitted)


_new_member = partial(object.__new__, _Member)


class DecodeGroup:
    """Members and their calendars; `step` counts the engine steps the members decoded in."""

    def __init__(self, kv: PagedKVCache, keeps_block_per_seq: bool = False) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        # vLLM V0 decodes a request only while a block per sequence is free, whether or not its
        # token needs one (policies/vllm_v0.py grow_running): a step is summed only if, its
        # blocks taken, a block per sequence of the widest group it visits is still free, and a
        # run (decode_window.py) keeps one block free after each step's crossings.
        self.keeps_block_per_seq = keeps_block_per_seq
        self.step = 0
        # member -> its KV tokens minus the group step: at step K it holds base + K tokens.
        # Plans keep it as a snapshot (`snapshot_bases`): it is copied before the next change,
        # which most steps (no member joins or leaves) never make.
        self.bases: dict[SeqGroup, int] = {}
        self._is_bases_shared = False
        self._members: dict[int, _Member] = {}  # by seq id
        # K % block_size -> seq ids of the members crossing a block boundary at step K.
        self._crossing_at: list[set[int]] = [set() for _ in range(self.block_size)]
        # (finish step, seq id, join serial, member): stale once that member left.
        self._finish: list[tuple[int, int, int, _Member]] = []
        self._num_joins = 0
        # What a run of pure steps (decode_window.py) reads, a few times a run: the same objects
        # as the private names (never rebound, emptied in place), as attributes, not properties
        # (a property read is a Python call in 3.11).
        self.members = self._members
        self.finish_calendar = self._finish
        self.crossing_calendar = self._crossing_at
        self.sum_base = 0  # sum of bases (read by a run, decode_window.py: an attribute)
        self._sum_join = 0  # sum of j
        self._sum_cap = 0  # sum of caps

    def __len__(self) -> int:
        return len(self.bases)

    # -- membership -------------------------------------------------------------------------
    def join(self, group: SeqGroup) -> None:
        """`group` (one sequence, decoding, its step committed) advances with the group."""
        self.join_all((group,))

    def join_all(self, groups: Sequence[SeqGroup]) -> None:
        """Each of `groups` joins in turn, as by `join`: a step after one that released every
        member (to make room) rejoins a hundred or more, so the lookups are made once."""
        if not groups:
            return
        j = self.step
        bs = self.block_size
        bases = self._own_bases()
        members = self._members
        crossing_at = self._crossing_at
        finish = self._finish
        num_joins = self._num_joins
        sum_base = sum_cap = 0
        for group in groups:
            n0 = group.num_computed
            request = group.request
            final_len = request.prompt_len + request.output_len - 1  # group.final_len, inlined
            cap = -(-n0 // bs) * bs
            if final_len < cap:
                cap = final_len
            num_tokens_left = request.output_len - request.num_generated  # (the property's)
            assert final_len >= n0 and num_tokens_left > 0
            seq_id = group.seq_ids[0]
            base = n0 - j
            bases[group] = base
            member = _new_member()  # its fields set here, in `_Member`'s order
            member.group = group
            member.j = j
            member.base = base
            member.n0 = n0
            member.g0 = request.num_generated
            member.cap = cap
            member.final_len = final_len
            member.synced = n0
            members[seq_id] = member
            sum_base += base
            sum_cap += cap
            crossing_at[-base % bs].add(seq_id)
            num_joins += 1
            heapq.heappush(finish, (j + num_tokens_left, seq_id, num_joins, member))
        self._num_joins = num_joins
        self.sum_base += sum_base
        self._sum_join += j * len(groups)
        self._sum_cap += sum_cap

    def release(self, group: SeqGroup) -> None:
        """Take `group` out, its state brought up to date (the steps it advanced, one by one)."""
        seq_id = group.seq_ids[0]
        member = self._members.pop(seq_id)
        base = self._own_bases().pop(group)
        self._crossing_at[-base % self.block_size].remove(seq_id)
        self.sum_base -= base
        self._sum_join -= member.j
        self._sum_cap -= member.cap
        self._catch_up(member)

    def release_all(self) -> None:
        """Every member leaves, as by `release` one by one, but the group's own bookkeeping is
        emptied at once: a step that must make room releases a hundred members or more."""
        for member in self._members.values():
            self._catch_up(member)
        self._members.clear()
        self.bases = {}  # a new dict: a plan may hold the old one as its snapshot
        self._is_bases_shared = False
        for due in self._crossing_at:
            due.clear()
        self._finish.clear()  # every entry is stale now
        self.sum_base = self._sum_join = self._sum_cap = 0

    def _catch_up(self, member: _Member) -> None:
        """The member's K - j skipped steps, applied at once: tokens, output and KV."""
        group = member.group
        num_steps = self.step - member.j
        num_tokens = member.n0 + num_steps
        group.num_computed = num_tokens
        group.request.num_generated = member.g0 + num_steps
        seq_ids = group.seq_ids
        kv = self.kv
        hashers = group.hashers
        if hashers is None:
            kv.fill_computed(seq_ids[0], num_tokens)  # its skipped slots, within its blocks
            return
        if kv.allocate_slots(seq_ids, num_tokens - member.synced) is None:  # within its blocks
            raise AssertionError(f"seq {seq_ids[0]}: its skipped slots left its blocks")
        # One generated token a step (the last one's extension is never read: a member leaving
        # finished is freed next, and only blocks up to `num_tokens` are registered).
        hashers[0].extend((GENERATED_SEGMENT, seq_ids[0]), num_steps)
        kv.commit(seq_ids[0], num_tokens, hashers[0].block_hashes())

    # -- a step -----------------------------------------------------------------------------
    def others(self, running: Sequence[SeqGroup]) -> list[int]:
        """Indices in `running` (which holds every member) of the groups that are no member.
        Most steps have none, known from the counts alone; otherwise looked for from the end,
        where they nearly always are (a request joins when its prompt is done, and requests
        are admitted, swapped in or re-admitted at the end): the walk stops at the last one."""
        num_others = len(running) - len(self.bases)
        if not num_others:
            return []
        bases = self.bases
        if num_others == 1 and running[-1] not in bases:
            return [len(running) - 1]  # one, the last (a prompt in chunks: most planned steps)
        found: list[int] = []
        for i in range(len(running) - 1, -1, -1):
            if running[i] not in bases:
                found.append(i)
                if len(found) == num_others:
                    break
        found.reverse()
        return found

    def crossing(self) -> list[int]:
        """Seq ids (ascending) of the members whose token this step needs a new block. The
        caller either gives each its block (`grow`) or releases every member."""
        return sorted(self._crossing_at[self.step % self.block_size])

    def grow(self, crossing: list[int]) -> int:
        """Each crossing member (this step's, `crossing()`) takes a new block (the pool has
        them) and stays a member: `grow_ahead(1)`. Returns the slots the members' caps gained
        (`num_reserved_slots` grows by that much)."""
        if not crossing:
            return 0
        # `grow_ahead(1)` for the one step, its crossing members already sorted (hot: most
        # steps planned one by one grow a few members).
        members = self._members
        held = self.step + 1  # each holds base + step tokens, all in full blocks
        tokens: list[int] = []
        bs = self.block_size
        gained = len(crossing) * bs  # a block's slots each, less any past a final length
        for seq_id in crossing:  # as in grow_ahead
            member = members[seq_id]
            member_tokens = member.base + held
            tokens.append(member_tokens)
            member.synced = member_tokens
            cap = member.cap + bs
            if cap > member.final_len:  # its last block: the cap stops at its final length
                gained -= cap - member.final_len
                cap = member.final_len
            member.cap = cap
        self.kv.append_blocks(crossing, tokens)  # one block each
        self._sum_cap += gained
        return gained

    def grow_one(self, seq_id: int) -> bool:
        """`grow([seq_id])` if the pool has a block for it (True), else nothing (False)."""
        member = self._members[seq_id]
        count = member.base + self.step + 1 - member.synced
        copies = self.kv.allocate_slots((seq_id,), count)
        if copies is None:
            return False
        assert not copies, "a lone sequence's last block is never shared"
        member.synced += count
        cap = member.cap
        new_cap = cap + self.block_size  # a block more, up to its final length
        if new_cap > member.final_len:
            new_cap = member.final_len
        member.cap = new_cap
        self._sum_cap += new_cap - cap
        return True

    def grow_ahead(self, num_steps: int) -> tuple[list[int], list[int]]:
        """`grow(crossing())` at the start of each of the group's next `num_steps` steps, from
        `step` on, as if it advanced in between but without advancing it (the caller does,
        and no member may leave meanwhile): a run of pure steps (decode_window.py) takes all
        their blocks in one allocation, in the per-step order (step by step, each step's
        crossing members by seq id). Returns each step's cap gain (slots) and blocks taken."""
        bs = self.block_size
        members = self._members
        seq_ids: list[int] = []
        tokens: list[int] = []
        sizes = [0] * num_steps  # crossing members per step
        gains = [0] * num_steps
        step = self.step
        # The calendar's buckets in the steps' order (step i's: (step + i) % bs), those with
        # nobody crossing skipped in C: about half the steps of a run, a member or two each of
        # the others (a ten-member group, a block of 16 tokens).
        at = step % bs
        crossing_at = self._crossing_at
        if at + num_steps <= bs:  # no wrap round (the usual run, a few steps): one slice
            window = crossing_at[at : at + num_steps]
        else:
            window = crossing_at[at:] + crossing_at[:at]
            if num_steps > bs:
                window *= -(-num_steps // bs)
        # Each crossing member's new state is written as it is listed (`_grew` inlined: one
        # pass, not two), before the blocks are taken: the caller counted them as free, so
        # `append_blocks` cannot refuse them (if it did, a bug, the run is over anyway).
        for i in compress(range(num_steps), window):
            due = window[i]
            step_tokens = step + i + 1  # each holds base + step tokens, all in full blocks
            size = len(due)
            sizes[i] = size
            gains[i] = size * bs  # a block's slots each, less any past a final length below
            order = sorted(due) if size > 1 else due
            seq_ids += order
            for seq_id in order:
                member = members[seq_id]
                member_tokens = member.base + step_tokens
                tokens.append(member_tokens)
                member.synced = member_tokens
                cap = member.cap + bs
                if cap > member.final_len:  # its last block: the cap stops at its final length
                    gains[i] -= cap - member.final_len
                    cap = member.final_len
                member.cap = cap
        if not seq_ids:
            return gains, sizes
        self.kv.append_blocks(seq_ids, tokens)  # one block each (a member's crossing)
        self._sum_cap += sum(gains)
        return gains, sizes

    def advance(self) -> list[SeqGroup]:
        """A grouped step completed: every member gained a token. Returns the members that
        finished (released, their last token produced)."""
        self.step += 1
        due: list[SeqGroup] = []
        calendar, members = self._finish, self._members
        while calendar and calendar[0][0] <= self.step:
            _, seq_id, _, member = heapq.heappop(calendar)
            if members.get(seq_id) is member:  # else stale: it left (and maybe rejoined)
                due.append(member.group)
        for group in due:
            self.release(group)
        return due

    def complete(
        self, plan: StepPlan, now_s: float, joining: list[SeqGroup]
    ) -> tuple[int, list[SeqGroup]]:
        """`plan` ended at `now_s`: if the members took part, each produced a token and those
        whose last token it was leave (finished). Then `joining` (lone decoders whose step
        committed) join. Returns (tokens produced, finished members)."""
        num_tokens = 0
        finished: list[SeqGroup] = []
        if type(plan) is GroupedStepPlan:
            num_tokens = plan.num_grouped_members  # one token each
            finished = self.advance()  # members whose last token appeared now
            for group in finished:
                group.request.last_token_s = now_s
        self.join_all(joining)
        return num_tokens, finished

    def schedule_running(
        self,
        running: list[SeqGroup],
        step: StepBuilder,
        budget: int,
        demand: Demand,
        add_to_step: AddToStep,
        preempter: Preempter | None = None,
        now_s: float = 0.0,
    ) -> int | None:
        """The running requests' part of a step with the members summed, if it is exactly what
        the policy's per-sequence loop would do with `demand`: every member decodes (the
        budget reaches them all) and nothing needs room made (the blocks asked for fit; under
        V0 with a block per sequence of the widest group to spare: `keeps_block_per_seq`), or,
        given the policy's `preempter` (vLLM V1's), room is made as its loop would
        (grouped_preemption.py; `now_s` is then the step's time). Returns the budget left, or
        None (members released: the caller visits one by one)."""
        members = self.bases
        if not members:
            return None
        crossing = self.crossing()
        kv = self.kv
        # Replay the budget in visiting order: before the n-th other, i - n members took 1 each.
        visits: list[tuple[SeqGroup, int, bool]] = []
        spent, needed = 0, len(crossing)
        widest = 1  # the most sequences of a group visited (a member has one)
        # (`others`' count inlined: most steps have no other, and make no call.)
        others = self.others(running) if len(running) != len(members) else ()
        for n, i in enumerate(others):
            group = running[i]
            available = budget - (i - n) - spent
            if available <= 0:
                self.release_all()
                return None
            asked = demand(group, available)
            if asked is None:
                continue  # no room this step; it keeps its blocks
            num_new, tokens, is_prefill = asked
            for seq_id in group.seq_ids:
                needed += kv.num_blocks_needed(seq_id, num_new)
            if len(group.seq_ids) > widest:
                widest = len(group.seq_ids)
            spent += tokens
            visits.append((group, num_new, is_prefill))
        left = budget - spent - len(members)
        if self.keeps_block_per_seq:
            needed += widest  # free at every visit, so V0 preempts nobody (see __init__)
        is_short = needed > kv.num_free_blocks  # of blocks (nothing was taken since `needed`)
        if left >= 0 and is_short and preempter is not None:
            crossing_groups = {self._members[seq_id].group for seq_id in crossing}
            return preempting_running_phase(
                self, running, step, budget, demand, add_to_step, preempter, crossing_groups, now_s
            )
        if left < 0 or is_short:
            self.release_all()
            return None
        # Now exactly the per-sequence path's operations, in the same order but for block ids:
        # the crossing members take theirs first (which changes only which block each holds:
        # the runs are the same up to a relabelling of block ids, which nothing reads).
        self.grow(crossing)
        for group, num_new, is_prefill in visits:
            copies = kv.allocate_slots(group.seq_ids, num_new)
            assert copies is not None, "counted as fitting above"
            add_to_step(step, group, num_new, is_prefill, copies)
        step.num_decode_tokens += len(members)
        step.is_grouped = True
        return left

    def plan(self, step: StepBuilder, running: Sequence[SeqGroup]) -> GroupedStepPlan:
        """The grouped step's plan: `step`'s listed work plus the members, summed."""
        listed = tuple(step.work)
        self._is_bases_shared = True  # the plan keeps it: copied before it next changes
        return grouped_step_plan(
            listed,
            tuple(running),
            self.bases,
            self.step,
            # the listed ones' context and the members' (`num_context_tokens`, inlined)
            step.num_context_tokens + self.sum_base + len(self.bases) * (self.step + 1),
            tuple(step.preemptions),
            step.swap_out,
            step.swap_in,
            tuple(step.copies),
            step.num_prefill_tokens,
            step.num_decode_tokens,
            step.num_prefill_seqs,
            len(listed) - step.num_prefill_seqs + len(self.bases),  # decoding sequences
            step.num_requests + len(self.bases),
        )

    # -- what a run of pure steps (decode_window.py) reads ---------------------------------
    def _own_bases(self) -> dict[SeqGroup, int]:
        """`bases`, ready to change: copied first if a plan holds it as its snapshot."""
        if self._is_bases_shared:
            self.bases = dict(self.bases)
            self._is_bases_shared = False
        return self.bases

    # -- closed-form totals ---------------------------------------------------------------
    @property
    def num_context_tokens(self) -> int:
        """Members' KV tokens after this step's token (sum of their SeqWork.context_len)."""
        return self.sum_base + len(self.bases) * (self.step + 1)

    @property
    def num_deferred_computed(self) -> int:
        """Computed slots the KV cache has not committed: sum over members of K - j."""
        return len(self.bases) * self.step - self._sum_join

    @property
    def num_reserved_slots(self) -> int:
        """Members' allocated slots a later token will fill: sum of min(final, allocated) - held.

        A member's not-yet-computed slots all lie in its own last block (it takes a block only
        when its tokens fill the ones it has), so the per-block count reduces to this difference.
        """
        return self._sum_cap - self.sum_base - len(self.bases) * self.step

    def memory_row(self) -> MemoryRow:
        """The KV cache's `memory_row` where the group is all that holds blocks: its
        `num_deferred_computed` and `num_reserved_slots`, inlined (a run's every catch-up)."""
        grown = len(self.bases) * self.step
        return self.kv.memory_row(grown - self._sum_join, self._sum_cap - self.sum_base - grown)

    def memory_terms(self, running: Sequence[SeqGroup]) -> tuple[list[int], int, int] | None:
        """None without members; else (`others(running)`, `num_deferred_computed`,
        `num_reserved_slots`): the memory breakdown's closed-form part (policies/grouping.py)."""
        num_members = len(self.bases)
        if not num_members:
            return None
        grown = num_members * self.step  # the two properties' sums, inlined (every step)
        others = self.others(running) if len(running) != num_members else []  # (as above)
        return others, grown - self._sum_join, self._sum_cap - self.sum_base - grown

    def num_computed_of_members(self) -> dict[int, int]:
        """Each member's true KV tokens (all computed), by seq id: what the KV cache will be told
        when it leaves."""
        step = self.step
        return {s: self.bases[m.group] + step for s, m in self._members.items()}

    def check_invariants(self) -> dict[int, int]:
        """The running sums and calendars agree with the members (O(members)). Returns each
        member's true KV tokens (`num_computed_of_members`), for the KV cache's walk."""
        members = self._members
        assert len(members) == len(self.bases)
        assert self.sum_base == sum(self.bases.values())
        assert self._sum_join == sum(m.j for m in members.values())
        assert self._sum_cap == sum(m.cap for m in members.values())
        for seq_id, member in members.items():
            base = self.bases[member.group]
            assert seq_id in self._crossing_at[-base % self.block_size]
            assert member.group.seq_ids == [seq_id]
            held = base + self.step
            assert member.synced <= held <= member.final_len
            assert member.group.num_computed == member.n0  # caught up only when it leaves
            assert self.kv.num_tokens(seq_id) == member.synced
            assert self.kv.num_computed_tokens(seq_id) == member.n0
        assert sum(map(len, self._crossing_at)) == len(members)
        return self.num_computed_of_members()
