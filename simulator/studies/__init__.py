"""Studies built on simulations: parallel resumable sweeps (`sweep`, over `points`, their
`point_cache` and the `executors` that run them), the capacity search, golden summaries, the
simulator benchmark, and `runs`: what each `pagesim` command computes, one call and one typed
result each.

The top layer of the simulator. Imports: engine, scenario, cluster, deploy, metrics, execution,
kv, core.
"""
