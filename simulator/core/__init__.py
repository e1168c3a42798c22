"""The vocabulary every layer shares: requests and their lifecycle, the typed messages of a step
(StepPlan, SeqWork, StepCost), the frozen scenario configuration, the model and GPU catalog, and
the error types.

The hardware presets are data: core/presets/*.toml, read by core/preset_files.py
(docs/hardware-presets.md).

Imports: nothing; every other layer may import it.
"""
