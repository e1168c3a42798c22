"""The built-in traces (name -> CSV file in simulator/workload/data/) and a trace's columns.

One source of truth for the two readers of traces: simulator/workload/traces.py reads a trace for
the workload (with pandas), and simulator/scenario/traces.py checks a scenario's trace at the edge
(with the csv module only, so validating a scenario never imports pandas). The files and their
provenance are described in simulator/workload/data/README.md.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
BUILTIN_TRACES: dict[str, Path] = {
    "azure-conv": DATA_DIR / "azure_conv_2023.csv",
    "azure-code": DATA_DIR / "azure_code_2023.csv",
    "arxiv-summarization": DATA_DIR / "arxiv_summarization.csv",
}
ARRIVAL_COLUMN = "arrived_at"  # seconds; the column names are the Azure traces'
PROMPT_COLUMN = "num_prefill_tokens"
OUTPUT_COLUMN = "num_decode_tokens"
