"""The simulator: KV-cache mechanism, scheduling policies, SimPy engine, metrics.

Never imports CuPy or torch; measured costs arrive as a profile file.
"""
