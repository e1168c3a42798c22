"""No two modules share a name unless they are the same idea in two layers, and say so.

A name repeated across packages must be listed here with the idea it stands for, and the
docstrings of its modules must name each other (a module names another by its folder and file,
`scenario/cluster.py`, or dotted, `calibration.fidelity`): every module of the name is named by,
or names, another, so a reader who opens one finds the others. Tests mirror the package
folders and are not counted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# name -> the one idea its modules share, layer by layer
SAME_IDEA = {
    "capacity.py": "`pagesim capacity`: its settings (core), reading them (scenario), its pages",
    "catalog.py": "the model and GPU catalog: the presets (core), a scenario's [model]/[gpu]",
    "cluster.py": "a fleet's pools and router: the configuration (core), reading [cluster]",
    "deployments.py": "the replicas a run builds: listed (core), checked (scenario)",
    "disagg.py": "a disaggregated fleet: simulated (cluster), its [cluster] keys read (scenario)",
    "factory.py": "the one place a system's part of the layer is built: scheduler, execution model",
    "fidelity.py": "simulation against real execution: measured (calibration), rendered (reports)",
    "offload.py": "the KV offload tier: its settings (core), run (policies), read (scenario)",
    "link.py": "the KV link of a disaggregated fleet: its presets (core), its transfers (cluster)",
    "profile.py": "the profile file: written (calibration), priced from (execution)",
    "result.py": "a run's RunResult: one system (metrics), a fleet as one (cluster)",
    "wide_ep.py": "DP attention + wide EP: its settings (core), read and checked (scenario)",
    "speculative.py": "speculative decoding: scheduled (policies), priced (execution), read",
    "tour.py": "`pagesim explain`: the stops run (studies), their folder written (reports)",
    "traces.py": "trace CSV files: read for a run (workload), checked before it (scenario)",
}
# A different idea under a repeated name, not yet renamed, and why.
NOT_YET_RENAMED: dict[str, str] = {}


FOLDERS = ("pagesim", "simulator", "calibration", "reports", "scenarios", "kernels")


def _modules() -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if path.name != "__init__.py":
                by_name[path.name].append(str(path.relative_to(ROOT)))
    return {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}


REPEATED = _modules()


def _names(docstring: str, path: str) -> bool:
    """Whether `docstring` names the module at `path`."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" in docstring or f"{p.parent.name}.{p.stem}" in docstring


def _docstring(path: str) -> str:
    return ast.get_docstring(ast.parse((ROOT / path).read_text())) or ""


def test_every_repeated_name_is_one_idea_listed_here() -> None:
    assert sorted(REPEATED) == sorted(SAME_IDEA)


@pytest.mark.parametrize("name", sorted(SAME_IDEA))
def test_the_modules_of_a_repeated_name_name_each_other(name: str) -> None:
    members = [m for m in REPEATED.get(name, []) if m not in NOT_YET_RENAMED]
    assert len(members) > 1, f"{name} is no longer repeated: drop it from SAME_IDEA"
    docs = {m: _docstring(m) for m in members}
    alone = [
        m
        for m in members
        if not any(_names(docs[m], o) or _names(docs[o], m) for o in members if o != m)
    ]
    assert not alone, f"{name}: {alone} neither name nor are named by another {name}"


def test_a_module_named_by_no_other_is_found() -> None:
    assert _names("read by simulator/scenario/cluster.py", "simulator/scenario/cluster.py")
    assert _names("renders a calibration.fidelity.FidelityResult", "calibration/fidelity.py")
    assert not _names("the cluster of replicas", "simulator/scenario/cluster.py")


def test_the_names_not_yet_renamed_still_exist() -> None:
    for path in NOT_YET_RENAMED:
        assert (ROOT / path).exists(), f"{path} was renamed: drop it from NOT_YET_RENAMED"
