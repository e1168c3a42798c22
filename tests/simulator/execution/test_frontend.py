"""The client's view of a served or offline system (execution/frontend.py, metrics/delivery.py):
the front end's time in TTFT and E2E, and vLLM V0's tokens returned during the next step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pagesim.simulator.core.config import (
    DefaultsMode,
    ExecutionConfig,
    Policy,
    SystemConfig,
)
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.frontend import V0_FRONTEND_S, frontend_of
from pagesim.simulator.execution.overhead import V0_FIXED_S
from pagesim.simulator.metrics.delivery import next_step_delivery
from pagesim.simulator.scenario.load import parse_scenario


def _system(policy: Policy, mode: DefaultsMode = DefaultsMode.SERVER) -> SystemConfig:
    return SystemConfig("s", policy, defaults=mode)


def test_a_served_system_pays_the_front_end_an_offline_one_does_not() -> None:
    served = frontend_of(ExecutionConfig(), _system(Policy.VLLM_V0))
    assert served.is_served and served.frontend_s == V0_FRONTEND_S
    assert "fitted" in served.source
    offline = frontend_of(ExecutionConfig(), _system(Policy.VLLM_V0, DefaultsMode.OFFLINE))
    assert not offline.is_served and offline.frontend_s == 0.0
    v1 = frontend_of(ExecutionConfig(), _system(Policy.VLLM_V1))
    assert v1.frontend_s == V0_FRONTEND_S and "estimate" in v1.source
    assert not v1.delivers_late  # V1's engine core sends each step's outputs as it ends
    mine = frontend_of(ExecutionConfig(frontend_s=0.004), _system(Policy.VLLM_V1))
    assert mine.frontend_s == 0.004 and "set in the scenario" in mine.source
    with pytest.raises(InputError, match="frontend_s"):
        frontend_of(ExecutionConfig(frontend_s=-1.0), _system(Policy.VLLM_V1))


def test_v0_served_tokens_leave_the_engine_once_the_next_steps_host_work_is_done() -> None:
    """vLLM v0.6.4: the outputs of step n are processed in step n + 1's async_callback, after
    its scheduling and launch (ModelRunner.execute_model), and a served engine sends them from
    there (MQLLMEngine, use_async_sockets); offline, LLMEngine.step returns them as step n + 1
    ends. With nothing left to run, at once."""
    served = frontend_of(ExecutionConfig(), _system(Policy.VLLM_V0))
    assert served.delivers_late and served.delivery_after_s == V0_FIXED_S
    offline = frontend_of(ExecutionConfig(), _system(Policy.VLLM_V0, DefaultsMode.OFFLINE))
    assert offline.delivers_late and offline.delivery_after_s is None
    steps = pd.DataFrame(
        {"start_s": [0.0, 0.5, 0.8, 2.0], "duration_s": [0.5, 0.3, 0.2, 0.4], "row_steps": 1}
    )
    produced = np.array([0.5, 0.8, 1.0, 2.4, np.nan])
    at_end = next_step_delivery(steps)(produced)
    np.testing.assert_array_equal(at_end, [0.8, 1.0, 1.0, 2.4, np.nan])  # 1.0, 2.4: idle after
    early = next_step_delivery(steps, after_s=0.1)(produced)
    np.testing.assert_allclose(early[:4], [0.6, 0.9, 1.0, 2.4])
    merged = pd.DataFrame({"start_s": [0.0], "duration_s": [1.0], "row_steps": [4]})
    assert next_step_delivery(merged)(np.array([0.5]))[0] == pytest.approx(0.75)


SCENARIO = {
    "name": "two",
    "model": {"preset": "llama-3.1-8b"},
    "gpu": {"preset": "h100-sxm"},
    "workload": {
        "num_requests": 2,
        "arrival": {"kind": "burst"},
        "prompt": {"kind": "fixed", "value": 64},
        "output": {"kind": "fixed", "value": 8},
    },
    "systems": [{"name": "v0", "policy": "vllm-v0"}],
}


def test_a_served_runs_ttft_is_the_engines_plus_delivery_plus_the_front_end() -> None:
    """Two prompts prefilled in one step at t = 0: the first tokens, produced as it ends, leave
    the engine the serial host time into the next step; the client sees them `frontend_s`
    later. Their last tokens end the run: returned at once, so E2E = the last step's end plus
    the front end."""
    result = simulate(parse_scenario(SCENARIO))
    steps = result.steps
    first_step_end = steps["start_s"][0] + steps["duration_s"][0]
    requests = result.requests
    assert (requests["first_token_s"] == first_step_end).all()
    expected = first_step_end + V0_FIXED_S + V0_FRONTEND_S
    assert requests["ttft_s"].to_numpy() == pytest.approx([expected, expected], rel=1e-12)
    end = steps["start_s"].iloc[-1] + steps["duration_s"].iloc[-1]
    assert requests["e2e_s"].to_numpy() == pytest.approx([end + V0_FRONTEND_S] * 2, rel=1e-12)
    assert result.provenance["frontend"]["frontend_s"] == V0_FRONTEND_S  # type: ignore[index]
    offline = {**SCENARIO, "systems": [{"name": "v0", "policy": "vllm-v0", "defaults": "offline"}]}
    alone = simulate(parse_scenario(offline)).requests
    assert alone["e2e_s"].to_numpy() == pytest.approx([end, end], rel=1e-12)
    assert alone["ttft_s"][0] == pytest.approx(steps["start_s"][1] + steps["duration_s"][1])
