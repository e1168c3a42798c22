"""What every policy answers the same way: the defaults of the engine-facing protocol
(`core.scheduler.Scheduler`) and the reasons a request can never run."""

from __future__ import annotations

from pagesim.simulator.core.config import SystemConfig
from pagesim.simulator.core.defaults import knobs_of
from pagesim.simulator.core.request import Request


class PolicyBase:
    """Defaults for the optional parts of the protocol; a policy overrides what differs."""

    def __init__(self, system: SystemConfig, max_seq_len: int) -> None:
        self.system = system
        self.knobs = knobs_of(system)
        self.max_seq_len = max_seq_len
        self.arrivals_done = False
        self.num_output_tokens = 0  # tokens produced, one per sequence: counted in `complete`
        # Batch slots for slot utilization: the most sequences one iteration may hold.
        self.batch_capacity = self.knobs.max_num_seqs

    def next_wakeup_s(self, now_s: float) -> float | None:
        """A time to re-plan although nothing arrives (static batching's fill timeout)."""
        return None

    def mark_arrivals_done(self) -> None:
        self.arrivals_done = True

    def prefix_hit_rate(self) -> float | None:
        """Share of prompt tokens served from the prefix cache; None without a prefix cache."""
        return None

    def prefix_readmit_hit_rate(self) -> float | None:
        """The same over re-admissions after recompute preemption; None without any."""
        return None

    def too_long_reason(self, request: Request) -> str | None:
        if request.prompt_len >= self.max_seq_len:
            return (
                f"prompt of {request.prompt_len} tokens reaches the model's maximum length "
                f"of {self.max_seq_len}"
            )
        return None

    def too_many_seqs_reason(self, request: Request) -> str | None:
        if request.num_seqs > self.knobs.max_num_seqs:
            return (
                f"decodes {request.num_seqs} sequences; max_num_seqs is {self.knobs.max_num_seqs}"
            )
        return None
