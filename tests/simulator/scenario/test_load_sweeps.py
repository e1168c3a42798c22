"""Scenario files: sweeps expand to the cartesian product of their axes, from the file or the
command line, and a bad axis or value is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_helpers import MINIMAL, error_of, write

from pagesim.simulator.core.config import Reservation, SweepAxis
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.scenario.load import expand_sweep, parse_param


def test_sweep_expansion_is_the_cartesian_product(mini: Path) -> None:
    text = MINIMAL + (
        "[sweep]\naxes = [\n"
        '  { path = "workload.arrival.rate_per_s", values = [1, 2, 4] },\n'
        '  { path = "systems.block_size", values = [8, 16] },\n]\n'
    )
    path = write(mini.parent, text)
    points = expand_sweep(path)
    assert [p for p, _ in points] == [
        {"workload.arrival.rate_per_s": rate, "systems.block_size": block}
        for rate in (1, 2, 4)
        for block in (8, 16)
    ]
    for point, scenario in points:
        assert scenario.workload.arrival.rate_per_s == point["workload.arrival.rate_per_s"]
        assert {s.block_size for s in scenario.systems} == {point["systems.block_size"]}


def test_sweep_axes_from_the_command_line_replace_the_files(mini: Path) -> None:
    axes = [parse_param("systems[1].reservation=max,oracle"), parse_param("seed=1, 2")]
    assert axes == [
        SweepAxis("systems[1].reservation", ("max", "oracle")),
        SweepAxis("seed", (1, 2)),
    ]
    points = expand_sweep(mini, ["systems.max_num_seqs=8"], axes=axes)
    assert len(points) == 4
    assert [(s.systems[1].reservation, s.seed) for _, s in points] == [
        (Reservation.MAX, 1),
        (Reservation.MAX, 2),
        (Reservation.ORACLE, 1),
        (Reservation.ORACLE, 2),
    ]
    assert all(s.systems[0].max_num_seqs == 8 for _, s in points)
    as_text = expand_sweep(
        mini, ["systems.max_num_seqs=8"], params=["systems[1].reservation=max,oracle", "seed=1,2"]
    )
    assert as_text == points


def test_parse_param_errors() -> None:
    with pytest.raises(InputError, match=r"^sweep parameter 'rate': expected dotted.key=value"):
        parse_param("rate")
    with pytest.raises(InputError, match=r"unknown key 'polcy' \(did you mean 'policy'\?\)"):
        parse_param("systems.polcy=orca")
    with pytest.raises(InputError, match=r"no values"):
        parse_param("seed=")


def test_a_bad_sweep_value_fails_at_load_naming_the_axis(mini: Path) -> None:
    text = MINIMAL + '[sweep]\naxes = [{ path = "seed", values = [1, -1] }]\n'
    assert error_of(write(mini.parent, text, "bad.toml")) == (
        "bad.toml: sweep.axes[0].values[1]: seed = -1: seed: must be in [0, 9223372036854775807], "
        "got -1"
    )
    with pytest.raises(InputError, match=r"at sweep point systems.block_size = 0"):
        expand_sweep(mini, axes=[parse_param("systems.block_size=16,0")])
    with pytest.raises(InputError, match=r"s.toml: sweep: no axes"):
        expand_sweep(mini)
