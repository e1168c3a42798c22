"""The fleet's step table (cluster/result.py `_fleet_steps`, also a disaggregated fleet's): built a
column at a time, it must be exactly the table the plain pandas expression gives (rows, order,
index, dtypes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from pagesim.simulator.cluster.disagg import run_disagg
from pagesim.simulator.cluster.result import _fleet_steps
from pagesim.simulator.core.link import LinkConfig
from tests.sim_helpers import poisson_workload
from tests.simulator.cluster.disagg_helpers import fleet, run, v1_scenario


def _plain(tables: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(
        [t.assign(replica=i) for i, t in enumerate(tables)], ignore_index=True
    ).sort_values(["start_s", "replica"], kind="stable")


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    assert list(got.dtypes) == list(want.dtypes)
    assert got.index.equals(want.index) and got.index.dtype == want.index.dtype
    assert got.equals(want)


def test_rows_interleave_by_start_then_replica_with_ties_in_table_order() -> None:
    # Replica 0 steps at 0.0, 1.0, 1.0 (two steps at one instant); replica 1 at 0.5 and 1.0.
    a = pd.DataFrame({"start_s": [0.0, 1.0, 1.0], "num_seqs": [1, 2, 3]})
    b = pd.DataFrame({"start_s": [0.5, 1.0], "num_seqs": [4, 5]})
    want = _plain([a, b])
    got = _fleet_steps([a, b])
    assert a.columns.empty and b.columns.empty, "the replicas' columns moved into the fleet's"
    assert got["num_seqs"].tolist() == [1, 4, 2, 3, 5]
    assert got["replica"].tolist() == [0, 1, 0, 0, 1]
    assert got.index.tolist() == [0, 3, 1, 2, 4]  # positions in the concatenation
    _same(got, want)


def test_an_idle_replica_keeps_pandas_own_result() -> None:
    a = pd.DataFrame({"start_s": [0.0, 1.0], "num_seqs": [1, 2]})
    idle = pd.DataFrame({"start_s": [], "num_seqs": []})
    want = _plain([a, idle])
    _same(_fleet_steps([a, idle]), want)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=5),
    seed=st.integers(0, 99),
)
def test_the_table_is_the_plain_pandas_one(lengths: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    tables = [
        pd.DataFrame(
            {
                # few distinct start times: many ties, within and across replicas
                "start_s": np.sort(rng.integers(0, 8, n)).astype(float),
                "duration_s": rng.uniform(0, 1, n),
                "num_seqs": rng.integers(0, 9, n),
            }
        )
        for n in lengths
    ]
    want = _plain(tables)
    _same(_fleet_steps(tables), want)


def test_a_disaggregated_fleet_builds_its_steps_the_same_way() -> None:
    """disagg_result.py uses the same builder: its table is the plain pandas one over the
    replicas' own step tables (prefill replicas first), rows, order, index and dtypes."""
    sc = v1_scenario(poisson_workload(60, 40.0, 300, 40), max_seq_len=1024, num_kv_blocks=200)
    cluster = fleet(sc, 2, 3, LinkConfig(25e9, 1e-5))
    before = run_disagg(sc, cluster)  # the same seed: the same run twice
    replicas = [*before.prefills, *before.decodes]
    tables = [r.result(sc.name, before.end_s, {}).steps for r in replicas]
    assert all(len(t) for t in tables) and len(tables) == 5
    want = _plain(tables)
    _, result = run(sc, cluster, check=False)
    _same(result.steps, want)
    assert sorted(set(result.steps["replica"])) == [0, 1, 2, 3, 4]
