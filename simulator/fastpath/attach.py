"""Turning the decode fast path on for one replica: the replica loop's one way in.

The fast path works at two levels, each giving the per-step path's results bit for bit:

- The decode group (decode_group.py): a paged scheduler's lone decoding sequences advance in
  closed form, not one by one. It needs a step policy with a grouped running phase (vLLM V1's
  and V0's decode-only step), a plain paged cache (a hybrid cache frees window blocks as decodes
  advance: no closed form), no speculative decoding and no KV offload tier (which stores the
  blocks every step fills). The scheduler then asks it only what
  policies/grouping.py lists.
- Runs of pure steps (pure_runs.py): many decode steps settled in one SimPy event. Only when
  nobody looks at each step (no step hook, no invariant checks, no measured execution model,
  no block map, no replica kind whose hooks look after every step: a disaggregated fleet's) and
  the roofline prices steps without state (no layer kinds, no experts: decode_costs.py).

By default (`requested` None) the fast path is on when nobody looks at each step's
per-sequence state and the roofline prices the steps; `True` turns the decode group on also
under invariant checks, which then check it (the differential tests do).
"""

from __future__ import annotations

import simpy

from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.scheduler import Scheduler
from pagesim.simulator.execution.model import ExecutionModel
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.fastpath.decode_group import DecodeGroup
from pagesim.simulator.fastpath.pure_runs import PureRuns
from pagesim.simulator.fastpath.run_rows import RunRecorder
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.metrics.step_log import StepLog
from pagesim.simulator.policies.paged import PagedScheduler

# Off: every step its own event, the decode group still on (tests compare the two).
USE_WINDOWS = True


def attach(
    env: simpy.Environment,
    scheduler: Scheduler,
    execution: ExecutionModel,
    steps: StepLog,
    gpu: GPUSpec,
    *,
    requested: bool | None,
    is_watched: bool,
    takes_runs: bool,
) -> PureRuns | None:
    """Turn the fast path on where it applies (module docstring): the scheduler's decode group,
    and the runs of pure steps the replica's loop then takes (returned; None without them).
    `is_watched`: something looks at every step; `takes_runs`: the kind of replica lets its
    steps be settled ahead; `steps` and `gpu`: where and how the runs' rows are recorded."""
    if requested is None:
        requested = not is_watched and isinstance(execution, RooflineModel)
    if not requested or not isinstance(scheduler, PagedScheduler):
        return None
    group = enable_decode_group(scheduler)
    if group is None or is_watched or not takes_runs or not USE_WINDOWS:
        return None
    if not isinstance(execution, RooflineModel) or not execution.prices_statelessly:
        return None
    return PureRuns(env, scheduler, group, execution, RunRecorder(steps, gpu))


def enable_decode_group(scheduler: PagedScheduler) -> DecodeGroup | None:
    """Give `scheduler` a decode group when its policy, cache and decoding allow one (module
    docstring); returns it, or None."""
    kv = scheduler.kv
    if not scheduler.policy.groups_decodes or not isinstance(kv, PagedKVCache):
        return None
    if scheduler.state.spec is not None:
        return None
    if scheduler.state.offload is not None:
        return None  # an offload tier stores the blocks of every step (policies/offload.py)
    group = DecodeGroup(kv, scheduler.state.pieces.decode_keeps_block_per_seq)
    scheduler.state.decode_group = group
    return group
