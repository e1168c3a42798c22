"""`pagesim deploy`: the `vllm serve` and benchmark command lines of a scenario's systems, the
knobs each sets and those no flag sets (simulator/deploy/). Prints; simulates nothing."""

from __future__ import annotations

from typing import Annotated

import typer

from pagesim.app import SetOption, app


@app.command()
def deploy(
    scenario: Annotated[str, typer.Argument(help="A scenario TOML file or a built-in name.")],
    set_: SetOption = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            help="Write vllm-v1 systems' commands for this vLLM release (0.11, 0.33 or 0.34) "
            "instead of their own."
        ),
    ] = None,
) -> None:
    """Print each system's `vllm serve` command (with the knobs it simulates, as the flags of
    its vLLM release spell them) and a benchmark command replaying the scenario's traffic.

    Example: pagesim deploy fleet_capacity; pagesim deploy spec_decode --vllm-version 0.11
    """
    from pagesim.simulator.deploy.commands import deployments
    from pagesim.simulator.deploy.eras import parse_v1_era
    from pagesim.simulator.scenario.load import load_scenario, resolve_scenario

    era = None if vllm_version is None else parse_v1_era(vllm_version, "--vllm-version")
    loaded = load_scenario(resolve_scenario(scenario), list(set_ or []))
    typer.echo("\n\n".join(d.text() for d in deployments(loaded, era)))
