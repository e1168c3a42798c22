"""The names a report folder uses at its top level, in a module that imports no plotting code:
`pagesim run --no-report` needs them (a system's data folder never takes one of them) and
should not pay for importing matplotlib, which only the report draws with."""

from __future__ import annotations

from pagesim.reports.output_folder import MANIFEST_FILE
from pagesim.reports.saved import INPUTS_FILE

PLOTS_DIR = "plots"
BLOCK_MAPS_DIR = "block_maps"
COMMANDS_FILE = "vllm_commands.sh"
RESERVED_NAMES = frozenset(
    {
        PLOTS_DIR,
        BLOCK_MAPS_DIR,
        INPUTS_FILE,
        MANIFEST_FILE,
        "cache",
        "report.html",
        "summary.csv",
        "sweep.csv",
        "scenario.toml",
        "overrides.json",
        "capacity.csv",
        "capacity.html",
        "evaluations.csv",
        "frontier.csv",
        COMMANDS_FILE,
    }
)
