"""Profile execution model: what one `StepPlan` costs, from a profile file — kernels measured by
`pagesim calibrate`, or operators measured elsewhere and imported (`pagesim calibrate
import-vidur`). Per step of T tokens, S sequences (D of them decoding with Σ context kv_d; prefill
chunks of n new tokens over context c), L layers:

    decode   = L·(a + b·kv_d + c·D)                          fitted, per layer
    prefill  = L·(a' + b'·Σ n(2c − n) + c'·Σ n + d'·Σ n²)     fitted; n(2c − n) = prompt_len² for a
                                                              whole prompt, and the same (query,key)
                                                              area for a chunk over cached context;
                                                              d' (optional, imported profiles): the
                                                              causal triangle's extra cost
    gemm     = L·gemm(T) + lm_head(S)                        piecewise-linear in measured tokens
    kernels  = max(decode + prefill + gemm, empty_step) + all-reduce (t > 1)
    all-reduce = L·2·call(T · hidden · 2 B)                  the profile's measured calls (NCCL)
                                                              where NCCL runs, else the roofline's
                                                              link (vLLM's custom all-reduce:
                                                              allreduce.py)
    compute_s = kernels                                       (a pagesim-measured profile: its
                                                              floor is the executor's minimal step)
              = serial host + max(kernels, overlapped host)   (an imported profile: the engine
                                                              era's host overhead, overhead.py;
                                                              T at a CUDA graph's padded size:
                                                              cuda_graphs.py)
    swap_s   = swapped blocks · block_bytes / host link       (datasheet host link)
    copy_s   = copies · 2 · block_bytes / measured copy bandwidth (read + written)

The host launches a step's kernels while the GPU runs them, so a step lasts the longer of its
kernels and the measured empty step (launches + synchronise). FLOPs and HBM bytes are the
roofline model's analytic counts, so MFU/MBU mean the same under both models. Priced at another
block size than measured, decode attention adds the roofline's block term's difference
(roofline.py; an estimate).

Inside the measured ranges the fits interpolate. A step above a measured maximum (tokens,
sequences, KV tokens, Σ prompt_len²) is priced by extrapolating the fit (GEMMs: the last measured
slope); such steps are counted, reported by `describe()`, and the first one warns once.

The file is read, and checked against the scenario's model, by `profile_file`; `checks` holds the
warnings a person must see (another GPU's profile, utilizations above 100%).

The same idea in the calibration layer: calibration/profile.py writes the file.
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Sequence
from itertools import compress
from operator import itemgetter
from pathlib import Path

from pagesim.simulator.core.catalog import GPUSpec, KVDtype, ModelSpec
from pagesim.simulator.core.config import ExecutionConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.plan import StepCost, StepPlan, step_cost
from pagesim.simulator.execution.allreduce import Route
from pagesim.simulator.execution.checks import other_gpu_reason, profile_warnings
from pagesim.simulator.execution.model import NO_TRANSFER, TransferPricer
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.profile_file import check_profile
from pagesim.simulator.execution.roofline import RooflineModel
from pagesim.simulator.execution.roofline_terms import ACTIVATION_BYTES, ALLREDUCES_PER_LAYER
from pagesim.simulator.execution.vllm_runtime import VllmRuntime

_CONTEXT_LEN = itemgetter(3)  # SeqWork.context_len
_IS_PREFILL = itemgetter(4)  # SeqWork.is_prefill


class ProfileExtrapolationWarning(UserWarning):
    """A step fell outside the profile's measured range (warned once per model instance)."""


def piecewise_linear(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Linear interpolation through (xs, ys), xs strictly increasing.

    Below xs[0]: ys[0] (nothing measured is cheaper than the smallest point). Above xs[-1]: the
    last segment's slope extended (never negative).
    """
    if x <= xs[0]:
        return ys[0]
    last = len(xs) - 1
    if x >= xs[last]:
        if last == 0:
            return ys[0]
        slope = max(0.0, (ys[last] - ys[last - 1]) / (xs[last] - xs[last - 1]))
        return ys[last] + slope * (x - xs[last])
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class ProfileModel:
    """Measured `ExecutionModel`: prices a `StepPlan` from a calibration or imported profile."""

    name = "profile"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        config: ExecutionConfig,
        kv_dtype: KVDtype = KVDtype.FP16,
        tensor_parallel: int = 1,
        block_size: int = 16,
        era: EngineEra = EngineEra.V0,
        runtime: VllmRuntime | None = None,
    ) -> None:
        if config.profile_path is None:
            raise InputError(
                "execution model 'profile' needs execution.profile_path (a profile JSON)"
            )
        self.path = Path(config.profile_path)
        self.terms = terms = check_profile(self.path, model, tensor_parallel, kv_dtype)
        other_gpu = other_gpu_reason(terms.provenance.get("device"), gpu)
        if other_gpu is not None:
            raise InputError(f"{self.path}: {other_gpu}")
        self.model = model
        self.gpu = gpu
        self.kv_dtype = kv_dtype
        self.tensor_parallel = tensor_parallel
        self.block_size = block_size
        L = model.num_layers
        self._decode = tuple(L * x for x in terms.decode)
        self._prefill = tuple(L * x for x in terms.prefill)
        self._gemm_xs = terms.gemm.xs
        self._gemm_ys = [L * y for y in terms.gemm.ys]
        self._lm_xs, self._lm_ys = terms.lm_head.xs, terms.lm_head.ys
        self._empty_step_s = terms.empty_step_s
        self._max_tokens = terms.gemm.top
        self._max_lm_seqs = terms.lm_head.top

        # Analytic FLOPs and bytes, the block term, the link and the host overhead: the
        # roofline's (its efficiencies price nothing else here).
        # An imported profile (operators measured one by one) prices a vLLM engine's steps: with
        # the runtime, a CUDA graph's padded size and vLLM's all-reduce where its custom kernel
        # runs (vllm_runtime.py). A profile of pagesim's own executor prices that executor.
        if not terms.adds_host_overhead:
            runtime = None
        roof = RooflineModel(
            model, gpu, config, kv_dtype, tensor_parallel, block_size, era, runtime=runtime
        )
        self.roofline = roof
        self._linear_flops_per_token = roof.linear_flops_per_token
        self._lm_flops_per_seq = roof.lm_head_flops_per_seq
        self._attention_flops_per_pair = roof.attention_flops_per_pair
        self._weight_bytes = roof.weight_bytes_per_step
        self._act_bytes_per_token = roof.linear_act_bytes_per_token
        self._lm_act_bytes_per_seq = roof.lm_head_act_bytes_per_seq
        self._kv_bytes_per_token = roof.kv_bytes_per_token
        self.block_bytes = roof.block_bytes
        self._allreduce_calls = L * ALLREDUCES_PER_LAYER if tensor_parallel > 1 else 0
        self._allreduce_message_per_token = model.hidden_size * ACTIVATION_BYTES
        measured = terms.measured_block_size
        self._block_s_per_context = self._block_s_per_seq = 0.0
        if measured not in (None, block_size):
            at_measured = RooflineModel(model, gpu, config, kv_dtype, tensor_parallel, measured)
            self._block_s_per_context = roof.block_s_per_context - at_measured.block_s_per_context
            self._block_s_per_seq = roof.block_s_per_seq - at_measured.block_s_per_seq
        self._host = roof.host if terms.adds_host_overhead else None
        self._transfers = TransferPricer(
            self.block_bytes,
            gpu.host_link_bps,
            terms.copy_bps,
            num_layers=model.num_layers,
            copy_latency_s=config.swap_copy_latency_s,
        )
        self._gemm_cache: dict[int, float] = {}
        self._lm_cache: dict[int, float] = {}
        self._allreduce_cache: dict[tuple[int, bool], float] = {}
        self.num_steps_priced = 0
        self.num_steps_extrapolated = 0
        # Prices probe steps: after everything above; the counts start again from zero.
        self.warnings = profile_warnings(terms.provenance.get("device"), gpu, self.price)
        self.num_steps_priced = self.num_steps_extrapolated = 0

    def _gemm_s(self, tokens: int) -> float:
        cached = self._gemm_cache.get(tokens)
        if cached is None:
            cached = piecewise_linear(self._gemm_xs, self._gemm_ys, tokens)
            self._gemm_cache[tokens] = cached
        return cached

    def _lm_head_s(self, num_seqs: int) -> float:
        cached = self._lm_cache.get(num_seqs)
        if cached is None:
            cached = piecewise_linear(self._lm_xs, self._lm_ys, num_seqs)
            self._lm_cache[num_seqs] = cached
        return cached

    def _allreduce_s(self, tokens: int, is_graphed: bool) -> float:
        if not self._allreduce_calls:
            return 0.0
        series = self.terms.all_reduce
        roof = self.roofline
        # The roofline's link where the profile measured none, or vLLM runs its own kernel
        # (the profile's medians are NCCL's: they stay where NCCL is what runs).
        if series is None or roof.allreduce_route(tokens) is not Route.NCCL:
            return roof.allreduce_step_s(tokens, is_graphed)
        cached = self._allreduce_cache.get((tokens, is_graphed))
        if cached is None:
            message = tokens * self._allreduce_message_per_token
            cached = self._allreduce_calls * piecewise_linear(series.xs, series.ys, message)
            self._allreduce_cache[tokens, is_graphed] = cached
        return cached

    def price(self, plan: StepPlan) -> StepCost:
        """Seconds, FLOPs and HBM bytes of one step (see the module docstring)."""
        work = plan.work
        swap_s, copy_s, copy_bytes = (
            self._transfers.price(plan) if plan.moves_blocks else NO_TRANSFER
        )
        if not work:
            return step_cost(0.0, swap_s, copy_s, 0.0, copy_bytes)
        self.num_steps_priced += 1

        num_context = sum(map(_CONTEXT_LEN, work))
        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        num_seqs = len(work)
        # A CUDA graph's padded size (roofline.graph_shape; the token count without a runtime).
        priced, is_graphed = self.roofline.graph_shape(
            num_tokens, num_seqs, not plan.num_prefill_seqs
        )
        kernels_s = self._gemm_s(priced) + self._lm_head_s(num_seqs)
        is_outside = num_tokens > self._max_tokens or num_seqs > self._max_lm_seqs

        prefill_context = prefill_sq = prefill_pairs = prefill_nn = 0
        t = self.terms
        if plan.num_prefill_seqs:
            for _, _, n, c, _ in compress(work, map(_IS_PREFILL, work)):
                prefill_context += c
                prefill_sq += n * (2 * c - n)
                prefill_pairs += n * c - (n * (n - 1) >> 1)
                prefill_nn += n * n
            a, b, c_, d = self._prefill
            kernels_s += a + b * prefill_sq + c_ * plan.num_prefill_tokens + d * prefill_nn
            is_outside = (
                is_outside
                or prefill_sq > t.max_prefill_sq
                or plan.num_prefill_tokens > t.max_prefill_tokens
            )
        decode_kv = num_context - prefill_context
        num_decode = plan.num_decode_seqs
        if num_decode:
            a, b, c_ = self._decode
            kernels_s += (
                a
                + (b + self._block_s_per_context) * decode_kv
                + (c_ + self._block_s_per_seq) * num_decode
            )
            is_outside = is_outside or decode_kv > t.max_decode_kv or num_decode > t.max_decode_seqs
        if is_outside:
            self.num_steps_extrapolated += 1
            if self.num_steps_extrapolated == 1:
                self._warn_extrapolation(plan, decode_kv, prefill_sq)

        compute_s = max(kernels_s, self._empty_step_s) + self._allreduce_s(priced, is_graphed)
        host = self._host
        if host is not None:  # serial + max(GPU, overlapped) (overhead.py)
            serial_fixed, serial_seq, over_fixed, over_seq = host.parts()
            compute_s = max(compute_s, over_fixed + num_seqs * over_seq) + (
                serial_fixed + num_seqs * serial_seq
            )
        # Decode pairs: one new token over its context (speculative decodes count the same way).
        flops = (
            num_tokens * self._linear_flops_per_token
            + num_seqs * self._lm_flops_per_seq
            + (prefill_pairs + decode_kv) * self._attention_flops_per_pair
        )
        bytes_moved = (
            self._weight_bytes
            + num_tokens * self._act_bytes_per_token
            + num_seqs * self._lm_act_bytes_per_seq
            + (num_context + num_tokens) * self._kv_bytes_per_token
            + copy_bytes
        )
        return step_cost(compute_s, swap_s, copy_s, flops, bytes_moved)

    def _warn_extrapolation(self, plan: StepPlan, decode_kv: int, prefill_sq: int) -> None:
        """Warn once per model instance (per run), naming what exceeded the measured range."""
        t = self.terms
        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        checks = (
            ("tokens", num_tokens, self._max_tokens),
            ("sequences (LM head)", plan.num_seqs, self._max_lm_seqs),
            ("decode KV tokens", decode_kv if plan.num_decode_seqs else 0, t.max_decode_kv),
            ("decoding sequences", plan.num_decode_seqs, t.max_decode_seqs),
            ("prefill sum of len^2", prefill_sq, t.max_prefill_sq),
            ("prefill tokens", plan.num_prefill_tokens, t.max_prefill_tokens),
        )
        exceeded = ", ".join(
            f"{name} {value:g} > {top:g}" for name, value, top in checks if value > top
        )
        warnings.warn(
            f"profile {self.path}: a step is outside the measured range ({exceeded}); "
            "extrapolating the fits. Further such steps are only counted (see describe()).",
            ProfileExtrapolationWarning,
            stacklevel=3,
        )

    def term_sources(self) -> dict[str, str]:
        """Where each term comes from: the profile's own `sources` (imported profiles name them),
        else pagesim's calibration; the roofline's for what the profile lacks."""
        measured = f"pagesim kernel profile ({self.terms.provenance.get('device')})"
        roof = self.roofline.term_sources()
        found = {
            "linear": measured,
            "small_ops": measured,
            "lm_head": measured,
            "decode_attention": measured,
            "prefill_attention": measured,
            "all_reduce": roof["all_reduce"]
            if self.terms.all_reduce is None
            else "measured (profile)",
            "host_overhead": roof["host_overhead"]
            if self._host is not None
            else "the profile's measured empty step (pagesim's executor)",
        }
        return found | self.terms.sources

    def describe(self) -> dict[str, object]:
        """Provenance for reports: device, versions, kernel hash, grid, errors, extrapolation,
        per-term sources and warnings."""
        t = self.terms
        prov = t.provenance
        notes = []
        if prov.get("device_kind") == "cpu" or prov.get("device") == "cpu":
            notes.append("CPU (NumPy) profile: runs the pipeline, does not predict any GPU")
        if prov.get("backend") == "imported":
            notes.append(f"imported, not measured by pagesim: {prov.get('imported_from')}")
        measured_block = t.measured_block_size
        if measured_block not in (None, self.block_size):
            notes.append(
                f"kernels measured at block size {measured_block}, priced for {self.block_size} "
                "(the roofline's block term's difference added: an estimate)"
            )
        if self.kv_dtype is not KVDtype.FP16:
            notes.append(f"measured with fp16 KV, priced for {self.kv_dtype.value} (same bytes)")
        if self._allreduce_calls and t.all_reduce is None:
            notes.append(f"all-reduce from the roofline ({self.roofline.link.name})")
        return {
            "kind": self.name,
            "profile_path": str(self.path),
            "device": prov.get("device"),
            "backend": prov.get("backend"),
            "date": prov.get("date"),
            "versions": {
                k: prov.get(k)
                for k in ("driver", "driver_version", "cuda_runtime", "cupy", "torch", "numpy")
                if prov.get(k) is not None
            },
            "kernel_sha256": prov.get("kernel_sha256"),
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tensor_parallel": self.tensor_parallel,
            "block_size": self.block_size,
            "grid": {
                "tokens": [self._gemm_xs[0], self._max_tokens],
                "lm_head_seqs": [self._lm_xs[0], self._max_lm_seqs],
                "decode_kv_tokens_max": t.max_decode_kv,
                "decode_seqs_max": t.max_decode_seqs,
                "prefill_sum_sq_max": t.max_prefill_sq,
            },
            "held_out_error": {
                name: {
                    "mean_abs_rel_err": section.get("mean_abs_rel_err"),
                    "max_abs_rel_err": section.get("max_abs_rel_err"),
                    "num_points": section.get("num_points"),
                }
                for name, section in t.held_out.items()
                if isinstance(section, dict)
            },
            "copy_bandwidth_bps": t.copy_bps,
            "empty_step_s": self._empty_step_s,
            **(self._host.describe() if self._host is not None else {}),
            "sources": self.term_sources(),
            "num_steps_priced": self.num_steps_priced,
            "num_steps_extrapolated": self.num_steps_extrapolated,
            "notes": notes,
            "warnings": list(self.warnings),
        }
