"""One timed simulator run, shared by `pagesim bench sim` and each child of `--against`.

In process, `time_simulation(simulate, scenario)` times this tree's simulator. For `--against`,
this file is also run *by path* in a fresh interpreter whose sys.path starts with another git
revision's tree (see `bench_compare.run_child`): `python -S timing.py TREE '<spec as JSON>'
MODE` imports whichever layout that revision has, builds the same benchmark scenario with that
revision's own code, times it with the function below and prints one JSON line (MODE "time"),
or stops before simulating (MODE "setup": an instruction count's baseline, bench_count.py).
So this module imports only the standard library at the top: run as a script it must not pull
in this tree's pagesim.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

# (bench module, engine module) of every layout a revision with `pagesim bench sim` has had,
# newest first.
LAYOUTS = (
    ("pagesim.simulator.studies.bench", "pagesim.simulator.engine"),  # simulator subpackages
    ("pagesim.simulator.bench", "pagesim.simulator.engine"),  # one namespace, flat simulator
    ("simulator.bench", "simulator.engine"),  # simulator/ as a top-level package
)
# Where each layout keeps `load_scenario(path, overrides)`, newest first.
SCENARIO_LOADERS = (
    "pagesim.simulator.scenario.load",
    "pagesim.simulator.scenario",
    "simulator.scenario",
)


@dataclass(frozen=True)
class BenchSpec:
    """What to time: `synthetic` ShareGPT-like requests at `rate` req/s, or else `requests`
    rows (None: all) of `trace`; on Llama-2-7B / A100-80GB with `policy`."""

    policy: str = "vllm-v1"
    trace: str = "azure-conv"
    requests: int | None = None
    synthetic: int | None = None
    rate: float = 8.0
    # None: the revision's own default for the policy. Set, it is set on both sides of
    # --against, so revisions whose defaults differ (V1 turned prefix caching on) compare
    # like for like.
    prefix_cache: bool | None = None
    # A fleet (revisions with simulator/cluster only): `replicas` of `model` (None: Llama-2-7B)
    # at `tensor_parallel` behind `router`.
    replicas: int = 1
    router: str = "round-robin"
    model: str | None = None
    tensor_parallel: int = 1
    # Or a scenario file (an absolute path once checked: each child runs in its own tree),
    # loaded by each revision's own loader with these `--set` overrides; its system `system`
    # (None: its only one). The options above then stay at their defaults.
    scenario_file: str | None = None
    overrides: tuple[str, ...] = ()
    system: str | None = None

    @property
    def is_fleet(self) -> bool:
        return self.replicas != 1 or self.model is not None or self.tensor_parallel != 1

    @property
    def title(self) -> str:
        """What is timed, for the first line a bench prints."""
        if self.scenario_file is None:
            return f"{self.label}, {self.policy}"
        path = Path(self.scenario_file).resolve()
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        sets = "".join(f" --set {o}" for o in self.overrides)
        system = f", system {self.system}" if self.system is not None else ""
        return f"{shown}{sets}{system}"

    @property
    def label(self) -> str:
        cache = {None: "", True: ", prefix cache on", False: ", prefix cache off"}
        if self.synthetic is not None:
            text = f"sharegpt-like x {self.synthetic} at {self.rate} req/s"
        else:
            text = self.trace
        if self.is_fleet:
            model = self.model or "llama-2-7b"
            text += f" on {self.replicas} x {model} TP{self.tensor_parallel} ({self.router})"
        return text + cache[self.prefix_cache]

    def scenario(self, bench: Any) -> Any:
        """The scenario, built by `bench` (a revision's bench module: each has these two) or
        read from `scenario_file` by the revision's own scenario loader."""
        if self.scenario_file is not None:
            return self._file_scenario()
        if self.synthetic is not None:
            built = bench.sharegpt_scenario(self.synthetic, self.rate, self.policy)
        else:
            built = bench.trace_replay_scenario(self.trace, self.requests, self.policy)
        if self.prefix_cache is not None:
            (system,) = built.systems  # every revision's SystemConfig has enable_prefix_cache
            system = replace(system, enable_prefix_cache=self.prefix_cache)
            built = replace(built, systems=(system,))
        if not self.is_fleet:
            return built
        if not hasattr(bench, "fleet_scenario"):
            raise SystemExit("this revision has no fleets (simulator/cluster): drop --replicas")
        return bench.fleet_scenario(
            built, self.replicas, self.router, self.model, self.tensor_parallel
        )

    def _file_scenario(self) -> Any:
        """`scenario_file` with the overrides, as the revision's loader reads it, cut to
        `system` (every revision's Scenario has `systems`, each with a `name`)."""
        assert self.scenario_file is not None
        built = _scenario_loader()(self.scenario_file, list(self.overrides))
        names = [system.name for system in built.systems]
        if self.system is None and len(names) == 1:
            return built
        if self.system not in names:
            given = "" if self.system is None else f" has no system {self.system!r};"
            raise SystemExit(
                f"{self.scenario_file}{given} name one with --system: {', '.join(names)}"
            )
        chosen = built.systems[names.index(self.system)]
        return replace(built, systems=(chosen,))


def _scenario_loader() -> Callable[..., Any]:
    """`load_scenario(path, overrides)` of the revision first on sys.path, whatever its layout."""
    for name in SCENARIO_LOADERS:
        try:
            return importlib.import_module(name).load_scenario  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    raise SystemExit(f"no scenario loader; tried {', '.join(SCENARIO_LOADERS)}")


@dataclass(frozen=True)
class TimedRun:
    """One timed simulation: wall time, what it simulated, and its process's peak memory."""

    wall_s: float
    cpu_s: float  # this process's CPU time over the run: steadier than wall on a busy machine
    num_requests: int
    num_tokens: float  # prompt + output tokens of every request
    num_steps: int
    peak_rss_mib: float  # of the whole process, imports included
    summary: dict[str, Any]


def time_simulation(simulate: Callable[[Any], Any], scenario: Any) -> TimedRun:
    """Time `simulate(scenario)` (any revision's `simulate`: only its summary's num_requests,
    num_steps and its requests' token columns are read)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    result = simulate(scenario)
    wall_s = time.perf_counter() - start
    cpu_s = time.process_time() - start_cpu
    requests, summary = result.requests, result.summary
    return TimedRun(
        wall_s=wall_s,
        cpu_s=cpu_s,
        num_requests=int(summary["num_requests"]),
        num_tokens=float(requests["output_len"].sum() + requests["prompt_len"].sum()),
        num_steps=int(summary["num_steps"]),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        summary=dict(summary),
    )


def import_layout(root: str) -> tuple[ModuleType, Callable[[Any], Any]]:
    """The bench module and `simulate` of the tree at `root` (first on sys.path), whatever its
    layout; `pagesim` is that tree's own package (its CLI), given the tree's top-level folders
    as subpackages the way an install maps them."""
    import pagesim

    pagesim.__path__.append(root)
    for bench_name, engine_name in LAYOUTS:
        try:
            bench = importlib.import_module(bench_name)
            return bench, importlib.import_module(engine_name).simulate
        except ImportError:
            continue
    raise ImportError(f"{root}: no bench module; tried {', '.join(b for b, _ in LAYOUTS)}")


def _run_child(root: str, spec_json: str, mode: str = "time") -> None:
    """Time the benchmark `spec_json` describes with the tree at `root`; print it as JSON.
    `mode` "setup": stop before simulating, printing `{}` (an instruction count's baseline:
    the imports and the scenario built, bench_count.py)."""
    if mode not in ("time", "setup"):
        raise SystemExit(f"timing.py: unknown mode {mode!r}; valid: time, setup")
    bench, simulate = import_layout(root)
    fields = json.loads(spec_json)
    fields["overrides"] = tuple(fields.get("overrides", ()))  # a JSON list
    scenario = BenchSpec(**fields).scenario(bench)
    if mode == "setup":
        print("{}")
        return
    run = time_simulation(simulate, scenario)
    print(json.dumps(asdict(run)))


if __name__ == "__main__":
    _run_child(*sys.argv[1:4])
