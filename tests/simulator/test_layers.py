"""The import contract of the house (simulator/__init__.py), read from the sources' import
statements — those inside functions and under `if TYPE_CHECKING:` included:

    studies > {engine, scenario, deploy} > cluster > fastpath
            > {policies, metrics, execution, workload} > kv > core

A module imports only from its own subpackage and the layers below it; the simulator never imports
the CLI, `calibration` or `reports`; nothing but `calibration` imports CuPy or torch; no two
modules import each other, directly or around a cycle; and every package's __init__ docstring
says what the package imports ("Imports: core, kv."), truly: the test reads the statement.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {  # import name -> folder
    "pagesim": ROOT / "pagesim",
    "pagesim.simulator": ROOT / "simulator",
    "pagesim.calibration": ROOT / "calibration",
    "pagesim.reports": ROOT / "reports",
    "pagesim.scenarios": ROOT / "scenarios",
    "pagesim.kernels": ROOT / "kernels",
}
LAYER = {
    "core": 0,
    "kv": 1,
    "policies": 2,
    "metrics": 2,
    "execution": 2,
    "workload": 2,
    "fastpath": 2.25,  # the decode fast path: over the policies it speeds up, under the loop
    "cluster": 2.5,  # the run loop: arrivals, replicas, fleets; engine.simulate runs them
    "engine": 3,
    "scenario": 3,
    "deploy": 3,  # a configuration's vLLM command lines, read from config and workload
    "studies": 4,
}
GPU_MODULES = ("cupy", "torch")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((name, *parts))] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module named by an import in `path` (as written: `from a.b import c` gives a.b and,
    when a.b.c is a module, a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


ALL_IMPORTS = {name: _imports(path) for name, path in MODULES.items()}  # each file parsed once
GRAPH = {name: {i for i in imports if i in MODULES} for name, imports in ALL_IMPORTS.items()}


def _part(module: str) -> str | None:
    """The simulator layer a module belongs to (None outside the simulator)."""
    if not module.startswith("pagesim.simulator."):
        return None
    return module.split(".")[2]


def test_every_simulator_module_belongs_to_a_layer() -> None:
    unplaced = {m for m in MODULES if m.startswith("pagesim.simulator.") and _part(m) not in LAYER}
    assert not unplaced


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _part(m) in LAYER))
def test_a_simulator_module_imports_only_its_own_layer_and_those_below(module: str) -> None:
    own = _part(module)
    assert own is not None
    wrong = []
    for target in sorted(GRAPH[module]):
        theirs = _part(target)
        if target == "pagesim":
            continue  # the package root: its version string
        if theirs is None:
            wrong.append(f"{target} (outside the simulator)")
        elif theirs != own and LAYER[theirs] >= LAYER[own]:
            wrong.append(f"{target} ({theirs} is not below {own})")
    assert not wrong, f"{module} imports {wrong}"


# --- what each package says it imports -------------------------------------------------------

_OUTER = ("calibration", "reports", "scenarios", "kernels")


def _package(module: str) -> str:
    """The package a module is in (a package's __init__ is in the package itself)."""
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def _unit(target: str, viewer: str) -> str | None:
    """How package `viewer`'s docstring names the package of `target`: a simulator layer by its
    name from inside the simulator (core, kv, ..., engine), the simulator as `simulator` from
    outside it, the other packages by name, the command (pagesim/*.py) as `cli`; None for the
    package root `pagesim` (its version string)."""
    parts = target.split(".")
    if target == "pagesim" or target == "pagesim.simulator":
        return None
    if parts[1] == "simulator":
        return parts[2] if viewer.startswith("pagesim.simulator") else "simulator"
    return parts[1] if parts[1] in _OUTER else "cli"


def _own_unit(package: str) -> str:
    if package == "pagesim.simulator":
        return "engine"  # the package's one module
    return "cli" if package == "pagesim" else package.rsplit(".", 1)[-1]


def _actual_imports(package: str) -> set[str]:
    """The packages that `package`'s own modules (not its subpackages') import."""
    found = set()
    for module, targets in GRAPH.items():
        if _package(module) == package:
            found |= {_unit(t, package) for t in targets}
    return {u for u in found if u is not None} - {_own_unit(package)}


def stated_imports(docstring: str) -> set[str] | None:
    """The packages named by the docstring's `Imports:` statement, up to its first `.` or `;`
    ("nothing": none; the words after "alone" or in parentheses are commentary); None if it has
    no such statement."""
    found = re.search(r"Imports: ([^.;]*)", " ".join(docstring.split()))
    if found is None:
        return None
    text = re.sub(r"\([^)]*\)", "", found.group(1)).replace(" and ", ", ").replace(" alone", "")
    names = {name.strip(" `") for name in text.split(",")}
    return set() if names == {"nothing"} else names


PACKAGE_NAMES = sorted({_package(m) for m in MODULES})


@pytest.mark.parametrize("package", PACKAGE_NAMES)
def test_a_packages_docstring_states_what_it_imports(package: str) -> None:
    """Each package's __init__ says what it imports ("Imports: core, kv."), and says the truth:
    no package it does not import, none it imports left out."""
    init = MODULES[package]
    stated = stated_imports(ast.get_docstring(ast.parse(init.read_text())) or "")
    actual = _actual_imports(package)
    assert stated is not None, f"{init}: no 'Imports:' line; it imports {sorted(actual)}"
    assert stated == actual, (
        f"{init}: says it imports {sorted(stated)}; its modules import {sorted(actual)} "
        f"(claimed, not imported: {sorted(stated - actual)}; imported, not said: "
        f"{sorted(actual - stated)})"
    )


def test_the_imports_statement_is_read_as_written() -> None:
    assert stated_imports("Mechanism.\n\nImports: core alone.") == {"core"}
    assert stated_imports("Imports: core, kv (for sizes); never policies.") == {"core", "kv"}
    assert stated_imports("Imports: nothing else of pagesim; every layer may.") == {
        "nothing else of pagesim"
    }
    assert stated_imports("Imports: nothing.") == set()
    assert stated_imports("No statement here.") is None
    # and the check sees a lie: core imports nothing, kv imports core
    assert _actual_imports("pagesim.simulator.core") == set()
    assert _actual_imports("pagesim.simulator.kv") == {"core"}


def test_gpu_libraries_are_imported_only_in_calibration() -> None:
    wrong = {
        m: sorted(i for i in ALL_IMPORTS[m] if i.split(".")[0] in GPU_MODULES)
        for m in MODULES
        if not m.startswith("pagesim.calibration")
    }
    assert not {m: i for m, i in wrong.items() if i}


def test_reports_never_import_gpu_code() -> None:
    """Reports render results: the calibration package's GPU side (kernel launch, backends,
    executor) is never among their imports."""
    gpu_side = ("pagesim.calibration.kernel", "pagesim.calibration.backends",
                "pagesim.calibration.executor", "pagesim.calibration.harness")  # fmt: skip
    wrong = {
        m: sorted(i for i in GRAPH[m] if i.startswith(gpu_side))
        for m in MODULES
        if m.startswith("pagesim.reports")
    }
    assert not {m: i for m, i in wrong.items() if i}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(GRAPH):
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(GRAPH[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_type_only_imports_included() -> None:
    # A package's __init__ that only documents it imports nothing, so parents are not edges.
    assert _cycles() == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    saved = dict(GRAPH)
    try:
        GRAPH["pagesim.simulator.core.request"] = {"pagesim.simulator.core.plan"}
        GRAPH["pagesim.simulator.core.plan"] = {"pagesim.simulator.core.request"}
        assert ["pagesim.simulator.core.plan", "pagesim.simulator.core.request"] in _cycles()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)
