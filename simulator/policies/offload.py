"""A vLLM V1 replica's KV offload tier in CPU memory, as vLLM's OffloadingConnector runs it
(vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py, v0.11.0; offloading/
scheduler.py of v0.33.0 and v0.34.0; the tier itself: kv/offload_tier.py).

Stores, as computed: after every step, the blocks the step filled are written to the tier over
the GPU -> host link, asynchronously (a CUDA stream of their own, started after the forward
pass: `wait_for_save` -> `start_store_kv`), so they take no time of the step; a block can be hit
only once its store ended. v0.11.0 stores every full block; from v0.33.0 prompt blocks only
(`offload_prompt_only`, default True: a decode's blocks are skipped). A block the tier holds
already is not written again; a store that finds no room is dropped ("Cannot store").

Loads, asynchronous: a waiting request's prompt is looked up on the GPU first, then the blocks
after its GPU hit in the tier (`get_num_new_matched_tokens`); with a hit of a block or more it
is given blocks for them and parks (WAITING_FOR_REMOTE_KVS) while they cross the host -> GPU
link, so other requests' steps go on and its own first chunk waits (`load_kv_async`: v0.34.0's
synchronous loads are off by default, `sync_load_budget_bytes` 0). When the load ends the
blocks count as computed and cached on the GPU, and the request is admitted for the rest of its
prompt (policies/remote_kv.py's landed requests: policies/admission.py `_admit_remote`).

Each direction of the link is one queue: a transfer starts when the previous one ended, and
takes bytes / bandwidth (each tensor-parallel rank moves its own shard over its own link,
`block_bytes` being one rank's). Private blocks (no other request can hit them: policies/
group_hashes.py) are stored too, under keys nothing looks up, as vLLM stores them.

Simplifications, each small: a load stops one block short of the prompt's end, as the GPU
prefix cache's lookup does (vLLM loads that block too and recomputes its last token); a finished
request's blocks are freed at once (vLLM keeps them until their stores end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from pagesim.simulator.core.catalog import GIB
from pagesim.simulator.core.config import NEWEST_VLLM, SystemConfig, VllmVersion
from pagesim.simulator.core.defaults import knobs_of
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.kv.block_budget import Capacity
from pagesim.simulator.kv.offload_tier import OffloadTier
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.pieces import PrefixStats, WaitingQueue
from pagesim.simulator.policies.seq_group import SeqGroup


class PagedState(Protocol):
    """What the tier reads and changes of a paged scheduler's state (policies/paged_state.py;
    named by its attributes, not imported: the state holds the tier)."""

    @property
    def kv(self) -> object: ...
    @property
    def block_size(self) -> int: ...
    @property
    def prefix_stats(self) -> PrefixStats: ...
    @property
    def groups(self) -> dict[int, SeqGroup]: ...
    @property
    def receiving(self) -> dict[int, SeqGroup]: ...
    @property
    def landed(self) -> dict[int, SeqGroup]: ...
    @property
    def waiting(self) -> WaitingQueue[SeqGroup]: ...
    def reserve(self) -> int: ...


GB = 1e9


class LoadOutcome(Enum):
    NO_HIT = "no hit"  # nothing to load: admit as usual
    PARKED = "parked"  # loading: out of the waiting queue until it lands
    NO_ROOM = "no room"  # a hit, but its blocks do not fit now: the waiting loop stops


@dataclass
class LinkQueue:
    """One direction of the host link: transfers one after another at `bps` bytes/s."""

    bps: float
    busy_until_s: float = 0.0
    busy_s: float = 0.0  # time spent moving bytes
    num_transfers: int = 0
    wait_s: float = 0.0  # sum over transfers of (end - asked), queueing included

    def transfer(self, num_bytes: float, now_s: float) -> float:
        """When a transfer of `num_bytes` asked for at `now_s` ends."""
        start = max(now_s, self.busy_until_s)
        duration = num_bytes / self.bps
        self.busy_until_s = start + duration
        self.busy_s += duration
        self.num_transfers += 1
        self.wait_s += self.busy_until_s - now_s
        return self.busy_until_s


@dataclass
class Offload:
    """The tier, its two links and the requests loading from it."""

    tier: OffloadTier
    load_link: LinkQueue
    store_link: LinkQueue
    block_bytes: int
    prompt_only: bool
    loading: dict[int, tuple[float, int]] = field(default_factory=dict)  # rid -> (ends, tokens)
    _next_store: dict[int, int] = field(default_factory=dict)  # rid -> next block to store
    _step: list[tuple[SeqGroup, int]] = field(default_factory=list)  # (group, computed before)
    num_hit_tokens: int = 0  # tier hits of first admissions (PrefixStats' split)
    num_readmit_hit_tokens: int = 0
    num_loaded_blocks: int = 0

    # -- loads -------------------------------------------------------------------------------
    def try_load(self, state: PagedState, group: SeqGroup, now_s: float) -> LoadOutcome:
        """Look `group`'s prompt up past its GPU hit; park it loading what the tier holds."""
        kv = state.kv
        assert isinstance(kv, PagedKVCache) and group.hashers is not None
        hashes = group.hashers[0].block_hashes()
        bs = state.block_size
        max_blocks = min(len(hashes), max(0, (group.target - 1) // bs))
        self.tier.touch(hashes[:max_blocks])
        first = kv.count_prefix_hit_tokens(hashes, group.target) // bs
        num_hits = self.tier.lookup(hashes[first:max_blocks], now_s)
        if not num_hits:
            return LoadOutcome.NO_HIT
        seq_id = group.seq_ids[0]
        num_gpu = kv.add_seq(
            seq_id, hashes, num_prompt_tokens=group.target, final_len=group.final_len
        )
        if kv.allocate_slots((seq_id,), num_hits * bs, state.reserve()) is None:
            kv.free(seq_id)
            return LoadOutcome.NO_ROOM
        request = group.request
        state.prefix_stats.record(request, group.target, num_gpu)
        loaded = num_hits * bs
        if request.num_preemptions:
            self.num_readmit_hit_tokens += loaded
        else:
            self.num_hit_tokens += loaded
        request.num_cached_tokens += num_gpu + loaded
        request.num_recomputed_tokens += max(0, group.num_dropped - num_gpu - loaded)
        group.num_dropped = 0
        group.num_computed = num_gpu
        ends_s = self.load_link.transfer(num_hits * self.block_bytes, now_s)
        self.tier.load(hashes[first : first + num_hits], ends_s)
        self.num_loaded_blocks += num_hits
        self.loading[request.request_id] = (ends_s, num_gpu + loaded)
        state.receiving[request.request_id] = group
        return LoadOutcome.PARKED

    def next_landing_s(self) -> float | None:
        return min((ends for ends, _ in self.loading.values()), default=None)

    def land(self, state: PagedState, now_s: float) -> None:
        """Requests whose loads ended by `now_s` (in the order they end): their loaded blocks
        computed and cached on the GPU, and they wait for admission."""
        done = sorted((ends, rid) for rid, (ends, _) in self.loading.items() if ends <= now_s)
        for _, rid in done:
            _, tokens = self.loading.pop(rid)
            group = state.receiving.pop(rid)
            kv = state.kv
            assert group.hashers is not None and isinstance(kv, PagedKVCache)
            kv.commit(group.seq_ids[0], tokens, group.hashers[0].block_hashes())
            group.num_computed = tokens
            group.is_remote = True
            state.landed[rid] = group
            state.waiting.push(group)

    # -- stores ------------------------------------------------------------------------------
    def note_step(self, state: PagedState, plan: StepPlan) -> None:
        """Before a step completes: its groups and what each had computed."""
        groups = state.groups
        seen: set[int] = set()
        self._step = []
        for rid, *_ in plan.listed_work:
            if rid not in seen and rid in groups:
                seen.add(rid)
                group = groups[rid]
                self._step.append((group, group.num_computed))

    def store_step(self, state: PagedState, now_s: float) -> None:
        """After the step: store the blocks it filled (see the module docstring)."""
        bs = state.block_size
        for group, before in self._step:
            rid = group.request.request_id
            full = group.num_computed // bs
            if self.prompt_only:
                full = min(full, group.request.prompt_len // bs)
            start = max(self._next_store.get(rid, 0), 0)
            if full <= start or group.num_computed < before:
                continue
            keys = _keys(group, start, full)
            nbytes = len([k for k in keys if k not in self.tier]) * self.block_bytes
            ends_s = self.store_link.transfer(nbytes, now_s) if nbytes else now_s
            written = self.tier.store(keys, now_s, ends_s)
            if written is None:
                break  # vLLM stops storing for this step
            self.tier.touch(_keys(group, 0, full))
            self._next_store[rid] = full
        self._step = []

    # -- figures -----------------------------------------------------------------------------
    def summary(self, state: PagedState, end_s: float) -> dict[str, float | int | None]:
        queried = state.prefix_stats.num_query_tokens
        tier, load, store = self.tier, self.load_link, self.store_link
        return {
            "offload_cpu_blocks": tier.num_blocks,
            "offload_hit_rate": self.num_hit_tokens / queried if queried else None,
            "offload_loaded_blocks": self.num_loaded_blocks,
            "offload_stored_blocks": tier.num_stored,
            "offload_evicted_blocks": tier.num_evicted,
            "offload_refused_blocks": tier.num_refused,
            "offload_load_wait_mean_s": load.wait_s / load.num_transfers
            if load.num_transfers
            else None,
            "offload_store_wait_mean_s": store.wait_s / store.num_transfers
            if store.num_transfers
            else None,
            # transfer time asked of each direction / the run: above 1 it cannot keep up
            "offload_load_link_demand": load.busy_s / end_s if end_s > 0 else None,
            "offload_store_link_demand": store.busy_s / end_s if end_s > 0 else None,
        }


def _keys(group: SeqGroup, start: int, end: int) -> list[int]:
    """The tier's keys of `group`'s blocks start..end-1: their hashes, or for a private group
    keys no lookup asks for (negative: hashes are not)."""
    if group.hashers is not None:
        hashes = group.hashers[0].block_hashes()
        if len(hashes) >= end:
            return list(hashes[start:end])
    rid = group.request.request_id
    return [-(1 + (rid << 24) + i) for i in range(start, end)]


def make_offload(
    system: SystemConfig, block_bytes: int, tensor_parallel: int, host_link_bps: float
) -> Offload:
    """The tier of `system` ([systems.kv_offload]) on a replica of `tensor_parallel` GPUs."""
    config = system.kv_offload
    assert config is not None
    per_rank = config.cpu_gib * GIB / tensor_parallel
    num_blocks = int(per_rank // block_bytes)
    if num_blocks < 1:
        raise InputError(
            f"system {system.name!r}: kv_offload.cpu_gib: {config.cpu_gib:g} GiB over "
            f"{tensor_parallel} GPU(s) holds no KV block of {block_bytes:,} bytes; give at least "
            f"{block_bytes * tensor_parallel / GIB:.3g} GiB"
        )
    load = config.load_gbps * GB if config.load_gbps is not None else host_link_bps
    store = config.store_gbps * GB if config.store_gbps is not None else host_link_bps
    # `offload_prompt_only` (default True) is in v0.33.0's kv_offload/base.py and not in
    # v0.11.0's connector; the release between that brought it was not bisected.
    version = system.vllm_version or NEWEST_VLLM
    return Offload(
        OffloadTier(num_blocks),
        LinkQueue(load),
        LinkQueue(store),
        block_bytes,
        prompt_only=version is not VllmVersion.V0_11,
    )


def offload_refusal(
    system: SystemConfig, capacity: Capacity, tensor_parallel: int
) -> tuple[str, str] | None:
    """(the [systems.kv_offload] key at fault, why) the system cannot run its tier, or None."""
    config = system.kv_offload
    if config is None:
        return None
    if capacity.layout is not None:
        return "cpu_gib", (
            "a tier is modelled for one KV layout: not for a model with sliding-window or state "
            "layers under the hybrid KV-cache manager"
        )
    if not knobs_of(system).enable_prefix_cache:
        return "cpu_gib", "needs enable_prefix_cache: the tier is found by block hash"
    if system.speculative is not None:
        return "cpu_gib", "not modelled with speculative decoding"
    per_rank = config.cpu_gib * GIB / tensor_parallel
    if per_rank < capacity.block_bytes:
        need = capacity.block_bytes * tensor_parallel / GIB
        return "cpu_gib", (
            f"{config.cpu_gib:g} GiB over {tensor_parallel} GPU(s) holds no KV block of "
            f"{capacity.block_size} tokens ({capacity.block_bytes:,} bytes per GPU); give at "
            f"least {need:.3g} GiB"
        )
    return None


def attach_offload(
    scheduler: object,
    system: SystemConfig,
    capacity: Capacity,
    tensor_parallel: int,
    host_bps: float,
) -> None:
    """Give a V1 paged scheduler its system's tier (InputError where it cannot run one; a
    scenario's check refuses the same, naming the key: scenario/systems.py)."""
    if system.kv_offload is None:
        return
    refusal = offload_refusal(system, capacity, tensor_parallel)
    state = getattr(scheduler, "state", None)  # a paged scheduler's (policies/paged.py)
    if refusal is not None or state is None or not hasattr(state, "offload"):
        why = refusal[1] if refusal is not None else "a tier needs policy vllm-v1"
        raise InputError(f"system {system.name!r}: kv_offload: {why}")
    state.offload = make_offload(system, capacity.block_bytes, tensor_parallel, host_bps)


def offload_summary(scheduler: object, end_s: float) -> dict[str, float | int | None]:
    """The tier's summary keys (none without a tier)."""
    state = getattr(scheduler, "state", None)
    offload = getattr(state, "offload", None)
    if state is None or not isinstance(offload, Offload):
        return {}
    return offload.summary(state, end_s)
