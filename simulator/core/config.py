"""Frozen configuration of one scenario: model, GPU, execution model, workload, systems, SLO.

Parsed and validated once, at the edge, by `simulator.scenario.load` (TOML); everything inside
pagesim receives these objects and never re-reads strings. Closed sets are Enums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pagesim.simulator.core.capacity import CapacityConfig
from pagesim.simulator.core.catalog import GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.cluster import ClusterConfig
from pagesim.simulator.core.model_spec import WeightDtype
from pagesim.simulator.core.offload import KVOffloadConfig
from pagesim.simulator.core.plan import PreemptionMode
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.core.wide_ep import WideEPConfig


class Policy(Enum):
    """Batch formation."""

    STATIC = "static"  # FasterTransformer: fixed batches run to completion, max-length reservation
    ORCA = "orca"  # iteration-level scheduling, contiguous per-request reservation
    VLLM_V0 = "vllm-v0"  # paged; prefill-only or decode-only iterations; FCFS; watermark
    VLLM_V1 = "vllm-v1"  # paged; one token budget per step; chunked prefill (Sarathi-Serve)


CONTIGUOUS_POLICIES = (Policy.STATIC, Policy.ORCA)  # one contiguous KV region per sequence


class Reservation(Enum):
    """How contiguous allocators (static, orca) size a request's KV region."""

    MAX = "max"  # the model's maximum sequence length
    POW2 = "pow2"  # prompt + output rounded up to a power of two (over-reserves up to 2x)
    ORACLE = "oracle"  # exactly prompt + true output length


class ContiguousAllocator(Enum):
    """Where contiguous allocators (static, orca) place a reservation in the address space."""

    # Power-of-two blocks, split and merged with their buddies: the vLLM paper's Orca (§6.1,
    # "We assume Orca uses the buddy allocation algorithm"); simulator/kv/buddy.py.
    BUDDY = "buddy"
    FIRST_FIT = "first-fit"  # exact-size regions at the lowest hole that fits; holes merge


class PreemptionPolicy(Enum):
    SWAP = "swap"
    RECOMPUTE = "recompute"
    AUTO = "auto"  # vLLM V0's rule: recompute single sequences, swap multi-sequence groups

    def mode_for(self, num_seqs: int) -> PreemptionMode:
        # (Every preemption asks: the members read as globals, core/request.py says why.)
        if self is _SWAP_POLICY:
            return _SWAP
        if self is _RECOMPUTE_POLICY:
            return _RECOMPUTE
        return _SWAP if num_seqs > 1 else _RECOMPUTE


_SWAP_POLICY, _RECOMPUTE_POLICY = PreemptionPolicy.SWAP, PreemptionPolicy.RECOMPUTE
_SWAP, _RECOMPUTE = PreemptionMode.SWAP, PreemptionMode.RECOMPUTE


class VictimPolicy(Enum):
    LAST_ARRIVED = "last-arrived"  # vLLM: preempt the most recently arrived running request
    MOST_GENERATED = "most-generated"  # textbook: preempt the one holding the most output tokens


class AdmissionOrder(Enum):
    FCFS = "fcfs"
    PRIORITY = "priority"  # lower `priority` first, FCFS among equals


class ArrivalKind(Enum):
    POISSON = "poisson"
    GAMMA = "gamma"  # burstiness set by the coefficient of variation of inter-arrival times
    CONSTANT = "constant"
    BURST = "burst"  # everything arrives at t = 0
    TRACE = "trace"  # the timestamps of the trace


class LengthKind(Enum):
    FIXED = "fixed"
    UNIFORM = "uniform"  # integers in [low, high]
    LOGNORMAL = "lognormal"  # given mean and coefficient of variation
    EMPIRICAL = "empirical"  # resampled from a CSV column
    TRACE = "trace"  # the trace's own column, row by row


class EmpiricalPairing(Enum):
    """How `empirical` prompt and output lengths read from one file are drawn together."""

    ROWS = "rows"  # a whole row at a time: each prompt keeps the output it came with
    INDEPENDENT = "independent"  # each column resampled on its own (the pairing is lost)


class ExecutionKind(Enum):
    ROOFLINE = "roofline"
    PROFILE = "profile"


@dataclass(frozen=True, slots=True)
class LengthDist:
    kind: LengthKind
    value: int = 0  # fixed
    low: int = 1  # uniform
    high: int = 1
    mean: float = 0.0  # lognormal
    cv: float = 1.0
    path: Path | None = None  # empirical: CSV file (or a built-in trace name in `trace_name`)
    trace_name: str | None = None
    column: str | None = None


@dataclass(frozen=True, slots=True)
class ArrivalProcess:
    kind: ArrivalKind
    rate_per_s: float = 1.0  # poisson, gamma, constant
    cv: float = 1.0  # gamma: 1 is Poisson, > 1 burstier


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    """A system prompt of `num_tokens` tokens that starts a `fraction` of all requests."""

    num_tokens: int
    fraction: float


@dataclass(frozen=True, slots=True)
class ExplicitRequest:
    """One request written out in the scenario (textbook examples)."""

    prompt_len: int
    output_len: int
    arrival_s: float = 0.0
    priority: int = 0


class SampleLengths(Enum):
    """How long each of a request's n parallel samples runs."""

    SAME = "same"  # every sample ends with the request's output length (samples in lockstep)
    # Each sample's length drawn on its own from the output distribution, as samples that stop at
    # their own end-of-sequence token do; the request's output_len is the longest.
    INDEPENDENT = "independent"


@dataclass(frozen=True, slots=True)
class MooncakeTrace:
    """A Mooncake (FAST'25) trace replayed row by row: times, lengths and block hashes
    (simulator/workload/mooncake.py). Rows `offset` to `offset + num_requests` (None: all)."""

    path: Path
    trace_name: str | None = None
    offset: int = 0
    num_requests: int | None = None
    time_scale: float = 1.0  # timestamps are divided by this (2.0 replays twice as fast)


@dataclass(frozen=True, slots=True)
class SessionTrace:
    """Recorded conversations replayed at their times (simulator/workload/session_trace.py)."""

    path: Path
    time_scale: float = 1.0  # times are divided by this (2.0 replays twice as fast)


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Multi-turn conversations (simulator/workload/sessions.py). Sessions start as
    [workload.arrival] says; the first turn's prompt is [workload.prompt], every answer
    [workload.output]; each later turn's prompt is the previous prompt + its answer + `new_tokens`
    of new user text, sent `think_time_s` (mean of an exponential) after the answer ended."""

    num_sessions: int
    turns: LengthDist  # turns per session
    new_tokens: LengthDist  # new user tokens of each turn after the first
    think_time_s: float


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    arrival: ArrivalProcess
    prompt: LengthDist
    output: LengthDist
    num_requests: int | None = None  # None with a trace: every row (after offset)
    trace_name: str | None = None  # built-in trace name or a CSV path (columns as the Azure ones)
    trace_path: Path | None = None
    trace_offset: int = 0  # first trace row used
    time_scale: float = 1.0  # trace timestamps are divided by this (2.0 replays twice as fast)
    prefix_groups: tuple[PrefixGroup, ...] = ()
    sampling: SamplingKind = SamplingKind.SINGLE
    num_seqs: int = 1  # parallel samples n or beam width
    explicit: tuple[ExplicitRequest, ...] = ()  # when given, replaces every generator above
    # Prompt and output both `empirical`: None draws whole rows when they read the same file
    # (else each column on its own); ROWS insists on rows, INDEPENDENT breaks the pairing.
    empirical_pairing: EmpiricalPairing | None = None
    sample_lengths: SampleLengths = SampleLengths.SAME  # parallel samples: one length or their own
    mooncake: MooncakeTrace | None = None  # when given, replaces every generator above
    sessions: SessionConfig | None = None  # multi-turn: arrival starts sessions, not requests
    session_trace: SessionTrace | None = None  # when given, replaces every generator above


class VllmVersion(Enum):
    """The vLLM release a vllm-v1 system follows: its defaults and the scheduler and KV-cache
    rules that changed between releases (core/vllm_eras.py names each change and its release).
    Releases between these are not selectable: pagesim's rules were checked against these."""

    V0_11 = "0.11"  # v0.11.0 (Oct 2025)
    V0_33 = "0.33"  # v0.33.0
    V0_34 = "0.34"  # v0.34.0, the newest on PyPI when checked (2026-12-07)

    @property
    def release(self) -> tuple[int, int, int]:
        """(major, minor, patch) of the release, for comparing with the one a change came in."""
        major, minor = self.value.split(".")
        return int(major), int(minor), 0

    def has(self, since: tuple[int, int, int]) -> bool:
        """Whether this release has a change that arrived in release `since`."""
        return self.release >= since


NEWEST_VLLM = VllmVersion.V0_34  # a vllm-v1 system's default


class DefaultsMode(Enum):
    """Which of vLLM V1's default sets: `vllm serve` (server) or the offline `LLM` class."""

    SERVER = "server"
    OFFLINE = "offline"


class SpecMethod(Enum):
    """How speculative decoding proposes its draft tokens (vLLM `--speculative-config` method)."""

    DRAFT_MODEL = "draft-model"  # a smaller model of the same vocabulary (vLLM "draft_model")
    EAGLE = "eagle"  # an EAGLE / EAGLE-3 head: one decoder layer on the target's hidden states
    MTP = "mtp"  # a multi-token-prediction module shipped with the model (DeepSeek-V3)
    NGRAM = "ngram"  # prompt lookup: drafts copied from the request's own tokens (host only)


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """Speculative decoding of a vLLM V1 system ([systems.speculative]; simulator/policies/
    speculative.py runs it, simulator/execution/speculative.py prices it).

    The acceptance model is one of: `acceptance_rate` (each draft token accepted with this
    probability once the ones before it were, so k drafts yield min(k, Geometric) tokens),
    `acceptance_rates` (per position, as vLLM reports them: the share of verifications whose
    i-th draft was accepted, non-increasing), or `acceptance_file` (a CSV of num_accepted,weight
    rows: the distribution of accepted drafts per verification), read into `file_pmf`.
    """

    method: SpecMethod
    num_speculative_tokens: int
    acceptance_rate: float | None = None
    acceptance_rates: tuple[float, ...] = ()
    acceptance_file: Path | None = None
    draft_model: str | None = None  # a catalog model (method draft-model only)
    file_pmf: tuple[float, ...] = ()  # the file's distribution over 0..k accepted (not a key)

    def describe(self) -> dict[str, object]:
        """The scenario keys that are set, as plain values (provenance, the TOML writer)."""
        keys: dict[str, object] = {
            "method": self.method.value,
            "num_speculative_tokens": self.num_speculative_tokens,
        }
        if self.acceptance_rate is not None:
            keys["acceptance_rate"] = self.acceptance_rate
        if self.acceptance_rates:
            keys["acceptance_rates"] = list(self.acceptance_rates)
        if self.acceptance_file is not None:
            keys["acceptance_file"] = str(self.acceptance_file)
        if self.draft_model is not None:
            keys["draft_model"] = self.draft_model
        return keys

    def accepted_pmf(self) -> tuple[float, ...]:
        """P(a drafts of k accepted), a = 0..k, from whichever acceptance model is given."""
        k = self.num_speculative_tokens
        if self.file_pmf:
            return self.file_pmf
        if self.acceptance_rates:
            at_least = (1.0, *self.acceptance_rates, 0.0)  # P(a >= i), i = 0..k+1
        else:
            alpha = self.acceptance_rate if self.acceptance_rate is not None else 0.0
            at_least = (*(alpha**i for i in range(k + 1)), 0.0)
        return tuple(at_least[i] - at_least[i + 1] for i in range(k + 1))


@dataclass(frozen=True, slots=True)
class SystemConfig:
    """One serving system to simulate: a batching policy and its knobs.

    A knob left None takes its era's default when the run starts (core.defaults.resolve_system:
    by policy, GPU and model, each with its source); the others are the same for every era.
    """

    name: str
    policy: Policy
    block_size: int = 16  # tokens per KV block (paged policies)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # V1 token budget per step; V0 prefill token cap
    max_prefill_chunk: int | None = None  # V1: cap on one request's chunk (None: the budget)
    reservation: Reservation = Reservation.MAX  # static, orca
    # static, orca; None: the policy's own (orca: buddy, static: first-fit; core.defaults).
    contiguous_allocator: ContiguousAllocator | None = None
    preemption: PreemptionPolicy | None = None
    victim: VictimPolicy = VictimPolicy.LAST_ARRIVED
    admission: AdmissionOrder = AdmissionOrder.FCFS
    enable_prefix_cache: bool | None = None
    watermark: float | None = None  # share of blocks kept free when admitting
    gpu_memory_utilization: float = 0.9
    activation_reserve_gib: float | None = None  # activation peak and other non-KV memory
    swap_space_gib: float = 4.0
    static_batch_size: int = 8  # static: requests per batch
    static_batch_timeout_s: float = 0.0  # static: wait up to this long to fill a batch
    num_kv_blocks: int | None = None  # override the capacity computed from GPU memory
    execution: ExecutionKind | None = None  # price this system by roofline or profile (None: the
    # scenario's [execution] kind), so one scenario can show both side by side
    defaults: DefaultsMode = DefaultsMode.SERVER  # vLLM V1's server or offline defaults
    speculative: SpeculativeConfig | None = None  # [systems.speculative]: vllm-v1 only
    # vllm-v1: the hybrid KV-cache manager; False is vLLM's --disable-hybrid-kv-cache-manager
    # (a sliding-window layer then keeps KV for every token, kv/block_budget.py block_shape)
    hybrid_kv_cache_manager: bool = True
    # vllm-v1: the vLLM release whose defaults and rules it follows (None: NEWEST_VLLM)
    vllm_version: VllmVersion | None = None
    # vllm-v1: admit a waiting request only if blocks for its whole prompt fit, not just its
    # first chunk (vLLM --scheduler-reserve-full-isl; None: the release's default)
    scheduler_reserve_full_isl: bool | None = None
    # vllm-v1: a KV offload tier in CPU memory ([systems.kv_offload]; policies/offload.py)
    kv_offload: KVOffloadConfig | None = None
    # vllm-v1: decoder layers split over this many stages, each a tensor-parallel group of its
    # own (vLLM --pipeline-parallel-size; core/pipeline_stages.py, cluster/pipeline_loop.py)
    pipeline_parallel: int = 1
    # layers per stage in place of vLLM's split (its VLLM_PP_LAYER_PARTITION); None: vLLM's
    pipeline_layer_partition: tuple[int, ...] | None = None
    # The system's own deployment, in place of [model]'s (None: [model]'s), so that one run can
    # compare, say, BF16 on two nodes with FP8 on one: core/deployments.py `system_scenario`
    # applies them before anything reads the scenario
    tensor_parallel: int | None = None
    weight_dtype: WeightDtype | None = None
    kv_dtype: KVDtype | None = None

    def __post_init__(self) -> None:
        # The allocator in force, resolved once: orca places its reservations with a buddy
        # allocator as the vLLM paper's Orca baselines do (§6.1); static batching
        # (FasterTransformer) keeps one max-length slot per batch member, exact-size, so first
        # fit. Paged policies allocate blocks and have none.
        allocator = self.contiguous_allocator
        if self.policy not in CONTIGUOUS_POLICIES:
            allocator = None
        elif allocator is None:
            allocator = (
                ContiguousAllocator.BUDDY
                if self.policy is Policy.ORCA
                else ContiguousAllocator.FIRST_FIT
            )
        object.__setattr__(self, "contiguous_allocator", allocator)
        if self.policy is not Policy.VLLM_V1:  # V1's knobs (a [defaults] value meant for V1)
            object.__setattr__(self, "vllm_version", None)
            object.__setattr__(self, "scheduler_reserve_full_isl", None)
            object.__setattr__(self, "kv_offload", None)


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_s: float | None = None
    tpot_s: float | None = None


@dataclass(frozen=True, slots=True)
class StopConfig:
    max_time_s: float | None = None  # stop arrivals and the run at this simulated time
    warmup_s: float = 0.0  # requests arriving before this are excluded from the metrics


class Comparison(Enum):
    """How a report's headlines compare the systems on the key metric ([report] compare)."""

    RANK = "rank"  # best to worst, ties said to be ties
    AGREEMENT = "agreement"  # how closely each system agrees with the reference (% difference)


@dataclass(frozen=True, slots=True)
class ReportConfig:
    """[report]: what the scenario asks, so that its report leads with the answer.

    `key_metric` is the summary key the first headline is about; `metrics` are the ones the next
    headlines compare, in order; `reference` (agreement only) is the system the others are
    measured against (None: the first system)."""

    key_metric: str | None = None
    metrics: tuple[str, ...] = ()
    compare: Comparison = Comparison.RANK
    reference: str | None = None


@dataclass(frozen=True, slots=True)
class ExecutionConfig:
    """How a step is priced. A factor left None takes the default of the GPU preset (the
    roofline's fitted factors and interconnect, core/presets/) or of the system's engine era
    (the host overhead, execution/overhead.py); a value given replaces it for every system."""

    kind: ExecutionKind = ExecutionKind.ROOFLINE
    profile_path: Path | None = None
    # Roofline shares of the datasheet peaks actually reached (None: the GPU's fitted default).
    gemm_efficiency: float | None = None
    attention_bw_efficiency: float | None = None
    weight_bw_efficiency: float | None = None
    # Host work per step (scheduling, input preparation, sampling, output processing):
    # step_overhead_s + step_overhead_s_per_seq x sequences in the step (None: the era's default).
    step_overhead_s: float | None = None
    step_overhead_s_per_seq: float | None = None
    # V1: host work overlaps the GPU step. None: the system's vLLM release decides (on by default
    # from v0.14.0 unless its speculative method cannot: core/vllm_eras.py); a scenario's value
    # applies to every V1 system. V0 has no async scheduling (its outputs overlap instead).
    async_scheduling: bool | None = None
    # A served system's time per request outside the engine's steps (API server, tokenization,
    # the hop to the engine, detokenization, the streamed chunk), added to TTFT and E2E
    # (execution/frontend.py; None: the era's default; offline systems have none).
    frontend_s: float | None = None
    # vLLM's custom all-reduce: one stage's latency in a model step (execution/allreduce.py;
    # None: the GPU's link's, core/presets/interconnects.toml).
    custom_allreduce_stage_us: float | None = None
    # The fused-MoE kernel's share of datasheet bandwidth streaming routed experts (moe_cost.py;
    # None: the fitted default).
    fused_moe_bw_efficiency: float | None = None
    # Tensor-parallel all-reduce per call: latency + ring bytes / bandwidth (None: the GPU's link).
    allreduce_bw_gbps: float | None = None
    allreduce_latency_us: float | None = None
    # Swapping a block copies it once per layer for K and once for V (vLLM V0 swap_blocks, one
    # cudaMemcpyAsync per block per layer); each copy pays this fixed cost beside its bytes.
    # An estimate (a small host-to-device cudaMemcpyAsync's launch and latency), not measured.
    swap_copy_latency_s: float = 3e-6
    # Mixture of experts: Zipf exponent of expert popularity (execution/moe_cost.py); 0 is
    # uniform routing. A what-if knob: no measured exponent stands behind any value.
    routing_skew: float = 0.0


@dataclass(frozen=True, slots=True)
class SweepAxis:
    path: str  # dotted key, e.g. "workload.arrival.rate_per_s"
    values: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    model: ModelSpec
    gpu: GPUSpec
    workload: WorkloadConfig
    systems: tuple[SystemConfig, ...]
    description: str = ""
    seed: int = 0
    kv_dtype: KVDtype = KVDtype.FP16
    tensor_parallel: int = 1
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    # Mixture of experts across GPUs (vLLM --data-parallel-size, --enable-expert-parallel):
    # experts split over tensor_parallel x data_parallel GPUs; with data_parallel > 1 the run
    # simulates every DP rank, lock-stepped at the MoE layers (simulator/cluster/dp_group.py).
    data_parallel: int = 1
    expert_parallel: bool = False
    wide_ep: WideEPConfig = field(default_factory=WideEPConfig)  # [wide_ep]: core/wide_ep.py
    slo: SLO = field(default_factory=SLO)
    stop: StopConfig = field(default_factory=StopConfig)
    sweep: tuple[SweepAxis, ...] = ()
    source: Path | None = None  # the TOML file it came from, for messages and reports
    cluster: ClusterConfig | None = None  # [cluster]: a fleet behind a router (None: one replica)
    capacity: CapacityConfig | None = None  # [capacity]: the fleets `pagesim capacity` tries
    report: ReportConfig = field(default_factory=ReportConfig)  # [report]: its question
