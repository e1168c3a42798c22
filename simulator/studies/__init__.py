"""Studies built on many simulations: parallel resumable sweeps, the capacity search, golden
summaries and the simulator benchmark.

The top layer of the simulator: may import the engine, scenarios and everything below.
"""
