"""What the executor and its forward passes share: the configuration, a step's times, the error."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
BACKENDS = ("numpy", "cupy")
CPU_DTYPES = ("float32", "float16")


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    backend: str = "numpy"  # "numpy" (CPU) | "cupy" (GPU)
    num_layers: int | None = None  # layers executed (None: all); time scaled by L / this
    max_host_bytes: int = 2 * GIB  # numpy: KV cache + weights must fit in this
    poison_unmapped: bool = False  # tests: NaN every block no table maps before each step
    warmup_steps: int = 3
    seed: int = 0
    cpu_threads: int | None = 1  # numpy: BLAS threads while executing (None: leave as is)
    cuda_graphs: bool = False  # decode-only steps captured once per shape and replayed
    max_graphs: int = 64  # shapes captured at most; later new shapes run eagerly
    cpu_dtype: str = "float32"  # numpy: activations' dtype ("float16" mimics the GPU)
    share_layer_weights: bool = False  # one layer's weights for all layers (memory / L)
    progress_every_steps: int = 500  # the executor reports running figures this often


class ExecutorReadError(RuntimeError):
    """A step's output was not finite with unmapped blocks poisoned: a read outside the tables."""


@dataclass(frozen=True, slots=True)
class StepTiming:
    """One executed step's times, in seconds."""

    layers_s: float  # the executed layers (CUDA events on GPU, perf_counter on CPU)
    lm_head_s: float
    host_s: float  # host time to issue the step (GPU: until the last launch returns)
    wall_s: float  # host time until the step's results are ready (launch + synchronise)
    mode: str  # "eager" | "graph"
    captured: bool  # a graph was captured for this step first (outside the timed region)
