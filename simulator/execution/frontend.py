"""What the client of a vLLM server sees beyond the engine's steps: the front end's time per
request, and when each token reaches it.

A system is **served** (`defaults = "server"`, the default: `vllm serve`, the OpenAI API server in
front of the engine) or **offline** (`defaults = "offline"`: the `LLM` class, e.g.
`LLM.generate()` of a batch). A served request's TTFT and E2E, as a client measures them
(vLLM's benchmark_serving.py), include per request:

    frontend_s = the HTTP request and its parsing, tokenization of the prompt, the hop from the
                 API server's process to the engine's and back (V0 v0.6: the MQLLMEngine over
                 ZMQ, on by default since v0.6.0; V1: AsyncLLM and the EngineCore process),
                 detokenization and the streamed chunk carrying the token

added once to both (the request's way in, and the token's way out); the gaps between streamed
tokens (ITL, TPOT) do not change. Offline runs have none.

Defaults by era (a scenario's `[execution] frontend_s` replaces them):

- V0 (vllm-v0; static and orca alike): 17.46 ms, **fitted** to the median TTFT of vLLM's CI
  serving benchmark (calibration/published_fit.py, build 9555: Llama-3-70B, TP 4, H100,
  1 request/s). More than the parts named above would take alone (a few milliseconds), so it
  likely also holds what pagesim's steps leave out on the way to the first token (e.g. the host
  launching an eager prefill kernel by kernel); fitted on one GPU and load only. It holds the
  host's CPU too: held out, the same benchmark on the CI's H200 node (build 9513) measured a
  median TTFT 14% above what this figure gives (calibration/published/README.md).
- V1 (vllm-v1): the same figure, an **estimate**: V1's front end has the same parts (its
  EngineCore hop is also ZMQ) and no published run in the training set measures it.

**Late delivery** (vllm-v0 only): V0's asynchronous output processing (v0.6.0 to v0.6.4, on
with CUDA graphs) processes the outputs of step n during step n + 1: vllm/worker/model_runner.py
ModelRunner.execute_model calls the engine's `async_callback` once step n + 1's forward is
launched. Served, the engine process sends them to the API server from that callback
(vllm/engine/multiprocessing/engine.py MQLLMEngine, `use_async_sockets`): a token leaves the
engine the next step's serial host time (overhead.py: scheduling, inputs, launch) after its own
step ended. Offline, LLMEngine.step returns them when step n + 1 ends: a token reaches the
caller at the end of the step after its own. Either way, when the engine has nothing left to
run it processes the outputs at once (an offline batch's last tokens arrive when its last step
ends). pagesim applies the rule from the run's step table (metrics/delivery.py). A
disaggregated (P/D) fleet adds `frontend_s` (to its `ttft_queue_s` part) but not the late
delivery.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.config import DefaultsMode, ExecutionConfig, Policy, SystemConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.execution.overhead import EngineEra, era_of, host_overhead

V0_FRONTEND_S = 17.46e-3  # fitted: calibration/published_fit.py

_SOURCES = {
    EngineEra.V0: "fitted to vLLM CI build 9555's serving TTFT (calibration/published_fit.py)",
    EngineEra.V1: "estimate: V0's fitted front end (the same parts; not measured for V1)",
}


@dataclass(frozen=True, slots=True)
class Frontend:
    """A system's client-side terms."""

    frontend_s: float  # per request, in TTFT and E2E; 0 offline
    delivers_late: bool  # tokens reach the client during the next step (vllm-v0)
    # How far into that step (served: its serial host time); None: at its end (offline).
    delivery_after_s: float | None
    is_served: bool
    source: str

    def describe(self) -> dict[str, object]:
        return {
            "served": self.is_served,
            "frontend_s": self.frontend_s,
            "frontend_source": self.source,
            "tokens_delivered_during_the_next_step": self.delivers_late,
            "delivery_after_s": self.delivery_after_s,
        }


def frontend_of(config: ExecutionConfig, system: SystemConfig) -> Frontend:
    """The front end of `system` (served or offline), the scenario's figure if it sets one."""
    late = system.policy is Policy.VLLM_V0
    era = era_of(system.policy)
    if system.defaults is DefaultsMode.OFFLINE:
        return Frontend(0.0, late, None, False, "offline (the LLM class): no front end")
    after_s = host_overhead(config, era).parts()[0]  # the next step's serial host time
    value = config.frontend_s
    if value is None:
        return Frontend(V0_FRONTEND_S, late, after_s, True, _SOURCES[era])
    if not 0 <= value < 60:
        raise InputError(f"execution.frontend_s must be in [0, 60) seconds, got {value!r}")
    return Frontend(value, late, after_s, True, "set in the scenario ([execution] frontend_s)")
