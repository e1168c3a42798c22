"""The speculative-decoding state of a V1 PagedState: its demand rule, its lookahead slots, and
the seeded acceptance draws with their counts (the rules and their vLLM sources:
simulator/policies/speculative.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagesim.simulator.core.config import SpecMethod, SpeculativeConfig
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies.seq_group import SeqGroup

SPEC_STREAM = 0x5EC  # the RNG stream of acceptance draws: seeded (scenario seed, this)


@dataclass(slots=True)
class SpecStats:
    """What the verifications did, over the whole run."""

    num_verifications: int = 0  # sequence-steps that verified at least one draft
    num_draft_tokens: int = 0  # drafts scheduled (and priced)
    num_accepted_tokens: int = 0  # drafts accepted, as vLLM counts them (before check_stop)
    num_emitted_tokens: int = 0  # tokens the verifications produced (accepted + 1, trimmed)

    def summary(self) -> dict[str, float | int | None]:
        drafts, verifications = self.num_draft_tokens, self.num_verifications
        accepted = self.num_accepted_tokens
        return {
            "spec_num_draft_tokens": drafts,
            "spec_num_accepted_tokens": accepted,
            "spec_acceptance_rate": accepted / drafts if drafts else None,
            "spec_mean_accepted_tokens": accepted / verifications if verifications else None,
            # vLLM's metrics (v1/spec_decode/metrics.py SpecDecodingLogging): draft acceptance
            # rate = accepted / draft tokens; mean acceptance length = 1 + accepted / num_drafts,
            # num_drafts counting verifications ("conventionally ... includes the bonus token").
            "spec_mean_acceptance_length": 1 + accepted / verifications if verifications else None,
        }


class SpecDecoder:
    """The speculative-decoding side of a V1 PagedState: demand, lookahead, verification."""

    def __init__(
        self, config: SpeculativeConfig, max_seq_len: int, seed: int, replica: int = 0
    ) -> None:
        self.config = config
        self.k = config.num_speculative_tokens
        self.lookahead = 0 if config.method is SpecMethod.NGRAM else self.k
        self.max_seq_len = max_seq_len
        self._cdf = np.cumsum(np.asarray(config.accepted_pmf(), dtype=float))
        # A fleet's replicas draw apart (replica 0, a single run's, keeps the stream it had).
        stream = (seed, SPEC_STREAM) if replica == 0 else (seed, SPEC_STREAM, replica)
        self._rng = np.random.default_rng(stream)
        self.stats = SpecStats()
        # Requests admitted this step with placeholder drafts (policies/admission.py): their
        # verification rejects them all. Emptied when the step completes.
        self.padded: set[int] = set()

    # -- scheduling -------------------------------------------------------------------------
    def demand(self, group: SeqGroup, budget: int, chunk_cap: int) -> tuple[int, bool] | None:
        """(tokens per sequence, is_prefill) a running group asks of a step with `budget`
        tokens left: its next prompt chunk, or 1 + k decode tokens trimmed to the budget and
        to the model's maximum length; None when nothing can be scheduled."""
        if group.num_computed < group.target:
            return min(group.target - group.num_computed, budget, chunk_cap), True
        # (At the maximum length vLLM's check_stop ends the request; a workload keeps requests
        # within it, and one that is not still decodes one token a step here.)
        room = max(1, self.max_seq_len - 1 - group.num_computed)
        return min(1 + self.k, budget, room), False

    def slots_to_append(self, kv: PagedKVCache, group: SeqGroup, num_new: int) -> int:
        """Slots the group's sequence must gain so it holds computed + num_new + lookahead
        (at most max_model_len): `allocate_slots` with `num_lookahead_tokens`."""
        scheduled = group.num_computed + num_new
        need = max(scheduled, min(scheduled + self.lookahead, self.max_seq_len))
        return max(0, need - kv.num_tokens(group.seq_ids[0]))

    def peak_slots(self, total_len: int, output_len: int) -> int:
        """The most slots a request ever holds: at its last decode step, computed = total - 2,
        plus 1 + k scheduled, plus the lookahead (a one-token answer has no decode step: its
        prompt's last chunk and the lookahead)."""
        drafts = self.k if output_len >= 2 else 0
        return max(total_len - 1, min(total_len - 1 + drafts + self.lookahead, self.max_seq_len))

    # -- verification -----------------------------------------------------------------------
    def verify_placeholders(self, num_drafts: int) -> int:
        """A padded admission's verification: its placeholder drafts (token id -1) are all
        rejected (v1/worker/gpu/spec_decode/rejection_sampler_utils.py, v0.34.0), and vLLM's
        metrics count them as drafted, none accepted (Scheduler.update_from_output). Returns 0."""
        stats = self.stats
        stats.num_verifications += 1
        stats.num_draft_tokens += num_drafts
        return 0

    def verify(self, num_drafts: int) -> int:
        """Accepted drafts of one verification of `num_drafts` (drawn; counted)."""
        if num_drafts <= 0:
            return 0
        drawn = int(np.searchsorted(self._cdf, self._rng.random(), side="right"))
        accepted = min(drawn, num_drafts)
        stats = self.stats
        stats.num_verifications += 1
        stats.num_draft_tokens += num_drafts
        stats.num_accepted_tokens += accepted
        return accepted
