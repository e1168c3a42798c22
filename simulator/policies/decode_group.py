"""A decode group: lone sequences decoding one token a step, advanced without per-sequence work.

Most of a long run's sequence-steps are single-sequence requests decoding: each step appends one
slot, commits it and produces one token, and nothing else about the sequence changes until its
last block fills or it finishes. A member of the group keeps the state it had when it joined
(its KV tokens n0 and generated tokens g0 at group step j); at group step K it truly holds
base + K tokens (base = n0 - j) and has generated g0 + K - j. Two calendars say when a member
needs attention:

    cross  every K with (base + K) % block_size == 0    its next token needs a new block: the
           step takes one for it if the step's blocks all fit (else everyone is handled one by
           one, as room may have to be made). Periodic, so a member sits in one of block_size
           buckets (K % block_size) for as long as it stays: no per-crossing calendar work.
    finish j + output_len - g0                          its last token appears: it leaves (a
           heap of group steps)

Between events the group's totals follow in closed form from a few running sums, so a step
costs work proportional to what changes, not to the batch. Leaving (`release`) brings the
member's Group, Request and KV sequence up to date exactly as the per-step path would have.

Valid only without a prefix cache (members' blocks are then never shared, and there are no
block hashes to extend); the scheduler uses it only when nobody inspects every step.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING

from pagesim.simulator.core.plan import SeqWork, seq_work_of

if TYPE_CHECKING:
    from pagesim.simulator.kv.paged_cache import PagedKVCache
    from pagesim.simulator.policies.paged_state import Group


class DecodeGroup:
    """Members and their calendars; `step` counts completed engine steps."""

    def __init__(self, kv: PagedKVCache) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.step = 0
        # member -> its KV tokens minus the group step: at step K it holds base + K tokens.
        # Plans keep it as a snapshot (`snapshot_bases`): it is copied before the next change,
        # which most steps (no member joins or leaves) never make.
        self.bases: dict[Group, int] = {}
        self._is_bases_shared = False
        self._joined: dict[Group, tuple[int, int, int]] = {}  # member -> (j, n0, g0)
        # By a member's seq id: its final length and cap = min(final length, allocated slots).
        self._final_lens: dict[int, int] = {}
        self._caps: dict[int, int] = {}
        # K % block_size -> seq ids of the members crossing a block boundary at step K.
        self._crossing_at: list[set[int]] = [set() for _ in range(self.block_size)]
        self._finish: list[tuple[int, int, Group, int]] = []  # (step, seq id, member, j)
        self._sum_base = 0  # sum of bases
        self._sum_join = 0  # sum of j
        self._sum_cap = 0  # sum of min(final length, allocated slots)

    def __len__(self) -> int:
        return len(self.bases)

    def join(self, group: Group, final_len: int) -> None:
        """`group` (one sequence, decoding, its step committed) advances with the group."""
        j = self.step
        n0 = group.num_computed
        g0 = group.request.num_generated
        bs = self.block_size
        cap = min(final_len, -(-n0 // bs) * bs)
        assert final_len >= n0 and g0 < group.request.output_len
        seq_id = group.seq_ids[0]
        base = n0 - j
        self._own_bases()[group] = base
        self._joined[group] = (j, n0, g0)
        self._final_lens[seq_id] = final_len
        self._caps[seq_id] = cap
        self._sum_base += base
        self._sum_join += j
        self._sum_cap += cap
        self._crossing_at[-base % bs].add(seq_id)
        heapq.heappush(self._finish, (j + group.request.output_len - g0, seq_id, group, j))

    def release(self, group: Group) -> None:
        """Take `group` out, its state brought up to date (the steps it advanced, one by one)."""
        seq_id = group.seq_ids[0]
        j, n0, g0 = self._joined.pop(group)
        base = self._own_bases().pop(group)
        self._crossing_at[-base % self.block_size].remove(seq_id)
        del self._final_lens[seq_id]
        self._sum_base -= n0 - j
        self._sum_join -= j
        self._sum_cap -= self._caps.pop(seq_id)
        num_steps = self.step - j
        group.num_computed = n0 + num_steps
        group.request.num_generated = g0 + num_steps
        self.kv.advance_decoded(seq_id, num_steps)

    def crossing(self) -> list[int]:
        """Seq ids (ascending) of the members whose token this step needs a new block. The
        caller either gives each its block (`grow`) or releases every member."""
        return sorted(self._crossing_at[self.step % self.block_size])

    def grow(self, crossing: list[int]) -> None:
        """Each crossing member takes a new block (the pool has them) and stays a member."""
        if not crossing:
            return
        self.kv.reserve_blocks(crossing)
        bs = self.block_size
        caps, final_lens = self._caps, self._final_lens
        gained = 0
        for seq_id in crossing:
            # Its tokens fill its allocated slots (`cap`: below its final length, as it still
            # computes one more); now one block more.
            cap = caps[seq_id]
            new_cap = min(final_lens[seq_id], cap + bs)
            caps[seq_id] = new_cap
            gained += new_cap - cap
        self._sum_cap += gained

    def advance(self) -> list[Group]:
        """A step completed: every member gained a token. Returns the members that finished
        (released, their last token produced)."""
        self.step += 1
        due = self._pop_due(self._finish)
        for group in due:
            self.release(group)
        return due

    def others(self, running: Sequence[Group]) -> list[int]:
        """Indices in `running` (which holds every member) of the groups that are no member.
        Most steps have none, known from the counts alone; otherwise filtered in C, as the
        running list has hundreds of members and a handful of others."""
        if len(running) == len(self.bases):
            return []
        is_member = map(self.bases.__contains__, running)
        return list(compress(range(len(running)), map(not_, is_member)))

    def snapshot_bases(self) -> Mapping[Group, int]:
        """`bases` as of now, for a plan to read later: not to be changed by the caller, and
        copied by the group itself before it next changes."""
        self._is_bases_shared = True
        return self.bases

    def release_all(self) -> None:
        """Every member leaves, as by `release` one by one, but the group's own bookkeeping is
        emptied at once: a step that must make room releases a hundred members or more."""
        step = self.step
        advance_decoded = self.kv.advance_decoded
        for group, (j, n0, g0) in self._joined.items():
            num_steps = step - j
            group.num_computed = n0 + num_steps
            group.request.num_generated = g0 + num_steps
            advance_decoded(group.seq_ids[0], num_steps)
        self._joined.clear()
        self.bases = {}  # a new dict: a plan may hold the old one as its snapshot
        self._is_bases_shared = False
        self._final_lens.clear()
        self._caps.clear()
        for due in self._crossing_at:
            due.clear()
        self._finish.clear()  # every entry is stale now
        self._sum_base = self._sum_join = self._sum_cap = 0

    def _own_bases(self) -> dict[Group, int]:
        """`bases`, ready to change: copied first if a plan holds it as its snapshot."""
        if self._is_bases_shared:
            self.bases = dict(self.bases)
            self._is_bases_shared = False
        return self.bases

    def _pop_due(self, calendar: list[tuple[int, int, Group, int]]) -> list[Group]:
        """The members whose event in `calendar` falls due by this step, in calendar order."""
        due: list[Group] = []
        joined = self._joined
        while calendar and calendar[0][0] <= self.step:
            _, _, group, j = heapq.heappop(calendar)
            state = joined.get(group)
            if state is not None and state[0] == j:  # else stale: it left (and maybe rejoined)
                due.append(group)
        return due

    # -- closed-form totals ---------------------------------------------------------------
    @property
    def num_context_tokens(self) -> int:
        """Members' KV tokens after this step's token (sum of their SeqWork.context_len)."""
        return self._sum_base + len(self.bases) * (self.step + 1)

    @property
    def num_deferred_computed(self) -> int:
        """Computed slots the KV cache has not been told of: sum over members of K - j."""
        return len(self.bases) * self.step - self._sum_join

    @property
    def num_reserved_slots(self) -> int:
        """Members' allocated slots a later token will fill: sum of min(final, allocated) - held.

        A member's not-yet-computed slots all lie in its own last block (it takes a block only
        when its tokens fill the ones it has), so the per-block count reduces to this difference.
        """
        return self._sum_cap - self._sum_base - len(self.bases) * self.step

    def seq_work(self, group: Group, base: int) -> SeqWork:
        """A member's entry in a plan whose step began with `base` KV tokens."""
        return seq_work_of((group.request.request_id, group.seq_ids[0], 1, base + 1, False))
