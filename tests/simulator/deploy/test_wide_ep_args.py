"""deepseek_wide_ep's [wide_ep] on the `vllm serve` line, as each release spells it
(deploy/wide_ep_args.py); every flag is in that release's table (vllm_flags.json)."""

from __future__ import annotations

from pagesim.simulator.deploy.commands import deployment
from pagesim.simulator.deploy.eras import Era
from pagesim.simulator.scenario.load import load_scenario

EPLB = ("wide_ep.eplb=true", "wide_ep.redundant_experts=32")


def _line(era: Era, overrides: tuple[str, ...] = ()) -> tuple[str, str]:
    sc = load_scenario("deepseek_wide_ep", overrides)
    d = deployment(sc, sc.systems[0], v1_era=era)
    return " ".join(d.serve[0].argv), " | ".join(d.notes)


def test_v034_names_the_backend_eplb_and_the_ranks_per_node() -> None:
    argv, notes = _line(Era.V0_34_0, EPLB)
    assert "--all2all-backend deepep_low_latency" in argv
    assert '--enable-eplb --eplb-config {"num_redundant_experts": 32}' in argv
    assert "--data-parallel-size-local 8" in argv  # 16 ranks of TP 1 on 8-GPU nodes
    assert "2 nodes" in notes and "--headless --data-parallel-start-rank 8" in notes


def test_v011_sets_the_backend_in_the_environment() -> None:
    argv, notes = _line(Era.V0_11_0)
    assert "--all2all-backend" not in argv and "--enable-eplb" not in argv
    assert "VLLM_ALL2ALL_BACKEND=deepep_low_latency" in notes
