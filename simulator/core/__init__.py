"""The vocabulary every layer shares: requests and their lifecycle, the typed messages of a step
(StepPlan, SeqWork, StepCost), the frozen scenario configuration, the model and GPU catalog, and
the error types.

Imports nothing else of pagesim: every other layer may import it.
"""
